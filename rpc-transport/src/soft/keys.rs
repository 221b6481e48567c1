//! The per-device key table: what an lkey or rkey names, and the checks on each use.
//!
//! A key is `index << 8 | generation`; deregistration bumps the slot's generation,
//! so a stale key fails at once even if the slot is reused. Entries hold the
//! buffer by `Arc`, so an operation that resolved a key before deregistration keeps
//! the memory alive until it finishes copying.
//!
//! A slot may also hold a type-2 memory window: its key's low byte is the one its
//! latest bind chose, and it resolves (remotely only) to exactly its bound range,
//! with its bound rights, for the QP it was bound on, while the region it was bound
//! to is still registered.

use std::sync::{Arc, RwLock};

use crate::access::AccessFlags;
use crate::mr_buffer::MrBuffer;
use crate::wr::MwBindOp;

use super::compact;

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

/// What a bound window grants.
struct Binding {
    buf: Arc<MrBuffer>,
    /// The region's key, checked live at each use (deregistration ends the window).
    mr_key: u32,
    addr: u64,
    len: u64,
    access: AccessFlags,
    qpn: u32,
}

struct Window {
    pd: u32,
    bound: Option<Binding>,
}

enum Kind {
    Mr(Entry),
    Mw(Window),
}

struct Slot {
    gen: u8,
    entry: Option<Kind>,
}

#[derive(Default)]
struct Table {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// The next generation of each slot that [`KeyTable::compact`] cut off the end
    /// of `slots` (indexed by slot; one byte each), so that a slot made again at
    /// such an index does not bring a stale key back to life.
    cut: Vec<u8>,
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
        let entry = Some(Kind::Mr(Entry { buf, pd, access }));
        Self::place(&mut t, entry)
    }

    fn place(t: &mut Table, entry: Option<Kind>) -> u32 {
        let idx = match t.free.pop() {
            Some(i) => {
                t.slots[i as usize].entry = entry;
                i
            }
            None => {
                let idx = t.slots.len();
                let gen = t.cut.get(idx).copied().unwrap_or(1);
                t.slots.push(Slot { gen, entry });
                idx as u32
            }
        };
        (idx << 8) | u32::from(t.slots[idx as usize].gen)
    }

    /// Drops the free slots at the end of the table and the room they took. A
    /// thousand connections' send rings leave ~1,000 slots (64 KiB and more, kept
    /// resident) after they are gone; their generations stay behind in `cut`.
    pub(crate) fn compact(&self) {
        let mut t = self.t.write().unwrap_or_else(|e| e.into_inner());
        let Table { slots, free, cut } = &mut *t;
        let end = slots
            .iter()
            .rposition(|s| s.entry.is_some())
            .map_or(0, |i| i + 1);
        if end == slots.len() {
            return;
        }
        if cut.len() < slots.len() {
            cut.resize(slots.len(), 1);
        }
        for (i, slot) in slots.iter().enumerate().skip(end) {
            cut[i] = slot.gen;
        }
        slots.truncate(end);
        free.retain(|&i| (i as usize) < end);
        compact::shrink_vec(slots);
        compact::shrink_vec(free);
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
        let Some(Kind::Mr(e)) = live(&t, key) else {
            // A window has no lkey, and an rkey of one resolves through `resolve_remote`.
            return Err(KeyError::Invalid);
        };
        check_mr(e, pd, addr, len, need)
    }

    /// As [`KeyTable::resolve`], for an rkey a peer used on QP `qpn`: it may also
    /// name a memory window bound on that QP.
    pub(crate) fn resolve_remote(
        &self,
        key: u32,
        pd: u32,
        qpn: u32,
        addr: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<Resolved, KeyError> {
        let t = self.t.read().unwrap_or_else(|e| e.into_inner());
        match live(&t, key).ok_or(KeyError::Invalid)? {
            Kind::Mr(e) => check_mr(e, pd, addr, len, need),
            Kind::Mw(w) => {
                let b = w.bound.as_ref().ok_or(KeyError::Invalid)?;
                if w.pd != pd || b.qpn != qpn {
                    return Err(KeyError::WrongPd);
                }
                if !matches!(live(&t, b.mr_key), Some(Kind::Mr(_))) {
                    return Err(KeyError::Invalid);
                }
                let inside = addr >= b.addr
                    && addr
                        .checked_add(len)
                        .is_some_and(|end| end <= b.addr + b.len);
                if !inside {
                    return Err(KeyError::Bounds);
                }
                if !b.access.contains(need) {
                    return Err(KeyError::Rights);
                }
                Ok(resolved(&b.buf, addr))
            }
        }
    }

    /// Allocates an unbound type-2 window in `pd`; returns its key.
    pub(crate) fn insert_mw(&self, pd: u32) -> u32 {
        let mut t = self.t.write().unwrap_or_else(|e| e.into_inner());
        Self::place(&mut t, Some(Kind::Mw(Window { pd, bound: None })))
    }

    /// Deallocates the window at slot `idx` (ending any binding).
    pub(crate) fn remove_mw(&self, idx: u32) {
        let mut t = self.t.write().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = t.slots.get_mut(idx as usize) {
            if matches!(slot.entry, Some(Kind::Mw(_))) {
                slot.entry = None;
                slot.gen = slot.gen.wrapping_add(1).max(1);
                t.free.push(idx);
            }
        }
    }

    /// Executes a bind WR posted on QP `qpn` of `pd`, with the checks rxe makes
    /// (`rxe_check_bind_mw`); a refusal is the WR's `MW_BIND_ERR`.
    pub(crate) fn bind_mw(&self, pd: u32, qpn: u32, op: &MwBindOp) -> Result<(), KeyError> {
        let mut t = self.t.write().unwrap_or_else(|e| e.into_inner());
        let (buf, mr_access) = match live(&t, op.mr as u32) {
            Some(Kind::Mr(e)) if e.pd == pd => (e.buf.clone(), e.access),
            Some(Kind::Mr(_)) => return Err(KeyError::WrongPd),
            _ => return Err(KeyError::Invalid),
        };
        if !mr_access.contains(AccessFlags::MW_BIND) {
            return Err(KeyError::Rights);
        }
        // A writable window needs a locally writable region (C10-74).
        if op
            .access
            .intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !mr_access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(KeyError::Rights);
        }
        if op.len == 0 || !buf.contains(op.addr, op.len) {
            return Err(KeyError::Bounds);
        }
        // Only the key byte may change (the index names the window).
        if op.rkey >> 8 != op.mw as u32 {
            return Err(KeyError::Invalid);
        }
        let slot = t.slots.get_mut(op.mw).ok_or(KeyError::Invalid)?;
        let Some(Kind::Mw(w)) = slot.entry.as_mut() else {
            return Err(KeyError::Invalid);
        };
        // A type-2 window must be invalidated before it is bound again (o10-36.2.2).
        if w.pd != pd || w.bound.is_some() {
            return Err(KeyError::WrongPd);
        }
        w.bound = Some(Binding {
            buf,
            mr_key: op.mr as u32,
            addr: op.addr,
            len: op.len,
            access: op.access,
            qpn,
        });
        slot.gen = op.rkey as u8;
        Ok(())
    }

    /// Executes a local-invalidate WR of `pd`: the window named by `rkey` (its
    /// current key) is unbound.
    pub(crate) fn invalidate(&self, pd: u32, rkey: u32) -> Result<(), KeyError> {
        let mut t = self.t.write().unwrap_or_else(|e| e.into_inner());
        let slot = t
            .slots
            .get_mut((rkey >> 8) as usize)
            .filter(|s| s.gen == rkey as u8)
            .ok_or(KeyError::Invalid)?;
        match slot.entry.as_mut() {
            Some(Kind::Mw(w)) if w.pd == pd => {
                w.bound = None;
                Ok(())
            }
            _ => Err(KeyError::Invalid),
        }
    }
}

/// The live entry `key` names (slot and key byte both current).
fn live(t: &Table, key: u32) -> Option<&Kind> {
    t.slots
        .get((key >> 8) as usize)
        .filter(|s| u32::from(s.gen) == key & 0xff)
        .and_then(|s| s.entry.as_ref())
}

fn check_mr(
    e: &Entry,
    pd: u32,
    addr: u64,
    len: u64,
    need: AccessFlags,
) -> Result<Resolved, KeyError> {
    if e.pd != pd {
        return Err(KeyError::WrongPd);
    }
    if !e.buf.contains(addr, len) {
        return Err(KeyError::Bounds);
    }
    if !e.access.contains(need) {
        return Err(KeyError::Rights);
    }
    Ok(resolved(&e.buf, addr))
}

/// `addr` (checked to lie in `buf`) as a pointer derived from the buffer's own (not
/// from the integer), so that it carries the allocation's provenance.
fn resolved(buf: &Arc<MrBuffer>, addr: u64) -> Resolved {
    let base = buf.as_ptr();
    Resolved {
        ptr: base.wrapping_add((addr - base as u64) as usize),
        buf: buf.clone(),
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

    #[test]
    fn a_compacted_table_keeps_stale_keys_dead() {
        let t = KeyTable::default();
        let buf = Arc::new(MrBuffer::zeroed(64));
        let base = buf.as_ptr() as u64;
        let any = AccessFlags::empty();
        let keys: Vec<u32> = (0..200).map(|_| t.insert(buf.clone(), 1, any)).collect();
        let kept = keys[3];
        for &k in keys.iter().filter(|&&k| k != kept) {
            t.remove(k);
        }
        t.compact();
        assert_eq!(t.live(), 1);
        assert!(
            t.resolve(kept, 1, base, 1, any).is_ok(),
            "a live key survives"
        );
        // Slots are made again at the cut indices; no old key names them.
        let again: Vec<u32> = (0..300).map(|_| t.insert(buf.clone(), 1, any)).collect();
        for &k in keys.iter().filter(|&&k| k != kept) {
            assert!(
                t.resolve(k, 1, base, 1, any).is_err(),
                "stale key {k:#x} resolves after compaction"
            );
        }
        for &k in &again {
            assert!(t.resolve(k, 1, base, 1, any).is_ok());
            assert!(!keys.contains(&k), "key {k:#x} handed out twice");
        }
    }

    #[test]
    fn a_window_reaches_its_range_on_its_qp_until_its_region_goes() {
        let t = KeyTable::default();
        let buf = Arc::new(MrBuffer::zeroed(256));
        let base = buf.as_ptr() as u64;
        let mr = t.insert(buf, 1, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
        let mw = t.insert_mw(1);
        let need = AccessFlags::REMOTE_READ;
        assert!(
            t.resolve_remote(mr, 1, 7, base, 8, need).is_err(),
            "no remote rights"
        );
        assert_eq!(
            t.resolve_remote(mw, 1, 7, base, 8, need).err(),
            Some(KeyError::Invalid),
            "unbound"
        );
        let op = MwBindOp {
            mw: (mw >> 8) as usize,
            mr: mr as usize,
            addr: base + 64,
            len: 32,
            access: need,
            rkey: crate::mw::inc_rkey(mw),
        };
        t.bind_mw(1, 7, &op).unwrap();
        let k = op.rkey;
        assert!(t.resolve_remote(k, 1, 7, base + 64, 32, need).is_ok());
        assert!(
            t.resolve(k, 1, base + 64, 32, AccessFlags::empty())
                .is_err(),
            "no lkey"
        );
        assert_eq!(
            t.resolve_remote(mw, 1, 7, base + 64, 8, need).err(),
            Some(KeyError::Invalid)
        );
        assert_eq!(
            t.resolve_remote(k, 1, 8, base + 64, 8, need).err(),
            Some(KeyError::WrongPd)
        );
        assert_eq!(
            t.resolve_remote(k, 1, 7, base + 90, 8, need).err(),
            Some(KeyError::Bounds)
        );
        assert_eq!(
            t.resolve_remote(k, 1, 7, base + 64, 8, AccessFlags::REMOTE_WRITE)
                .err(),
            Some(KeyError::Rights)
        );
        t.remove(mr);
        assert_eq!(
            t.resolve_remote(k, 1, 7, base + 64, 8, need).err(),
            Some(KeyError::Invalid),
            "the region's deregistration ends the window"
        );
    }
}
