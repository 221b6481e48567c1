//! `MetadataMap`: a multimap of ASCII and binary entries with tonic's methods.

use std::fmt;

use super::encoding::{Ascii, Binary, ValueEncoding};
use super::iter::{GetAll, Iter, IterMut, Keys, Values, ValuesMut};
use super::key::MetadataKey;
use super::key_arg::{AsEncodingAgnosticMetadataKey, AsMetadataKey, IntoMetadataKey};
use super::value::MetadataValue;

/// One entry: a key and a value of the same kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Slot {
    /// An ASCII entry.
    Ascii(MetadataKey<Ascii>, MetadataValue<Ascii>),
    /// A binary entry.
    Binary(MetadataKey<Binary>, MetadataValue<Binary>),
}

impl Slot {
    pub(super) fn name(&self) -> &str {
        match self {
            Slot::Ascii(k, _) => k.as_str(),
            Slot::Binary(k, _) => k.as_str(),
        }
    }
}

/// A multimap of metadata: several values per key, ASCII and binary.
///
/// Values of one key stay together in the order they were added, and keys in the
/// order they first were, as in tonic (whose map is an HTTP header map); a map
/// decoded from the wire keeps the sender's order. Lookups by `&str` ignore ASCII
/// case. Every lookup is a scan: a call's metadata is a handful of entries.
///
/// ```
/// use rpc_core::metadata::{MetadataMap, MetadataValue};
///
/// let mut map = MetadataMap::new();
/// map.insert("x-host", "example.com".parse().unwrap());
/// map.append("x-tag", MetadataValue::from_static("a"));
/// map.append("x-tag", MetadataValue::from_static("b"));
/// map.insert_bin("trace-proto-bin", MetadataValue::from_bytes(b"[binary data]"));
///
/// assert_eq!(map.get("x-host").unwrap(), "example.com");
/// assert_eq!(map.get_all("x-tag").iter().collect::<Vec<_>>(), ["a", "b"]);
/// assert_eq!(map.len(), 4);
/// assert_eq!(map.keys_len(), 3);
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct MetadataMap {
    pub(super) slots: Vec<Slot>,
}

impl MetadataMap {
    /// An empty map (allocates nothing).
    pub fn new() -> Self {
        MetadataMap::default()
    }

    /// An empty map with room for `capacity` entries.
    pub fn with_capacity(capacity: usize) -> Self {
        MetadataMap {
            slots: Vec::with_capacity(capacity),
        }
    }

    /// Number of values (ASCII and binary), counting each value of a key.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Number of distinct keys (ASCII and binary).
    pub fn keys_len(&self) -> usize {
        self.keys().len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Removes every entry, keeping the allocation.
    pub fn clear(&mut self) {
        self.slots.clear();
    }

    /// Number of entries the map holds without reallocating.
    pub fn capacity(&self) -> usize {
        self.slots.capacity()
    }

    /// Reserves room for at least `additional` more entries.
    pub fn reserve(&mut self, additional: usize) {
        self.slots.reserve(additional);
    }

    /// Index of the first value of kind `VE` whose key is `name` (in any ASCII case).
    pub(super) fn position<VE: ValueEncoding>(&self, name: &str) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| VE::slot(s).is_some_and(|(k, _)| k.as_str().eq_ignore_ascii_case(name)))
    }

    fn first<VE: ValueEncoding>(&self, name: &str) -> Option<&MetadataValue<VE>> {
        let i = self.position::<VE>(name)?;
        VE::slot(&self.slots[i]).map(|(_, v)| v)
    }

    fn first_mut<VE: ValueEncoding>(&mut self, name: &str) -> Option<&mut MetadataValue<VE>> {
        let i = self.position::<VE>(name)?;
        VE::slot_mut(&mut self.slots[i]).map(|(_, v)| v)
    }

    /// The first ASCII value of `key`.
    pub fn get<K: AsMetadataKey<Ascii>>(&self, key: K) -> Option<&MetadataValue<Ascii>> {
        self.first(key.key_text())
    }

    /// The first binary value of `key`.
    pub fn get_bin<K: AsMetadataKey<Binary>>(&self, key: K) -> Option<&MetadataValue<Binary>> {
        self.first(key.key_text())
    }

    /// The first ASCII value of `key`, mutably.
    pub fn get_mut<K: AsMetadataKey<Ascii>>(
        &mut self,
        key: K,
    ) -> Option<&mut MetadataValue<Ascii>> {
        self.first_mut(key.key_text())
    }

    /// The first binary value of `key`, mutably.
    pub fn get_bin_mut<K: AsMetadataKey<Binary>>(
        &mut self,
        key: K,
    ) -> Option<&mut MetadataValue<Binary>> {
        self.first_mut(key.key_text())
    }

    /// Every ASCII value of `key`, in order.
    pub fn get_all<K: AsMetadataKey<Ascii>>(&self, key: K) -> GetAll<'_, Ascii> {
        GetAll::new(&self.slots, self.position::<Ascii>(key.key_text()))
    }

    /// Every binary value of `key`, in order.
    pub fn get_all_bin<K: AsMetadataKey<Binary>>(&self, key: K) -> GetAll<'_, Binary> {
        GetAll::new(&self.slots, self.position::<Binary>(key.key_text()))
    }

    /// Whether `key` has a value of either kind.
    pub fn contains_key<K: AsEncodingAgnosticMetadataKey>(&self, key: K) -> bool {
        let name = key.key_text();
        self.slots
            .iter()
            .any(|s| s.name().eq_ignore_ascii_case(name))
    }

    /// Every entry, a key once per value.
    pub fn iter(&self) -> Iter<'_> {
        Iter::new(&self.slots)
    }

    /// Every entry with its value mutable.
    pub fn iter_mut(&mut self) -> IterMut<'_> {
        IterMut::new(&mut self.slots)
    }

    /// Every key, once.
    pub fn keys(&self) -> Keys<'_> {
        Keys::new(&self.slots)
    }

    /// Every value.
    pub fn values(&self) -> Values<'_> {
        Values::new(&self.slots)
    }

    /// Every value, mutably.
    pub fn values_mut(&mut self) -> ValuesMut<'_> {
        ValuesMut::new(&mut self.slots)
    }

    /// Makes `value` the only value of `key`, where its first value was (or last,
    /// for a new key); returns the first value it replaces.
    fn put<VE: ValueEncoding>(
        &mut self,
        key: MetadataKey<VE>,
        value: MetadataValue<VE>,
    ) -> Option<MetadataValue<VE>> {
        let Some(at) = self.position::<VE>(key.as_str()) else {
            self.slots.push(VE::into_slot(key, value));
            return None;
        };
        let old = self.take_all::<VE>(key.as_str());
        self.slots.insert(at, VE::into_slot(key, value));
        old.into_iter().next()
    }

    /// The trailers of a call that ended OK as a tonic client shows them: the
    /// server's, after `grpc-status: 0`.
    pub(crate) fn into_ok_trailers(mut self) -> MetadataMap {
        self.take::<Ascii>("grpc-status");
        let status = Ascii::into_slot(
            MetadataKey::from_static("grpc-status"),
            MetadataValue::from_static("0"),
        );
        self.slots.insert(0, status);
        self
    }

    /// Adds `value` after the last value of `key`; returns whether `key` had one.
    pub(super) fn add<VE: ValueEncoding>(
        &mut self,
        key: MetadataKey<VE>,
        value: MetadataValue<VE>,
    ) -> bool {
        let last = self.slots.iter().rposition(|s| s.name() == key.as_str());
        match last {
            Some(i) => self.slots.insert(i + 1, VE::into_slot(key, value)),
            None => self.slots.push(VE::into_slot(key, value)),
        }
        last.is_some()
    }

    /// Removes every value of `name` (in any ASCII case); returns the first.
    fn take<VE: ValueEncoding>(&mut self, name: &str) -> Option<MetadataValue<VE>> {
        let at = self.position::<VE>(name)?;
        let name = self.slots[at].name().to_owned();
        self.take_all(&name).into_iter().next()
    }

    /// Removes every value of `name`; returns them in order.
    pub(super) fn take_all<VE: ValueEncoding>(&mut self, name: &str) -> Vec<MetadataValue<VE>> {
        let mut taken = Vec::new();
        let mut i = 0;
        while i < self.slots.len() {
            if self.slots[i].name() == name {
                taken.extend(VE::from_slot(self.slots.remove(i)));
            } else {
                i += 1;
            }
        }
        taken
    }

    /// Makes `val` the only ASCII value of `key`; returns the first value it replaces.
    ///
    /// # Panics
    /// If `key` is a `&'static str` that is not a valid ASCII-value key (build keys
    /// known only at run time with [`MetadataKey::from_bytes`]).
    pub fn insert<K: IntoMetadataKey<Ascii>>(
        &mut self,
        key: K,
        val: MetadataValue<Ascii>,
    ) -> Option<MetadataValue<Ascii>> {
        self.put(key.into_key(), val)
    }

    /// Makes `val` the only binary value of `key` (ending in `-bin`).
    ///
    /// # Panics
    /// As [`MetadataMap::insert`].
    pub fn insert_bin<K: IntoMetadataKey<Binary>>(
        &mut self,
        key: K,
        val: MetadataValue<Binary>,
    ) -> Option<MetadataValue<Binary>> {
        self.put(key.into_key(), val)
    }

    /// Adds an ASCII value after the others of `key`; returns whether there were any.
    ///
    /// # Panics
    /// As [`MetadataMap::insert`].
    pub fn append<K: IntoMetadataKey<Ascii>>(
        &mut self,
        key: K,
        value: MetadataValue<Ascii>,
    ) -> bool {
        self.add(key.into_key(), value)
    }

    /// Adds a binary value after the others of `key`; returns whether there were any.
    ///
    /// # Panics
    /// As [`MetadataMap::insert`].
    pub fn append_bin<K: IntoMetadataKey<Binary>>(
        &mut self,
        key: K,
        value: MetadataValue<Binary>,
    ) -> bool {
        self.add(key.into_key(), value)
    }

    /// Removes every ASCII value of `key`; returns the first.
    pub fn remove<K: AsMetadataKey<Ascii>>(&mut self, key: K) -> Option<MetadataValue<Ascii>> {
        self.take(key.key_text())
    }

    /// Removes every binary value of `key`; returns the first.
    pub fn remove_bin<K: AsMetadataKey<Binary>>(
        &mut self,
        key: K,
    ) -> Option<MetadataValue<Binary>> {
        self.take(key.key_text())
    }
}

impl fmt::Debug for MetadataMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.slots.iter().map(|s| {
                let value: &dyn fmt::Debug = match s {
                    Slot::Ascii(_, v) => v,
                    Slot::Binary(_, v) => v,
                };
                (s.name(), value)
            }))
            .finish()
    }
}
