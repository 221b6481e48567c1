//! A body by reference as a gather list: inline runs carried in the frame and
//! references into the sender's registered memory, which together, in order, are
//! the encoded body. [`wire`](super::wire)'s "Large messages by reference" says
//! when it is sent and what it exposes; this is its layout:
//!
//! ```text
//! 0 parts:u16, then `parts` entries, each
//!   0 len:u32 with bit 31 (INLINE) set, then len bytes     an inline run
//!   0 len:u32 with bit 31 clear, 4 addr:u64, 12 rkey:u32    a reference
//! ```
//!
//! Big endian. 1 ≤ `parts` ≤ [`MAX_GATHER_PARTS`]; every part is at least one byte;
//! the lengths sum to the head's `body_len`; at least one part is a reference (a
//! list of inline runs only would be an inline body); a reference does not wrap the
//! address space; the list fills the frame after the metadata exactly. Anything else
//! is malformed, exactly as a single descriptor that breaks its rules is.

use super::wire::{Descriptor, Malformed, BY_REF, DESCRIPTOR_LEN, GATHER};

/// Parts one list may have: bounds the reader's work (and its Read WRs) per body.
pub const MAX_GATHER_PARTS: usize = 16;
/// Bit 31 of a part's length: an inline run follows instead of a reference.
const INLINE: u32 = 1 << 31;
/// Bytes of a reference entry.
const REF_LEN: usize = 16;

/// One part of a gather list, borrowed from a frame or from what a sender lends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Bytes the frame carries.
    Inline(&'a [u8]),
    /// Bytes in the sender's registered memory.
    Ref(Descriptor),
}

impl Piece<'_> {
    /// Bytes of the body this part is.
    pub fn len(&self) -> usize {
        match self {
            Piece::Inline(b) => b.len(),
            Piece::Ref(d) => d.len as usize,
        }
    }

    /// Whether the part has no bytes (never, in a well-formed list).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of its entry in the list.
    fn wire_len(&self) -> usize {
        match self {
            Piece::Inline(b) => 4 + b.len(),
            Piece::Ref(_) => REF_LEN,
        }
    }
}

/// Bytes the list of `pieces` takes in a frame.
pub fn gather_len(pieces: &[Piece<'_>]) -> usize {
    2 + pieces.iter().map(Piece::wire_len).sum::<usize>()
}

/// Writes the list of `pieces` at the start of `out` (at least [`gather_len`]
/// bytes); its length. The caller keeps to the rules above.
pub fn write_gather(out: &mut [u8], pieces: &[Piece<'_>]) -> usize {
    debug_assert!((1..=MAX_GATHER_PARTS).contains(&pieces.len()));
    out[..2].copy_from_slice(&(pieces.len() as u16).to_be_bytes());
    let mut at = 2;
    for p in pieces {
        match p {
            Piece::Inline(b) => {
                out[at..at + 4].copy_from_slice(&(b.len() as u32 | INLINE).to_be_bytes());
                out[at + 4..at + 4 + b.len()].copy_from_slice(b);
            }
            Piece::Ref(d) => {
                out[at..at + 4].copy_from_slice(&d.len.to_be_bytes());
                out[at + 4..at + 12].copy_from_slice(&d.addr.to_be_bytes());
                out[at + 12..at + 16].copy_from_slice(&d.rkey.to_be_bytes());
            }
        }
        at += p.wire_len();
    }
    at
}

/// What a frame by reference carries after its metadata: a single descriptor of
/// the sender's region, or a gather list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByRef<'a> {
    /// The whole body in one region ([`BY_REF`]).
    One(Descriptor),
    /// The body's parts ([`BY_REF`] | [`GATHER`]).
    Gather(&'a [Piece<'a>]),
}

impl ByRef<'_> {
    /// Bytes of the body.
    pub fn body_len(&self) -> usize {
        match self {
            ByRef::One(d) => d.len as usize,
            ByRef::Gather(p) => p.iter().map(Piece::len).sum(),
        }
    }

    /// Bytes it takes in the frame.
    pub fn wire_len(&self) -> usize {
        match self {
            ByRef::One(_) => DESCRIPTOR_LEN,
            ByRef::Gather(p) => gather_len(p),
        }
    }

    /// Writes it at the start of `out` (at least [`ByRef::wire_len`] bytes).
    pub fn write(&self, out: &mut [u8]) {
        match self {
            ByRef::One(d) => d.write(out),
            ByRef::Gather(p) => {
                write_gather(out, p);
            }
        }
    }

    /// The head flags that announce it.
    pub fn flags(&self) -> u8 {
        match self {
            ByRef::One(_) => BY_REF,
            ByRef::Gather(_) => BY_REF | GATHER,
        }
    }
}

/// A gather list read from a frame and checked, kept (the frame's receive goes
/// back before the Reads end) until the reader has placed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gather {
    /// The list as it was on the wire.
    list: Box<[u8]>,
    /// Bytes of the body.
    len: u32,
}

impl Gather {
    /// Checks that `b` (a frame's bytes after its metadata) is exactly a gather
    /// list of `body_len` bytes, and keeps a copy.
    pub fn read(b: &[u8], body_len: u32) -> Result<Gather, Malformed> {
        let mut sum = 0u64;
        let mut refs = 0;
        let mut n = 0;
        for p in parts(b)? {
            let p = p?;
            n += 1;
            sum += p.len() as u64;
            if p.is_empty() {
                return Err(Malformed("an empty part in a gather list"));
            }
            if let Piece::Ref(d) = p {
                refs += 1;
                if d.addr.checked_add(u64::from(d.len)).is_none() {
                    return Err(Malformed("a gather reference that wraps the address space"));
                }
            }
        }
        if n == 0 || n > MAX_GATHER_PARTS {
            return Err(Malformed("a gather list of no parts or too many"));
        }
        if sum != u64::from(body_len) {
            return Err(Malformed(
                "a gather list whose parts do not sum to the body",
            ));
        }
        if refs == 0 {
            return Err(Malformed("a gather list without a reference"));
        }
        Ok(Gather {
            list: b.into(),
            len: body_len,
        })
    }

    /// Bytes of the body.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the body is empty (never: a list has a reference of at least a byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The parts, in body order.
    pub fn pieces(&self) -> impl Iterator<Item = Piece<'_>> {
        parts(&self.list)
            .expect("checked by read")
            .map(|p| p.expect("checked by read"))
    }

    /// The first reference (what a reader reports the body under, as it would a
    /// single descriptor), with the whole body's length.
    pub fn summary(&self) -> Descriptor {
        let first = self
            .pieces()
            .find_map(|p| match p {
                Piece::Ref(d) => Some(d),
                Piece::Inline(_) => None,
            })
            .expect("checked by read: a reference");
        Descriptor {
            len: self.len,
            ..first
        }
    }
}

/// The entries of a list, each checked to lie inside `b`; the list must end
/// exactly where `b` does and announce at most [`MAX_GATHER_PARTS`] entries.
fn parts(b: &[u8]) -> Result<impl Iterator<Item = Result<Piece<'_>, Malformed>>, Malformed> {
    let count = b
        .get(..2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]) as usize)
        .ok_or(Malformed("a gather list shorter than its count"))?;
    if count > MAX_GATHER_PARTS {
        return Err(Malformed("a gather list of too many parts"));
    }
    let mut at = 2;
    let mut left = count;
    Ok(std::iter::from_fn(move || {
        if left == 0 {
            return (at != b.len())
                .then_some(Err(Malformed("bytes after a gather list's last part")));
        }
        left -= 1;
        let Some(word) = b.get(at..at + 4) else {
            at = b.len();
            left = 0;
            return Some(Err(Malformed("a gather list cut short")));
        };
        let word = u32::from_be_bytes(word.try_into().expect("4 bytes"));
        let (piece, next) = if word & INLINE != 0 {
            let n = (word & !INLINE) as usize;
            match b.get(at + 4..at + 4 + n) {
                Some(run) => (Piece::Inline(run), at + 4 + n),
                None => {
                    left = 0;
                    at = b.len();
                    return Some(Err(Malformed("an inline run beyond the frame")));
                }
            }
        } else {
            match b.get(at + 4..at + REF_LEN) {
                Some(r) => (
                    Piece::Ref(Descriptor {
                        addr: u64::from_be_bytes(r[..8].try_into().expect("8 bytes")),
                        rkey: u32::from_be_bytes(r[8..12].try_into().expect("4 bytes")),
                        len: word,
                    }),
                    at + REF_LEN,
                ),
                None => {
                    left = 0;
                    at = b.len();
                    return Some(Err(Malformed("a gather reference cut short")));
                }
            }
        };
        at = next;
        Some(Ok(piece))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(addr: u64, len: u32) -> Descriptor {
        Descriptor { addr, rkey: 7, len }
    }

    fn list(pieces: &[Piece<'_>]) -> Vec<u8> {
        let mut out = vec![0; gather_len(pieces)];
        assert_eq!(write_gather(&mut out, pieces), out.len());
        out
    }

    #[test]
    fn a_list_round_trips_and_sums_to_the_body() {
        let pieces = [
            Piece::Inline(b"\x0a\x80\x80\x02"),
            Piece::Ref(d(0x1000, 1 << 22)),
            Piece::Inline(b"tail"),
        ];
        let b = list(&pieces);
        let g = Gather::read(&b, 8 + (1 << 22)).expect("well formed");
        assert_eq!(g.pieces().collect::<Vec<_>>(), pieces);
        assert_eq!(g.summary(), d(0x1000, 8 + (1 << 22)));
    }

    #[test]
    fn bad_lists_are_malformed() {
        let good = [Piece::Inline(b"ab"), Piece::Ref(d(64, 100))];
        let b = list(&good);
        assert!(Gather::read(&b, 102).is_ok());
        // Parts that do not sum to the stated length, either way.
        assert!(Gather::read(&b, 101).is_err());
        assert!(Gather::read(&b, 103).is_err());
        // Cut short, or bytes left over.
        assert!(Gather::read(&b[..b.len() - 1], 102).is_err());
        let mut longer = b.clone();
        longer.push(0);
        assert!(Gather::read(&longer, 102).is_err());
        // No reference; an empty part; a wrapping reference.
        assert!(Gather::read(&list(&[Piece::Inline(b"ab")]), 2).is_err());
        assert!(Gather::read(&list(&[Piece::Inline(b""), Piece::Ref(d(0, 5))]), 5).is_err());
        assert!(Gather::read(&list(&[Piece::Ref(d(u64::MAX - 2, 5))]), 5).is_err());
        // Too many parts, and a count the entries do not fill.
        let many = vec![Piece::Ref(d(0, 1)); MAX_GATHER_PARTS + 1];
        let n = many.len() as u32;
        let mut out = vec![0; gather_len(&many)];
        out[..2].copy_from_slice(&(n as u16).to_be_bytes());
        write_gather_unchecked(&mut out[2..], &many);
        assert!(Gather::read(&out, n).is_err());
        let mut short_count = b.clone();
        short_count[1] = 3;
        assert!(Gather::read(&short_count, 102).is_err());
        assert!(Gather::read(&[], 0).is_err());
        assert!(Gather::read(&[0, 0], 0).is_err(), "no parts");
    }

    /// Entries without the count (to build lists the writer would refuse).
    fn write_gather_unchecked(out: &mut [u8], pieces: &[Piece<'_>]) {
        let mut at = 0;
        for p in pieces {
            let Piece::Ref(d) = p else { unreachable!() };
            out[at..at + 4].copy_from_slice(&d.len.to_be_bytes());
            out[at + 4..at + 12].copy_from_slice(&d.addr.to_be_bytes());
            out[at + 12..at + 16].copy_from_slice(&d.rkey.to_be_bytes());
            at += REF_LEN;
        }
    }
}
