//! Copies between registered memory (named by SGE lists) and the provider's private
//! buffers, with the key checks hardware makes on every DMA. UD and atomics use them;
//! RC payloads move between the socket and registered memory directly (`pieces`).
//!
//! Registered memory is only touched through raw pointers: the peer (or the
//! application) may access it concurrently, exactly as with a NIC, so no `&[u8]` over
//! it is ever formed here.

use crate::access::AccessFlags;
use crate::wr::Sge;

use super::keys::{KeyError, KeyTable};

/// Why a local scatter failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScatterError {
    /// A key, PD, bounds or rights check failed.
    Prot(KeyError),
    /// The data does not fit the scatter list.
    Len,
}

/// Calls `f(sge, start_in_sge, n, pos_in_data)` for each piece of the byte range
/// `[offset, offset + len)` of the concatenation of `sges`; returns bytes covered.
fn walk<E>(
    sges: &[Sge],
    offset: u64,
    len: usize,
    mut f: impl FnMut(&Sge, u64, usize, usize) -> Result<(), E>,
) -> Result<usize, E> {
    let mut skip = offset;
    let mut done = 0usize;
    for sge in sges {
        if done == len {
            break;
        }
        let l = u64::from(sge.length);
        if skip >= l {
            skip -= l;
            continue;
        }
        let n = ((l - skip) as usize).min(len - done);
        f(sge, skip, n, done)?;
        done += n;
        skip = 0;
    }
    Ok(done)
}

/// Copies bytes `[offset, offset + out.len())` of the SGE list into `out`, checking
/// each SGE it touches (whole SGE: key, PD, bounds). The caller keeps the range inside
/// the list's total.
pub(crate) fn gather(
    keys: &KeyTable,
    pd: u32,
    sges: &[Sge],
    offset: u64,
    out: &mut [u8],
) -> Result<(), KeyError> {
    let len = out.len();
    walk(sges, offset, len, |sge, start, n, pos| {
        let r = keys.resolve(
            sge.lkey,
            pd,
            sge.addr,
            u64::from(sge.length),
            AccessFlags::empty(),
        )?;
        // SAFETY: `[r.ptr + start, + n)` lies inside the SGE, which `resolve` checked is
        // inside a live registered buffer held by `r.buf`; `out[pos..pos + n]` is in
        // bounds because `walk` never exceeds `len`; the regions cannot overlap since
        // `out` is provider-private memory.
        unsafe {
            std::ptr::copy_nonoverlapping(r.ptr.add(start as usize), out.as_mut_ptr().add(pos), n)
        };
        Ok(())
    })?;
    Ok(())
}

/// Copies `data` into the SGE list at byte `offset`, checking each SGE it touches for
/// key, PD, bounds and LOCAL_WRITE.
pub(crate) fn scatter(
    keys: &KeyTable,
    pd: u32,
    sges: &[Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), ScatterError> {
    let done = walk(sges, offset, data.len(), |sge, start, n, pos| {
        let r = keys
            .resolve(
                sge.lkey,
                pd,
                sge.addr,
                u64::from(sge.length),
                AccessFlags::LOCAL_WRITE,
            )
            .map_err(ScatterError::Prot)?;
        // SAFETY: destination inside the checked, live SGE range (held by `r.buf`);
        // source `data[pos..pos + n]` in bounds; `data` is provider-private.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr().add(pos), r.ptr.add(start as usize), n)
        };
        Ok(())
    })?;
    if done < data.len() {
        return Err(ScatterError::Len);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mr_buffer::MrBuffer;
    use std::sync::Arc;

    #[test]
    fn gather_and_scatter_span_sges_and_check_rights() {
        let keys = KeyTable::default();
        let a = Arc::new(MrBuffer::zeroed(16));
        let b = Arc::new(MrBuffer::zeroed(16));
        let ka = keys.insert(a.clone(), 1, AccessFlags::LOCAL_WRITE);
        let kb = keys.insert(b.clone(), 1, AccessFlags::empty());
        let sa = Sge {
            addr: a.as_ptr() as u64,
            length: 4,
            lkey: ka,
        };
        let sa2 = Sge {
            addr: a.as_ptr() as u64 + 8,
            length: 4,
            lkey: ka,
        };
        scatter(&keys, 1, &[sa, sa2], 0, b"abcdefgh").unwrap();
        let mut out = [0u8; 6];
        gather(&keys, 1, &[sa, sa2], 1, &mut out).unwrap();
        assert_eq!(&out, b"bcdefg");
        assert_eq!(
            scatter(&keys, 1, &[sa], 0, b"too long"),
            Err(ScatterError::Len)
        );
        let sb = Sge {
            addr: b.as_ptr() as u64,
            length: 4,
            lkey: kb,
        };
        assert_eq!(
            scatter(&keys, 1, &[sb], 0, b"x"),
            Err(ScatterError::Prot(KeyError::Rights))
        );
        assert_eq!(
            gather(&keys, 2, &[sb], 0, &mut out[..1]),
            Err(KeyError::WrongPd)
        );
    }
}
