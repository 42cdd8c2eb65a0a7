//! Hex encoding for binary values in the key-value space.
//!
//! PMI-1 values are text without spaces or control characters, but business cards (transport
//! addresses) are bytes. Lower-case hex is the encoding every PMI peer passes through untouched,
//! at the cost of doubling the size: a value of [`MAX_VALUE_LEN`](crate::wire::MAX_VALUE_LEN)
//! characters carries half as many bytes.

use crate::error::{Error, ErrorKind, Result};

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Encodes `bytes` as lower-case hex, two characters per byte.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// Decodes hex (either case) back to bytes; an odd length or a non-hex character is an
/// [`ErrorKind::Wire`] error, since it means the stored value was not written by [`encode`].
pub fn decode(text: &str) -> Result<Vec<u8>> {
    let text = text.as_bytes();
    if text.len() % 2 != 0 {
        return Err(Error::new(
            ErrorKind::Wire,
            format!("hex value has odd length {}", text.len()),
        ));
    }
    let mut out = Vec::with_capacity(text.len() / 2);
    for (i, pair) in text.chunks_exact(2).enumerate() {
        match (nibble(pair[0]), nibble(pair[1])) {
            (Some(hi), Some(lo)) => out.push(hi << 4 | lo),
            _ => {
                return Err(Error::new(
                    ErrorKind::Wire,
                    format!("non-hex character in value at offset {}", 2 * i),
                ))
            }
        }
    }
    Ok(out)
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        assert_eq!(encode(&[]), "");
        assert_eq!(encode(&[0x00, 0x7f, 0xff, 0x10]), "007fff10");
        assert_eq!(decode("007FfF10").unwrap(), vec![0x00, 0x7f, 0xff, 0x10]);
    }

    #[test]
    fn rejects_non_hex() {
        assert_eq!(decode("abc").unwrap_err().kind(), ErrorKind::Wire);
        assert_eq!(decode("zz").unwrap_err().kind(), ErrorKind::Wire);
        assert_eq!(decode("é1").unwrap_err().kind(), ErrorKind::Wire);
    }

    proptest! {
        #[test]
        fn round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            prop_assert_eq!(decode(&encode(&bytes)).unwrap(), bytes);
        }

        #[test]
        fn decode_never_panics(s in ".{0,64}") {
            let _ = decode(&s);
        }
    }
}
