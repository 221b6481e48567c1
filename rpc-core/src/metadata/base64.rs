//! Standard base64 (RFC 4648 §4), for the two places tonic's API speaks it: a binary
//! value from static text, and a binary value turned into `Bytes`.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// `bytes` in base64 without padding (tonic's encoding of binary values).
pub(super) fn encode(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from_be_bytes([0, b[0], b[1], b[2]]);
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]);
        }
    }
    out
}

fn sextet(c: u8) -> Option<u32> {
    let v = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    };
    Some(u32::from(v))
}

/// Decodes base64 with or without its padding (but not with wrong padding), and with
/// the unused bits of the last character zero: tonic's rules.
pub(super) fn decode(text: &[u8]) -> Option<Vec<u8>> {
    let pad = text.iter().rev().take_while(|&&c| c == b'=').count();
    let body = &text[..text.len() - pad];
    let tail = body.len() % 4;
    if tail == 1 || (pad != 0 && (!text.len().is_multiple_of(4) || pad != (4 - tail) % 4)) {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() / 4 * 3 + 2);
    for chunk in body.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= sextet(c)? << (18 - 6 * i);
        }
        let [_, a, b, c] = n.to_be_bytes();
        let bytes = [a, b, c];
        let keep = chunk.len() - 1;
        if bytes[keep..].iter().any(|&x| x != 0) {
            return None; // bits past the end of the data
        }
        out.extend_from_slice(&bytes[..keep]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_4648_vectors_both_ways() {
        for (raw, text) in [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(raw.as_bytes()), text.as_bytes());
            assert_eq!(decode(text.as_bytes()).unwrap(), raw.as_bytes());
        }
        assert_eq!(decode(b"Zg==").unwrap(), b"f");
        assert_eq!(decode(b"Zm8=").unwrap(), b"fo");
        assert_eq!(encode(&[0xfb, 0xff]), b"+/8");
    }

    #[test]
    fn malformed_text_is_refused() {
        for bad in [
            &b"Z"[..],
            b"Zg=",
            b"Zg===",
            b"Zm9v=",
            b"Zh",
            b"Zm9",
            b"Zm 9v",
            b"Zm9v-_",
        ] {
            assert_eq!(decode(bad), None, "{:?}", std::str::from_utf8(bad));
        }
    }
}
