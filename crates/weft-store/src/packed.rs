//! Record item bodies compressed on SQLite. PostgreSQL compresses a large value itself (lz4
//! since migration 15); SQLite stores what it is given. A body of [`PACK_FROM`] bytes or more
//! is stored as a BLOB of lz4 (its size first) when that is smaller, and a BLOB body is read
//! back through [`unpack`]; text bodies, small ones and those written before, stay text.

use crate::{Result, StoreError};

/// Bodies shorter than this are stored as they are: a round's row is ~2 KB, a short answer
/// a few hundred bytes.
const PACK_FROM: usize = 512;

/// The most a stored body unpacks to: a larger size in a BLOB's header is corruption, not a
/// record item (a request's whole text is capped far below it).
const UNPACKED_MAX: usize = 64 * 1024 * 1024;

/// `body` compressed, when it is long enough and comes out smaller.
pub(crate) fn pack(body: &str) -> Option<Vec<u8>> {
    if body.len() < PACK_FROM {
        return None;
    }
    let packed = lz4_flex::compress_prepend_size(body.as_bytes());
    (packed.len() < body.len()).then_some(packed)
}

/// The text a packed body holds.
pub(crate) fn unpack(packed: &[u8]) -> Result<String> {
    let corrupt = |what: String| StoreError::Corrupt(format!("a packed record item {what}"));
    let size = packed
        .first_chunk::<4>()
        .map(|size| u32::from_le_bytes(*size) as usize)
        .ok_or_else(|| corrupt("without its size".into()))?;
    if size > UNPACKED_MAX {
        return Err(corrupt(format!("claims {size} bytes")));
    }
    let bytes =
        lz4_flex::decompress_size_prepended(packed).map_err(|e| corrupt(format!("({e})")))?;
    String::from_utf8(bytes).map_err(|e| corrupt(format!("is not text ({e})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_body_comes_back_as_it_was_and_a_short_one_is_left() {
        let body = format!(
            "[{}]",
            r#"{"kind":"tool_result","result":"stored é"}"#.repeat(40)
        );
        let packed = pack(&body).expect("a long, repetitive body packs");
        assert!(packed.len() < body.len() / 4);
        assert_eq!(unpack(&packed).unwrap(), body);
        assert!(pack(r#"{"kind":"assistant","text":"hi"}"#).is_none());
    }

    #[test]
    fn a_body_that_does_not_shrink_is_left() {
        // 600 bytes of a xorshift's noise: nothing for lz4 to find.
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let body: String = (0..600)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                char::from(b'!' + (state % 94) as u8)
            })
            .collect();
        assert!(pack(&body).is_none());
    }

    #[test]
    fn a_corrupt_blob_is_an_error_not_a_panic_or_a_huge_allocation() {
        assert!(unpack(&[1, 2]).is_err());
        assert!(unpack(&u32::MAX.to_le_bytes()).is_err());
        let mut packed = pack(&"x".repeat(1000)).unwrap();
        packed.truncate(packed.len() - 2);
        assert!(unpack(&packed).is_err());
        let not_text = lz4_flex::compress_prepend_size(&[0xFF; 600]);
        assert!(unpack(&not_text).is_err());
    }
}
