//! Giving back the room a burst of connections left in a server's tables.
//!
//! A `HashMap` keeps the capacity of its fullest moment: after 1,000 clients have
//! come and gone, the connection table still holds room for 1,792 (2,048 buckets, 35 KB), allocated
//! mid-burst from a worker thread's arena, where the block keeps its pages resident
//! (capacity-probe; heaptrack named it among what survived the burst).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

/// Room a table keeps however empty it gets: shrinking below saves too little to be
/// worth a reallocation.
const KEEP: usize = 64;

/// Shrinks `table` to twice its entries if its room is more than four times them
/// (beyond [`KEEP`]). The factor between the two keeps a table of steady size from
/// shrinking and growing again: connections closing one by one shrink it a few
/// times (a halving of the entries each), never per close.
pub(super) fn give_back_room<K: Eq + Hash, V, S: BuildHasher>(table: &mut HashMap<K, V, S>) {
    let (len, room) = (table.len(), table.capacity());
    if room > KEEP && room > 4 * len {
        table.shrink_to((2 * len).max(KEEP / 2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id_map::IdMap;

    #[test]
    fn a_table_emptied_after_a_thousand_entries_is_back_to_a_fresh_ones_room() {
        let mut fresh: IdMap<u32, u64> = IdMap::default();
        fresh.insert(1, 1);
        let fresh_room = fresh.capacity();

        let mut table: IdMap<u32, u64> = IdMap::default();
        for qpn in 0..1000 {
            table.insert(qpn, u64::from(qpn));
        }
        let mut shrinks = 0;
        for qpn in 0..1000 {
            table.remove(&qpn);
            let before = table.capacity();
            give_back_room(&mut table);
            shrinks += usize::from(table.capacity() < before);
            // Every entry left is still there.
            if qpn == 500 {
                assert!((501..1000).all(|k| table.get(&k) == Some(&u64::from(k))));
            }
        }
        assert!(table.is_empty());
        assert!(
            table.capacity() <= KEEP.max(fresh_room),
            "room for {} left after all 1,000 left (a fresh table: {fresh_room})",
            table.capacity()
        );
        assert!(shrinks <= 8, "{shrinks} reallocations for 1,000 closes");
    }

    #[test]
    fn a_table_at_its_size_is_left_alone() {
        let mut table: IdMap<u32, u64> = (0..1000).map(|k| (k, 0)).collect();
        let room = table.capacity();
        for k in 0..400 {
            table.remove(&k);
        }
        give_back_room(&mut table);
        assert_eq!(table.capacity(), room, "600 entries in room for {room}");
    }
}
