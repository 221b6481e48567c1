//! The metadata API as tonic's, and its wire encoding.

use super::errors::{InvalidMetadataKey, InvalidMetadataValue};
use super::*;
use bytes::Bytes;

fn round_trip(m: &MetadataMap) -> MetadataMap {
    let mut buf = Vec::new();
    m.encode(&mut buf);
    assert_eq!(buf.len(), m.encoded_len());
    MetadataMap::decode(&buf, DEFAULT_METADATA_LIMIT).unwrap()
}

#[test]
fn ascii_and_binary_values_round_trip_the_wire() {
    let mut m = MetadataMap::new();
    m.insert("x-user", "alice".parse().unwrap());
    m.append("x-tag", "a".parse().unwrap());
    m.append("x-tag", "b".parse().unwrap());
    m.insert_bin("trace-bin", MetadataValue::from_bytes(&[0, 159, 255]));
    m.insert("x-latin", "caf\u{e9}".parse().unwrap());
    let d = round_trip(&m);
    assert_eq!(d, m);
    assert_eq!(d.get("x-user").unwrap().to_str().unwrap(), "alice");
    assert_eq!(d.get_all("x-tag").iter().count(), 2);
    assert_eq!(
        &d.get_bin("trace-bin").unwrap().to_bytes().unwrap()[..],
        &[0, 159, 255]
    );
    assert_eq!(d.get("x-latin").unwrap().as_bytes(), "caf\u{e9}".as_bytes());
    assert!(d.get("trace-bin").is_none());
}

#[test]
fn to_str_fails_on_a_value_that_is_not_visible_ascii() {
    let latin: AsciiMetadataValue = "caf\u{e9}".parse().unwrap();
    assert!(latin.to_str().is_err());
    assert_eq!(
        latin.to_str().unwrap_err().to_string(),
        "failed to convert metadata to a str"
    );
    let tab = AsciiMetadataValue::try_from("a\tb").unwrap();
    assert_eq!(tab.to_str().unwrap(), "a\tb");
    assert_eq!(
        AsciiMetadataValue::from_static("ok").to_str().unwrap(),
        "ok"
    );
}

#[test]
fn ascii_values_refuse_controls_as_http_does() {
    let e: InvalidMetadataValue = "a\nb".parse::<AsciiMetadataValue>().unwrap_err();
    assert_eq!(e.to_string(), "failed to parse metadata value");
    assert!(AsciiMetadataValue::try_from(&b"\x7f"[..]).is_err());
    assert!(AsciiMetadataValue::try_from(vec![0u8]).is_err());
    assert!(AsciiMetadataValue::try_from(String::from("x\ry")).is_err());
    assert!(AsciiMetadataValue::try_from(Bytes::from_static(b"\xff ok")).is_ok());
    // Any bytes make a binary value.
    assert!(BinaryMetadataValue::try_from(&[0u8, 10, 127][..]).is_ok());
}

#[test]
#[should_panic(expected = "not visible ASCII")]
fn from_static_panics_on_a_non_visible_ascii_value() {
    let _ = AsciiMetadataValue::from_static("caf\u{e9}");
}

#[test]
fn binary_from_static_is_base64_as_tonics() {
    let v = BinaryMetadataValue::from_static("SGVsbG8hIQ==");
    assert_eq!(v, BinaryMetadataValue::from_static("SGVsbG8hIQ"));
    assert_eq!(v, "Hello!!");
    assert_eq!(&v.to_bytes().unwrap()[..], b"Hello!!");
    assert_eq!(
        Bytes::from(BinaryMetadataValue::from_bytes(b"Hello")),
        Bytes::from_static(b"SGVsbG8")
    );
    assert_eq!(format!("{v:?}"), "b\"Hello!!\"");
}

#[test]
#[should_panic(expected = "Invalid base64")]
fn binary_from_static_panics_on_text_that_is_not_base64() {
    let _ = BinaryMetadataValue::from_static("not base64!");
}

/// `a == b` and `b == a` through the impls a ported program calls.
fn eq_both_ways<A, B>(a: &A, b: &B) -> bool
where
    A: PartialEq<B> + ?Sized,
    B: PartialEq<A> + ?Sized,
{
    PartialEq::eq(a, b) && PartialEq::eq(b, a)
}

#[test]
fn values_compare_with_values_and_text_both_ways() {
    let v = AsciiMetadataValue::from_static("abc");
    assert_eq!(v, AsciiMetadataValue::from_static("abc"));
    assert_ne!(v, AsciiMetadataValue::from_static("ABC"));
    assert!(eq_both_ways(&v, "abc"));
    assert!(eq_both_ways(&v, &"abc"));
    assert!(eq_both_ways(&v, &String::from("abc")));
    assert!(eq_both_ways(&v, "abc".as_bytes()));
    assert!(eq_both_ways(&&v, &AsciiMetadataValue::from_static("abc")));
    assert!(!eq_both_ways(&v, "abd"));
    assert_eq!(v, "abc"); // what tonic's examples write
    assert!(v < "abd" && "abb" < v && v > *"ab");
    assert!(v < AsciiMetadataValue::from_static("b"));
    let b = BinaryMetadataValue::from_bytes(b"abc");
    assert!(eq_both_ways(&b, "abc"));
    assert_ne!(b, "ABC");
}

#[test]
fn values_convert_as_tonics() {
    assert_eq!(AsciiMetadataValue::from(42u16), "42");
    assert_eq!(AsciiMetadataValue::from(-7i64), "-7");
    assert_eq!(AsciiMetadataValue::from(usize::MAX), usize::MAX.to_string());
    let key = AsciiMetadataKey::from_static("x-key");
    assert_eq!(AsciiMetadataValue::from_key(key), "x-key");
    let v = AsciiMetadataValue::try_from(b"bytes").unwrap();
    assert_eq!(v.len(), 5);
    assert_eq!(v.as_encoded_bytes(), b"bytes");
    assert_eq!(Bytes::from(v), Bytes::from_static(b"bytes"));
    assert!(AsciiMetadataValue::from_static("").is_empty());
}

#[test]
fn sensitive_values_hide_from_debug() {
    let mut v = AsciiMetadataValue::from_static("secret");
    assert_eq!(format!("{v:?}"), "\"secret\"");
    v.set_sensitive(true);
    assert!(v.is_sensitive());
    assert_eq!(format!("{v:?}"), "Sensitive");
    let escaped = AsciiMetadataValue::try_from("\u{7FFF}say \"hi\"").unwrap();
    assert_eq!(format!("{escaped:?}"), "\"\\xe7\\xbf\\xbfsay \\\"hi\\\"\"");
}

#[test]
fn keys_follow_grpcs_rules_and_lowercase_as_tonics() {
    assert_eq!(
        AsciiMetadataKey::from_bytes(b"abc").unwrap().as_str(),
        "abc"
    );
    assert_eq!(AsciiMetadataKey::from_bytes(b"X-Trace").unwrap(), "x-trace");
    assert!(AsciiMetadataKey::from_bytes(b"abc-bin").is_err());
    assert!(BinaryMetadataKey::from_bytes(b"abc").is_err());
    assert_eq!(
        BinaryMetadataKey::from_bytes(b"abc-bin").unwrap().as_str(),
        "abc-bin"
    );
    for bad in [&b""[..], b"\xff", b"a b", b"a!b", &[b'a'; 256]] {
        let e: InvalidMetadataKey = AsciiMetadataKey::from_bytes(bad).unwrap_err();
        assert_eq!(e.to_string(), "invalid gRPC metadata key name");
    }
    assert!("x.y_z-0".parse::<AsciiMetadataKey>().is_ok());
    let k = AsciiMetadataKey::from_static("x-k");
    assert!(k == "X-K" && "x-k" == k && k == *"x-k");
    assert_eq!(format!("{k} {k:?}"), "x-k \"x-k\"");
}

#[test]
#[should_panic(expected = "invalid metadata key")]
fn from_static_keys_must_be_lowercase() {
    let _ = AsciiMetadataKey::from_static("Upper");
}

#[test]
#[should_panic(expected = "-bin names binary values")]
fn inserting_an_ascii_value_under_a_binary_key_panics() {
    MetadataMap::new().insert("x-bin", MetadataValue::from_static("v"));
}

#[test]
fn insert_append_and_remove_as_http_header_maps() {
    let mut m = MetadataMap::new();
    assert!(!m.append("a", MetadataValue::from_static("1")));
    m.insert("b", MetadataValue::from_static("2"));
    assert!(m.append("a", MetadataValue::from_static("3")));
    // Values of a key stay together, keys in first-insertion order.
    let seen: Vec<_> = m
        .iter()
        .map(|e| match e {
            KeyAndValueRef::Ascii(k, v) => format!("{k}={}", v.to_str().unwrap()),
            KeyAndValueRef::Binary(k, _) => format!("{k}=?"),
        })
        .collect();
    assert_eq!(seen, ["a=1", "a=3", "b=2"]);
    // insert replaces every value in place and returns the first.
    let old = m.insert("a", MetadataValue::from_static("4")).unwrap();
    assert_eq!(old, "1");
    assert_eq!((m.len(), m.keys_len()), (2, 2));
    assert_eq!(m.get_all("a").iter().collect::<Vec<_>>(), ["4"]);
    assert!(m
        .iter()
        .next()
        .is_some_and(|e| matches!(e, KeyAndValueRef::Ascii(k, _) if k == "a")));
    m.append("a", MetadataValue::from_static("5"));
    assert_eq!(m.remove("a").unwrap(), "4");
    assert!(!m.contains_key("a"));
    assert_eq!(m.remove("a"), None);
    assert_eq!(m.len(), 1);
}

#[test]
fn lookups_take_keys_strings_and_any_case() {
    let mut m = MetadataMap::with_capacity(4);
    assert!(m.capacity() >= 4);
    let key = AsciiMetadataKey::from_bytes(b"x-user").unwrap();
    m.insert(&key, MetadataValue::from_static("alice"));
    m.insert_bin(
        BinaryMetadataKey::from_static("x-raw-bin"),
        MetadataValue::from_bytes(&[1, 2]),
    );
    assert_eq!(m.get("X-User").unwrap(), "alice");
    assert_eq!(m.get(String::from("x-user")).unwrap(), "alice");
    let owned = String::from("x-user");
    assert_eq!(m.get(&owned).unwrap(), "alice");
    assert_eq!(m.get(&key).unwrap(), "alice");
    assert_eq!(m.get(key.clone()).unwrap(), "alice");
    assert!(m.contains_key("x-raw-bin") && m.contains_key(&key) && m.contains_key("X-USER"));
    // A key of one kind never finds a value of the other.
    assert!(m.get("x-raw-bin").is_none() && m.get_bin("x-user").is_none());
    assert!(m.get_all_bin("x-user").iter().next().is_none());
    *m.get_mut("x-user").unwrap() = MetadataValue::from_static("bob");
    m.get_bin_mut("x-raw-bin").unwrap().set_sensitive(true);
    assert_eq!(m.get("x-user").unwrap(), "bob");
    assert!(m.get_bin("x-raw-bin").unwrap().is_sensitive());
    assert_eq!(m.remove_bin("x-raw-bin").unwrap(), [1u8, 2][..]);
    m.clear();
    assert!(m.is_empty());
}

#[test]
fn get_all_iterates_both_ways_and_compares() {
    let mut m = MetadataMap::new();
    m.append("x-tag", MetadataValue::from_static("a"));
    m.insert("x-other", MetadataValue::from_static("z"));
    m.append("x-tag", MetadataValue::from_static("b"));
    m.append_bin("x-tag-bin", MetadataValue::from_bytes(b"c"));
    m.append_bin("x-tag-bin", MetadataValue::from_bytes(b"d"));
    let all = m.get_all("x-tag");
    assert_eq!(all.iter().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(all.iter().rev().collect::<Vec<_>>(), ["b", "a"]);
    let mut twice = 0;
    for v in &all {
        twice += usize::from(v == "a" || v == "b");
    }
    for v in all {
        twice += usize::from(v == "a" || v == "b");
    }
    assert_eq!(twice, 4);
    assert_eq!(m.get_all("x-tag"), m.get_all("X-TAG"));
    assert_ne!(m.get_all("x-tag"), m.get_all("x-other"));
    assert_eq!(m.get_all("missing").iter().count(), 0);
    assert_eq!(
        m.get_all_bin("x-tag-bin").into_iter().collect::<Vec<_>>(),
        ["c", "d"]
    );
}

#[test]
fn keys_values_and_mutable_views() {
    let mut m = MetadataMap::new();
    m.append("a", MetadataValue::from_static("1"));
    m.append_bin("b-bin", MetadataValue::from_bytes(b"2"));
    m.append("a", MetadataValue::from_static("3"));
    let keys: Vec<String> = m
        .keys()
        .map(|k| match k {
            KeyRef::Ascii(k) => k.to_string(),
            KeyRef::Binary(k) => k.to_string(),
        })
        .collect();
    assert_eq!(keys, ["a", "b-bin"]);
    assert_eq!(m.keys().len(), 2);
    let values = m
        .values()
        .filter(|v| matches!(v, ValueRef::Ascii(_)))
        .count();
    assert_eq!(values, 2);
    for v in m.values_mut() {
        if let ValueRefMut::Binary(v) = v {
            *v = MetadataValue::from_bytes(b"9");
        }
    }
    for e in m.iter_mut() {
        if let KeyAndMutValueRef::Ascii(_, v) = e {
            v.set_sensitive(true);
        }
    }
    assert_eq!(m.get_bin("b-bin").unwrap(), "9");
    assert!(m.get_all("a").iter().all(|v| v.is_sensitive()));
}

#[test]
fn a_decoded_map_keeps_the_senders_order_and_finds_every_value() {
    // a, b, a on the wire (another sender's order): all of a's values are found and
    // `keys` names each key once.
    let mut wire = vec![0, 3];
    for (k, v) in [("a", "1"), ("b", "2"), ("a", "3")] {
        wire.extend([k.len() as u8]);
        wire.extend(k.as_bytes());
        wire.extend((v.len() as u16).to_be_bytes());
        wire.extend(v.as_bytes());
    }
    let m = MetadataMap::decode(&wire, DEFAULT_METADATA_LIMIT).unwrap();
    assert_eq!(m.get_all("a").iter().collect::<Vec<_>>(), ["1", "3"]);
    assert_eq!(m.keys_len(), 2);
    let mut again = Vec::new();
    m.encode(&mut again);
    assert_eq!(again, wire);
}

#[test]
fn reserved_grpc_names_are_kept_but_not_sent() {
    let mut m = MetadataMap::new();
    for name in [
        "te",
        "content-type",
        "grpc-message",
        "grpc-message-type",
        "grpc-status",
    ] {
        m.insert(
            AsciiMetadataKey::from_bytes(name.as_bytes()).unwrap(),
            MetadataValue::from_static("x"),
        );
    }
    assert_eq!(m.get("grpc-status").unwrap(), "x");
    assert_eq!(m.encoded_len(), 0);
    m.insert("grpc-status-details", MetadataValue::from_static("kept"));
    let d = round_trip(&m);
    assert_eq!(d.len(), 1);
    assert_eq!(d.get("grpc-status-details").unwrap(), "kept");
}

#[test]
fn bad_keys_values_and_frames_are_rejected() {
    let frame = |key: &[u8], value: &[u8]| {
        let mut f = vec![0, 1, key.len() as u8];
        f.extend(key);
        f.extend((value.len() as u16).to_be_bytes());
        f.extend(value);
        f
    };
    let internal = |src: &[u8]| {
        MetadataMap::decode(src, DEFAULT_METADATA_LIMIT)
            .unwrap_err()
            .code()
    };
    assert!(MetadataMap::decode(&frame(b"ok", b"caf\xc3\xa9\t"), 100).is_ok());
    assert_eq!(internal(&frame(b"Upper", b"v")), crate::Code::Internal);
    assert_eq!(internal(&frame(b"", b"v")), crate::Code::Internal);
    assert_eq!(internal(&frame(b"x", b"a\nb")), crate::Code::Internal);
    assert!(MetadataMap::decode(&frame(b"x-bin", b"a\nb"), 100).is_ok());
    assert_eq!(internal(&[0, 1, 5]), crate::Code::Internal);
    assert_eq!(
        MetadataMap::decode(&[0; 200], 100).unwrap_err().code(),
        crate::Code::ResourceExhausted
    );
}

#[test]
fn entries_insert_append_and_remove_as_tonics() {
    let mut m = MetadataMap::new();
    assert!(m.entry("Bad Key").is_err());
    assert!(m.entry("x-bin").is_err() && m.entry_bin("x").is_err());

    let v = m
        .entry("x-a")
        .unwrap()
        .or_insert(MetadataValue::from_static("1"));
    assert_eq!(*v, "1");
    let v = m
        .entry("X-A")
        .unwrap()
        .or_insert_with(|| unreachable!("occupied"));
    *v = MetadataValue::from_static("2");
    assert_eq!(m.get("x-a").unwrap(), "2");

    match m.entry("x-a").unwrap() {
        Entry::Occupied(mut e) => {
            assert_eq!(e.key(), "x-a");
            e.append(MetadataValue::from_static("3"));
            assert_eq!(e.iter().collect::<Vec<_>>(), ["2", "3"]);
            for v in &mut e {
                v.set_sensitive(true);
            }
            let old: Vec<_> = e.insert_mult(MetadataValue::from_static("4")).collect();
            assert_eq!(old, ["2", "3"]);
            assert_eq!(*e.get(), "4");
            assert!(!e.get().is_sensitive());
            assert_eq!(e.insert(MetadataValue::from_static("5")), "4");
            e.get_mut().set_sensitive(true);
        }
        Entry::Vacant(_) => unreachable!("x-a has values"),
    }
    assert!(m.get("x-a").unwrap().is_sensitive());

    match m.entry_bin("x-b-bin").unwrap() {
        Entry::Vacant(e) => {
            assert_eq!(e.key(), "x-b-bin");
            let mut e = e.insert_entry(MetadataValue::from_bytes(b"b"));
            e.append(MetadataValue::from_bytes(b"c"));
            let (key, values) = e.remove_entry_mult();
            assert_eq!(key, "x-b-bin");
            assert_eq!(values.collect::<Vec<_>>(), ["b", "c"]);
        }
        Entry::Occupied(_) => unreachable!("x-b-bin is new"),
    }
    assert!(!m.contains_key("x-b-bin"));

    if let Entry::Occupied(e) = m.entry("x-a").unwrap() {
        assert_eq!(e.remove(), "5");
    }
    assert!(m.is_empty());
}
