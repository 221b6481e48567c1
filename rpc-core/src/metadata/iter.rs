//! The views of a `MetadataMap`: entries, keys, values, and the values of one key.

use std::fmt;
use std::marker::PhantomData;
use std::slice;

use super::encoding::{Ascii, Binary, ValueEncoding};
use super::key::MetadataKey;
use super::map::Slot;
use super::value::MetadataValue;

/// A key and its value, of either kind.
#[derive(Debug)]
pub enum KeyAndValueRef<'a> {
    /// An ASCII entry.
    Ascii(&'a MetadataKey<Ascii>, &'a MetadataValue<Ascii>),
    /// A binary entry.
    Binary(&'a MetadataKey<Binary>, &'a MetadataValue<Binary>),
}

/// A key and its mutable value, of either kind.
#[derive(Debug)]
pub enum KeyAndMutValueRef<'a> {
    /// An ASCII entry.
    Ascii(&'a MetadataKey<Ascii>, &'a mut MetadataValue<Ascii>),
    /// A binary entry.
    Binary(&'a MetadataKey<Binary>, &'a mut MetadataValue<Binary>),
}

/// A key of either kind.
#[derive(Debug)]
pub enum KeyRef<'a> {
    /// An ASCII value's key.
    Ascii(&'a MetadataKey<Ascii>),
    /// A binary value's key.
    Binary(&'a MetadataKey<Binary>),
}

/// A value of either kind.
#[derive(Debug)]
pub enum ValueRef<'a> {
    /// An ASCII value.
    Ascii(&'a MetadataValue<Ascii>),
    /// A binary value.
    Binary(&'a MetadataValue<Binary>),
}

/// A mutable value of either kind.
#[derive(Debug)]
pub enum ValueRefMut<'a> {
    /// An ASCII value.
    Ascii(&'a mut MetadataValue<Ascii>),
    /// A binary value.
    Binary(&'a mut MetadataValue<Binary>),
}

/// [`MetadataMap::iter`](super::MetadataMap::iter): every entry, a key once per value.
#[derive(Debug)]
pub struct Iter<'a> {
    slots: slice::Iter<'a, Slot>,
}

impl<'a> Iter<'a> {
    pub(super) fn new(slots: &'a [Slot]) -> Self {
        Iter {
            slots: slots.iter(),
        }
    }
}

impl<'a> Iterator for Iter<'a> {
    type Item = KeyAndValueRef<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        self.slots.next().map(|s| match s {
            Slot::Ascii(k, v) => KeyAndValueRef::Ascii(k, v),
            Slot::Binary(k, v) => KeyAndValueRef::Binary(k, v),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.slots.size_hint()
    }
}

/// [`MetadataMap::iter_mut`](super::MetadataMap::iter_mut).
#[derive(Debug)]
pub struct IterMut<'a> {
    slots: slice::IterMut<'a, Slot>,
}

impl<'a> IterMut<'a> {
    pub(super) fn new(slots: &'a mut [Slot]) -> Self {
        IterMut {
            slots: slots.iter_mut(),
        }
    }
}

impl<'a> Iterator for IterMut<'a> {
    type Item = KeyAndMutValueRef<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        self.slots.next().map(|s| match s {
            Slot::Ascii(k, v) => KeyAndMutValueRef::Ascii(k, v),
            Slot::Binary(k, v) => KeyAndMutValueRef::Binary(k, v),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.slots.size_hint()
    }
}

/// [`MetadataMap::keys`](super::MetadataMap::keys): each key once, in the order keys
/// first appear.
#[derive(Debug)]
pub struct Keys<'a> {
    slots: &'a [Slot],
    next: usize,
}

impl<'a> Keys<'a> {
    pub(super) fn new(slots: &'a [Slot]) -> Self {
        Keys { slots, next: 0 }
    }

    /// Whether the slot at `i` is its key's first.
    fn is_first(&self, i: usize) -> bool {
        let name = self.slots[i].name();
        !self.slots[..i].iter().any(|s| s.name() == name)
    }
}

impl<'a> Iterator for Keys<'a> {
    type Item = KeyRef<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.next < self.slots.len() {
            let i = self.next;
            self.next += 1;
            if self.is_first(i) {
                return Some(match &self.slots[i] {
                    Slot::Ascii(k, _) => KeyRef::Ascii(k),
                    Slot::Binary(k, _) => KeyRef::Binary(k),
                });
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.next..self.slots.len())
            .filter(|&i| self.is_first(i))
            .count();
        (n, Some(n))
    }
}

impl ExactSizeIterator for Keys<'_> {}

/// [`MetadataMap::values`](super::MetadataMap::values): every value.
#[derive(Debug)]
pub struct Values<'a> {
    slots: slice::Iter<'a, Slot>,
}

impl<'a> Values<'a> {
    pub(super) fn new(slots: &'a [Slot]) -> Self {
        Values {
            slots: slots.iter(),
        }
    }
}

impl<'a> Iterator for Values<'a> {
    type Item = ValueRef<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        self.slots.next().map(|s| match s {
            Slot::Ascii(_, v) => ValueRef::Ascii(v),
            Slot::Binary(_, v) => ValueRef::Binary(v),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.slots.size_hint()
    }
}

/// [`MetadataMap::values_mut`](super::MetadataMap::values_mut): every value, mutably.
#[derive(Debug)]
pub struct ValuesMut<'a> {
    slots: slice::IterMut<'a, Slot>,
}

impl<'a> ValuesMut<'a> {
    pub(super) fn new(slots: &'a mut [Slot]) -> Self {
        ValuesMut {
            slots: slots.iter_mut(),
        }
    }
}

impl<'a> Iterator for ValuesMut<'a> {
    type Item = ValueRefMut<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        self.slots.next().map(|s| match s {
            Slot::Ascii(_, v) => ValueRefMut::Ascii(v),
            Slot::Binary(_, v) => ValueRefMut::Binary(v),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.slots.size_hint()
    }
}

/// [`MetadataMap::get_all`](super::MetadataMap::get_all) and `get_all_bin`: the
/// values of one key, iterable any number of times.
pub struct GetAll<'a, VE: ValueEncoding> {
    /// The slots from the key's first value on (empty when it has none).
    slots: &'a [Slot],
    _e: PhantomData<VE>,
}

impl<'a, VE: ValueEncoding> GetAll<'a, VE> {
    pub(super) fn new(slots: &'a [Slot], first: Option<usize>) -> Self {
        GetAll {
            slots: first.map_or(&[][..], |i| &slots[i..]),
            _e: PhantomData,
        }
    }

    /// The values, in order.
    pub fn iter(&self) -> ValueIter<'a, VE> {
        ValueIter {
            name: self.slots.first().map_or("", Slot::name),
            slots: self.slots,
            _e: PhantomData,
        }
    }
}

impl<VE: ValueEncoding> fmt::Debug for GetAll<'_, VE> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<VE: ValueEncoding> PartialEq for GetAll<'_, VE> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl<'a, VE: ValueEncoding> IntoIterator for GetAll<'a, VE> {
    type Item = &'a MetadataValue<VE>;
    type IntoIter = ValueIter<'a, VE>;

    fn into_iter(self) -> ValueIter<'a, VE> {
        self.iter()
    }
}

impl<'a, VE: ValueEncoding> IntoIterator for &GetAll<'a, VE> {
    type Item = &'a MetadataValue<VE>;
    type IntoIter = ValueIter<'a, VE>;

    fn into_iter(self) -> ValueIter<'a, VE> {
        self.iter()
    }
}

/// The values of one key, in order ([`GetAll::iter`]).
pub struct ValueIter<'a, VE: ValueEncoding> {
    name: &'a str,
    /// The slots not yet looked at, from either end.
    slots: &'a [Slot],
    _e: PhantomData<VE>,
}

impl<'a, VE: ValueEncoding> ValueIter<'a, VE> {
    fn value(&self, slot: &'a Slot) -> Option<&'a MetadataValue<VE>> {
        VE::slot(slot)
            .filter(|(k, _)| k.as_str() == self.name)
            .map(|(_, v)| v)
    }
}

impl<VE: ValueEncoding> fmt::Debug for ValueIter<'_, VE> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValueIter")
            .field("key", &self.name)
            .finish()
    }
}

impl<'a, VE: ValueEncoding> Iterator for ValueIter<'a, VE> {
    type Item = &'a MetadataValue<VE>;

    fn next(&mut self) -> Option<Self::Item> {
        while let Some((slot, rest)) = self.slots.split_first() {
            self.slots = rest;
            if let Some(v) = self.value(slot) {
                return Some(v);
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.slots.len()))
    }
}

impl<VE: ValueEncoding> DoubleEndedIterator for ValueIter<'_, VE> {
    fn next_back(&mut self) -> Option<Self::Item> {
        while let Some((slot, rest)) = self.slots.split_last() {
            self.slots = rest;
            if let Some(v) = self.value(slot) {
                return Some(v);
            }
        }
        None
    }
}
