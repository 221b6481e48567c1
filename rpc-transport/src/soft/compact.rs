//! Forgetting what a burst of closed connections left in the soft device's tables.
//!
//! A CQ learns that a member QP died only at its next sweep, which runs while the
//! CQ is polled; a server whose clients have all left polls nothing, so each dead
//! member stays behind as a `Weak` (which keeps the QP's allocation, not its
//! contents), and every table keeps the capacity the burst gave it. heaptrack on
//! capacity-probe's server, after 1,000 RC clients came and left: 267 dead QPs'
//! allocations and ~200 KB of table capacity still live. Each live chunk scattered
//! through the arenas the burst grew keeps its page resident, which `malloc_trim`
//! cannot hand back. [`compact`] runs just before it (`crate::release_free_heap`).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, Weak};

use super::device::Device;

/// Every soft device of the process, so that one call reaches all of them.
static DEVICES: Mutex<Vec<Weak<Device>>> = Mutex::new(Vec::new());

/// Records `dev` (and forgets the dropped ones).
pub(crate) fn register(dev: Weak<Device>) {
    let mut all = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|d| d.strong_count() > 0);
    all.push(dev);
}

/// Drops the dead entries of every soft device's tables and the spare capacity of
/// the tables that hold far more room than entries.
pub(crate) fn compact() {
    let all: Vec<_> = {
        let mut all = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|d| d.strong_count() > 0);
        shrink_vec(&mut all);
        all.iter().filter_map(Weak::upgrade).collect()
    };
    for dev in all {
        dev.compact();
    }
}

/// Capacity a table keeps however empty it gets: below it, shrinking saves too
/// little to be worth a reallocation.
const KEEP: usize = 64;

/// Whether a table of `len` entries with room for `capacity` holds far more room
/// than it uses (more than four times, beyond [`KEEP`]). Twice `len` is left after
/// a shrink, so a table that stays at its size is not shrunk again.
fn oversized(len: usize, capacity: usize) -> bool {
    capacity > KEEP && capacity > 4 * len
}

fn target(len: usize) -> usize {
    (2 * len).max(KEEP / 2)
}

/// Shrinks `v` if it is [`oversized`].
pub(crate) fn shrink_vec<T>(v: &mut Vec<T>) {
    if oversized(v.len(), v.capacity()) {
        v.shrink_to(target(v.len()));
    }
}

/// Shrinks `m` if it is [`oversized`].
pub(crate) fn shrink_map<K: Eq + Hash, V>(m: &mut HashMap<K, V>) {
    if oversized(m.len(), m.capacity()) {
        m.shrink_to(target(m.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tables_with_far_more_room_than_entries_shrink() {
        let mut v: Vec<u32> = Vec::with_capacity(1024);
        v.extend(0..300);
        shrink_vec(&mut v);
        assert_eq!(v.capacity(), 1024, "300 of 1024: kept");
        v.truncate(10);
        shrink_vec(&mut v);
        assert!(v.capacity() < 64, "10 of 1024: shrunk, to {}", v.capacity());
        assert_eq!(v, (0..10).collect::<Vec<_>>());
        let cap = v.capacity();
        shrink_vec(&mut v);
        assert_eq!(v.capacity(), cap, "a shrunk table is not shrunk again");

        let mut m: HashMap<u32, u32> = (0..1000).map(|i| (i, i)).collect();
        m.retain(|k, _| *k < 3);
        shrink_map(&mut m);
        assert!(m.capacity() < 64, "3 of 1000: shrunk, to {}", m.capacity());
        assert_eq!(m.len(), 3);
    }
}
