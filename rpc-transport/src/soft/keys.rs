//! The per-device key table: what an lkey or rkey names, and the checks on each use.
//!
//! A key is `index << 8 | generation`; deregistration bumps the slot's generation,
//! so a stale key fails at once even if the slot is reused. Entries hold the
//! buffer by `Arc`, so an operation that resolved a key before deregistration keeps
//! the memory alive until it finishes copying.

use std::sync::{Arc, RwLock};

use crate::access::AccessFlags;
use crate::mr_buffer::MrBuffer;

/// Why an access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyError {
    /// No live registration under this key.
    Invalid,
    /// Registered in another protection domain.
    WrongPd,
    /// The range is not inside the region.
    Bounds,
    /// The region lacks a needed access right.
    Rights,
}

#[derive(Clone)]
struct Entry {
    buf: Arc<MrBuffer>,
    pd: u32,
    access: AccessFlags,
}

struct Slot {
    gen: u8,
    entry: Option<Entry>,
}

#[derive(Default)]
struct Table {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

/// Registrations of one device. Readers (every data access) take a shared lock;
/// only registration and deregistration write.
#[derive(Default)]
pub(crate) struct KeyTable {
    t: RwLock<Table>,
}

/// A checked range of registered memory: `ptr` is valid for the checked length while
/// `buf` is held.
pub(crate) struct Resolved {
    pub(crate) ptr: *mut u8,
    pub(crate) buf: Arc<MrBuffer>,
}

impl KeyTable {
    /// Registers `buf` for `pd` with `access`; returns its key (lkey = rkey).
    pub(crate) fn insert(&self, buf: Arc<MrBuffer>, pd: u32, access: AccessFlags) -> u32 {
        let mut t = self.t.write().unwrap_or_else(|e| e.into_inner());
        let entry = Some(Entry { buf, pd, access });
        let idx = match t.free.pop() {
            Some(i) => {
                t.slots[i as usize].entry = entry;
                i
            }
            None => {
                t.slots.push(Slot { gen: 1, entry });
                (t.slots.len() - 1) as u32
            }
        };
        (idx << 8) | u32::from(t.slots[idx as usize].gen)
    }

    /// Regions registered now.
    pub(crate) fn live(&self) -> usize {
        let t = self.t.read().unwrap_or_else(|e| e.into_inner());
        t.slots.len() - t.free.len()
    }

    /// Invalidates `key` immediately.
    pub(crate) fn remove(&self, key: u32) {
        let mut t = self.t.write().unwrap_or_else(|e| e.into_inner());
        let idx = key >> 8;
        if let Some(slot) = t.slots.get_mut(idx as usize) {
            if u32::from(slot.gen) == key & 0xff && slot.entry.take().is_some() {
                // Generation 0 is never handed out, so key 0 is always invalid.
                slot.gen = slot.gen.wrapping_add(1).max(1);
                t.free.push(idx);
            }
        }
    }

    /// Checks that `[addr, addr + len)` is inside the region named by `key`, in `pd`,
    /// with every right in `need`.
    pub(crate) fn resolve(
        &self,
        key: u32,
        pd: u32,
        addr: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<Resolved, KeyError> {
        let t = self.t.read().unwrap_or_else(|e| e.into_inner());
        let e = t
            .slots
            .get((key >> 8) as usize)
            .filter(|s| u32::from(s.gen) == key & 0xff)
            .and_then(|s| s.entry.as_ref())
            .ok_or(KeyError::Invalid)?;
        if e.pd != pd {
            return Err(KeyError::WrongPd);
        }
        if !e.buf.contains(addr, len) {
            return Err(KeyError::Bounds);
        }
        if !e.access.contains(need) {
            return Err(KeyError::Rights);
        }
        // Derived from the buffer's own pointer (not from the integer `addr`), so the
        // result carries the allocation's provenance.
        let base = e.buf.as_ptr();
        Ok(Resolved {
            ptr: base.wrapping_add((addr - base as u64) as usize),
            buf: e.buf.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_pd_bounds_rights_and_staleness() {
        let t = KeyTable::default();
        let buf = Arc::new(MrBuffer::zeroed(100));
        let base = buf.as_ptr() as u64;
        let k = t.insert(
            buf.clone(),
            1,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        );
        assert!(t.resolve(k, 1, base, 100, AccessFlags::REMOTE_READ).is_ok());
        assert_eq!(
            t.resolve(k, 2, base, 1, AccessFlags::empty()).err(),
            Some(KeyError::WrongPd)
        );
        assert_eq!(
            t.resolve(k, 1, base + 1, 100, AccessFlags::empty()).err(),
            Some(KeyError::Bounds)
        );
        assert_eq!(
            t.resolve(k, 1, base - 1, 1, AccessFlags::empty()).err(),
            Some(KeyError::Bounds)
        );
        assert_eq!(
            t.resolve(k, 1, base, 8, AccessFlags::REMOTE_WRITE).err(),
            Some(KeyError::Rights)
        );
        assert_eq!(
            t.resolve(0, 1, base, 1, AccessFlags::empty()).err(),
            Some(KeyError::Invalid)
        );

        // A resolved range keeps its memory alive after deregistration.
        let held = t.resolve(k, 1, base, 1, AccessFlags::empty()).unwrap();
        t.remove(k);
        assert_eq!(
            t.resolve(k, 1, base, 1, AccessFlags::empty()).err(),
            Some(KeyError::Invalid)
        );
        assert_eq!(Arc::strong_count(&held.buf), 2);

        // The slot is reused under a new key; the old key stays dead.
        let k2 = t.insert(buf, 1, AccessFlags::empty());
        assert_eq!(k2 >> 8, k >> 8);
        assert_ne!(k2, k);
        assert_eq!(
            t.resolve(k, 1, base, 1, AccessFlags::empty()).err(),
            Some(KeyError::Invalid)
        );
    }
}
