//! Record item bodies compressed. A body of [`PACK_FROM`] bytes or more is packed with lz4
//! (its size first) on its way into the writer, when that is smaller, so a row waiting for a
//! commit holds less. SQLite stores it so, as a BLOB read back through [`unpack`] (text
//! bodies, small ones and those written before, stay text); PostgreSQL is given the text
//! back as the writer binds it, and compresses a large value itself (lz4 since migration 15).
//! [`compress`] is the one lz4 compressor of the server (the runtime's replay packs frames
//! with it too): it keeps its hash table and output buffer between calls.

use std::cell::RefCell;

use lz4_flex::block::{compress_into_with_table, get_maximum_output_size, CompressTable};

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
    compress(body.as_bytes(), |packed| {
        (packed.len() < body.len()).then(|| packed.to_vec())
    })
}

/// Inputs this long or longer are compressed without the kept table and buffer (its 16-bit
/// table only reaches this far, and a thread keeps no more room than this).
const KEPT_BELOW: usize = u16::MAX as usize;

thread_local! {
    /// A thread's lz4 hash table (8 KB) and output buffer. Made anew on every call, as
    /// `lz4_flex::compress_prepend_size` does, they cost more than compressing a record item
    /// or a replay block (~2 KB) does.
    static COMPRESSOR: RefCell<(CompressTable, Vec<u8>)> =
        RefCell::new((CompressTable::small(), Vec::new()));
}

/// `bytes` compressed with lz4, their size first (the text `lz4_flex::compress_prepend_size`
/// makes and [`unpack`] reads), handed to `keep`, which copies what it keeps and must not
/// compress anything itself.
pub fn compress<R>(bytes: &[u8], keep: impl FnOnce(&[u8]) -> R) -> R {
    if bytes.len() >= KEPT_BELOW {
        return keep(&lz4_flex::compress_prepend_size(bytes));
    }
    COMPRESSOR.with_borrow_mut(|(table, out)| {
        let room = 4 + get_maximum_output_size(bytes.len());
        if out.len() < room {
            out.resize(room, 0);
        }
        // Below `KEPT_BELOW`, the size fits the 4 bytes.
        out[..4].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
        match compress_into_with_table(bytes, &mut out[4..room], table) {
            Ok(written) => keep(&out[..4 + written]),
            // The buffer is the worst case's size, so this is not expected; the allocating
            // path gives the same text.
            Err(_) => keep(&lz4_flex::compress_prepend_size(bytes)),
        }
    })
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

    #[test]
    fn the_kept_compressor_writes_what_a_fresh_one_does() {
        // Bodies of every kind, one after another on one thread, so each call finds the
        // table and buffer the one before left: text that repeats, noise, empty, and one
        // past the kept table's reach.
        let mut state = 0x2545_F491_4F6C_DD1D_u64;
        let mut noise = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect()
        };
        let bodies = [
            br#"{"kind":"tool_result","result":"stored"}"#.repeat(50),
            noise(3000),
            Vec::new(),
            b"ab".repeat(40_000),
            br#"{"kind":"assistant"}"#.repeat(7),
            noise(70_000),
            b"x".repeat(1000),
        ];
        for body in bodies {
            let kept = compress(&body, <[u8]>::to_vec);
            assert_eq!(kept, lz4_flex::compress_prepend_size(&body));
            assert_eq!(lz4_flex::decompress_size_prepended(&kept).unwrap(), body);
        }
    }
}
