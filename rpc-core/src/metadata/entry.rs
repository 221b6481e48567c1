//! `MetadataMap::entry`: one key's place in a map, occupied or vacant, as tonic's.

use std::marker::PhantomData;
use std::slice;

use super::encoding::{Ascii, Binary, ValueEncoding};
use super::iter::{GetAll, ValueIter};
use super::key::{InvalidMetadataKey, MetadataKey};
use super::key_arg::AsMetadataKey;
use super::map::{MetadataMap, Slot};
use super::value::MetadataValue;

/// A key's place in a [`MetadataMap`]: with values, or without.
#[derive(Debug)]
pub enum Entry<'a, VE: ValueEncoding> {
    /// The key has values.
    Occupied(OccupiedEntry<'a, VE>),
    /// The key has none.
    Vacant(VacantEntry<'a, VE>),
}

/// A key with values.
#[derive(Debug)]
pub struct OccupiedEntry<'a, VE: ValueEncoding> {
    map: &'a mut MetadataMap,
    key: MetadataKey<VE>,
    /// Index of the key's first value.
    first: usize,
}

/// A key without values.
#[derive(Debug)]
pub struct VacantEntry<'a, VE: ValueEncoding> {
    map: &'a mut MetadataMap,
    key: MetadataKey<VE>,
}

/// The values taken out of a key, in order.
#[derive(Debug)]
pub struct ValueDrain<'a, VE: ValueEncoding> {
    values: std::vec::IntoIter<MetadataValue<VE>>,
    _map: PhantomData<&'a mut MetadataMap>,
}

/// The values of one key, mutably, in order.
#[derive(Debug)]
pub struct ValueIterMut<'a, VE: ValueEncoding> {
    slots: slice::IterMut<'a, Slot>,
    key: MetadataKey<VE>,
}

impl MetadataMap {
    fn generic_entry<VE: ValueEncoding>(
        &mut self,
        text: &str,
    ) -> Result<Entry<'_, VE>, InvalidMetadataKey> {
        let key = MetadataKey::<VE>::from_bytes(text.as_bytes())?;
        Ok(match self.position::<VE>(key.as_str()) {
            Some(first) => Entry::Occupied(OccupiedEntry {
                map: self,
                key,
                first,
            }),
            None => Entry::Vacant(VacantEntry { map: self, key }),
        })
    }

    /// The place of ASCII key `key`; an error when `key` is not a valid ASCII-value key.
    pub fn entry<K: AsMetadataKey<Ascii>>(
        &mut self,
        key: K,
    ) -> Result<Entry<'_, Ascii>, InvalidMetadataKey> {
        self.generic_entry(key.key_text())
    }

    /// The place of binary key `key`; an error when `key` is not a valid binary key.
    pub fn entry_bin<K: AsMetadataKey<Binary>>(
        &mut self,
        key: K,
    ) -> Result<Entry<'_, Binary>, InvalidMetadataKey> {
        self.generic_entry(key.key_text())
    }
}

impl<'a, VE: ValueEncoding> Entry<'a, VE> {
    /// The first value, after inserting `default` if there was none.
    pub fn or_insert(self, default: MetadataValue<VE>) -> &'a mut MetadataValue<VE> {
        match self {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(default),
        }
    }

    /// The first value, after inserting `default()` if there was none.
    pub fn or_insert_with<F: FnOnce() -> MetadataValue<VE>>(
        self,
        default: F,
    ) -> &'a mut MetadataValue<VE> {
        match self {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(default()),
        }
    }

    /// The key.
    pub fn key(&self) -> &MetadataKey<VE> {
        match self {
            Entry::Occupied(e) => e.key(),
            Entry::Vacant(e) => e.key(),
        }
    }
}

impl<'a, VE: ValueEncoding> VacantEntry<'a, VE> {
    /// The key.
    pub fn key(&self) -> &MetadataKey<VE> {
        &self.key
    }

    /// The key, taken back.
    pub fn into_key(self) -> MetadataKey<VE> {
        self.key
    }

    /// Adds `value` as the key's first; returns it.
    pub fn insert(self, value: MetadataValue<VE>) -> &'a mut MetadataValue<VE> {
        self.insert_entry(value).into_mut()
    }

    /// Adds `value` as the key's first; returns the now occupied entry. (tonic's
    /// returns an `OccupiedEntry<Ascii>` whatever the kind; this one keeps the kind.)
    pub fn insert_entry(self, value: MetadataValue<VE>) -> OccupiedEntry<'a, VE> {
        let first = self.map.slots.len();
        self.map.slots.push(VE::into_slot(self.key.clone(), value));
        OccupiedEntry {
            map: self.map,
            key: self.key,
            first,
        }
    }
}

impl<'a, VE: ValueEncoding> OccupiedEntry<'a, VE> {
    /// The key.
    pub fn key(&self) -> &MetadataKey<VE> {
        &self.key
    }

    /// The first value.
    pub fn get(&self) -> &MetadataValue<VE> {
        VE::slot(&self.map.slots[self.first])
            .expect("the entry's kind")
            .1
    }

    /// The first value, mutably.
    pub fn get_mut(&mut self) -> &mut MetadataValue<VE> {
        VE::slot_mut(&mut self.map.slots[self.first])
            .expect("the entry's kind")
            .1
    }

    /// The first value, for as long as the map is borrowed.
    pub fn into_mut(self) -> &'a mut MetadataValue<VE> {
        VE::slot_mut(&mut self.map.slots[self.first])
            .expect("the entry's kind")
            .1
    }

    /// Makes `value` the key's only value; returns the first of those it replaces.
    pub fn insert(&mut self, value: MetadataValue<VE>) -> MetadataValue<VE> {
        let mut old = self.insert_mult(value);
        old.next().expect("an occupied entry has a value")
    }

    /// Makes `value` the key's only value; returns all those it replaces.
    pub fn insert_mult(&mut self, value: MetadataValue<VE>) -> ValueDrain<'_, VE> {
        let old = self.map.take_all::<VE>(self.key.as_str());
        self.map
            .slots
            .insert(self.first, VE::into_slot(self.key.clone(), value));
        ValueDrain::new(old)
    }

    /// Adds `value` after the key's others.
    pub fn append(&mut self, value: MetadataValue<VE>) {
        self.map.add(self.key.clone(), value);
    }

    /// Removes the key's values; returns the first.
    pub fn remove(self) -> MetadataValue<VE> {
        self.remove_entry().1
    }

    /// Removes the key's values; returns the key and the first.
    pub fn remove_entry(self) -> (MetadataKey<VE>, MetadataValue<VE>) {
        let (key, mut values) = self.remove_entry_mult();
        (key, values.next().expect("an occupied entry has a value"))
    }

    /// Removes the key's values; returns the key and all of them.
    pub fn remove_entry_mult(self) -> (MetadataKey<VE>, ValueDrain<'a, VE>) {
        let values = self.map.take_all::<VE>(self.key.as_str());
        (self.key, ValueDrain::new(values))
    }

    /// The key's values.
    pub fn iter(&self) -> ValueIter<'_, VE> {
        GetAll::new(&self.map.slots, Some(self.first)).iter()
    }

    /// The key's values, mutably.
    pub fn iter_mut(&mut self) -> ValueIterMut<'_, VE> {
        ValueIterMut {
            slots: self.map.slots[self.first..].iter_mut(),
            key: self.key.clone(),
        }
    }
}

impl<'a, VE: ValueEncoding> IntoIterator for OccupiedEntry<'a, VE> {
    type Item = &'a mut MetadataValue<VE>;
    type IntoIter = ValueIterMut<'a, VE>;

    fn into_iter(self) -> ValueIterMut<'a, VE> {
        ValueIterMut {
            slots: self.map.slots[self.first..].iter_mut(),
            key: self.key,
        }
    }
}

impl<'b, VE: ValueEncoding> IntoIterator for &'b OccupiedEntry<'_, VE> {
    type Item = &'b MetadataValue<VE>;
    type IntoIter = ValueIter<'b, VE>;

    fn into_iter(self) -> ValueIter<'b, VE> {
        self.iter()
    }
}

impl<'b, VE: ValueEncoding> IntoIterator for &'b mut OccupiedEntry<'_, VE> {
    type Item = &'b mut MetadataValue<VE>;
    type IntoIter = ValueIterMut<'b, VE>;

    fn into_iter(self) -> ValueIterMut<'b, VE> {
        self.iter_mut()
    }
}

impl<VE: ValueEncoding> ValueDrain<'_, VE> {
    fn new(values: Vec<MetadataValue<VE>>) -> Self {
        ValueDrain {
            values: values.into_iter(),
            _map: PhantomData,
        }
    }
}

impl<VE: ValueEncoding> Iterator for ValueDrain<'_, VE> {
    type Item = MetadataValue<VE>;

    fn next(&mut self) -> Option<Self::Item> {
        self.values.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.values.size_hint()
    }
}

impl<'a, VE: ValueEncoding> ValueIterMut<'a, VE> {
    fn value(key: &MetadataKey<VE>, slot: &'a mut Slot) -> Option<&'a mut MetadataValue<VE>> {
        VE::slot_mut(slot)
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }
}

impl<'a, VE: ValueEncoding> Iterator for ValueIterMut<'a, VE> {
    type Item = &'a mut MetadataValue<VE>;

    fn next(&mut self) -> Option<Self::Item> {
        for slot in self.slots.by_ref() {
            if let Some(v) = Self::value(&self.key, slot) {
                return Some(v);
            }
        }
        None
    }
}

impl<VE: ValueEncoding> DoubleEndedIterator for ValueIterMut<'_, VE> {
    fn next_back(&mut self) -> Option<Self::Item> {
        while let Some(slot) = self.slots.next_back() {
            if let Some(v) = Self::value(&self.key, slot) {
                return Some(v);
            }
        }
        None
    }
}
