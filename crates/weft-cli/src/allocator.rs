//! The global allocator: mimalloc, asked for a plain block wherever a plain block is aligned
//! enough (nearly every allocation), and for an aligned one only where it is not.
//!
//! The `mimalloc` crate's own allocator asks for an aligned block every time
//! (`mi_malloc_aligned`), whose path is longer than `mi_malloc`'s: callgrind put it at 4.5 %
//! of a W1 turn's instructions, for allocations that need no more than a word's alignment.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment every mimalloc block has, whatever its size: every block size is a whole
/// number of words. (Not `max_align_t`'s 16: a 24-byte block is only 8-aligned.)
const WORD: usize = std::mem::size_of::<usize>();

pub struct Mimalloc;

/// A block for `layout` from `plain` (by size) when a plain block is aligned enough, else
/// from `aligned` (by size and alignment).
///
/// # Safety
/// Both must be mimalloc's allocation functions, which take any size and alignment.
#[inline]
unsafe fn block(
    layout: Layout,
    plain: unsafe extern "C" fn(usize) -> *mut c_void,
    aligned: unsafe extern "C" fn(usize, usize) -> *mut c_void,
) -> *mut u8 {
    // SAFETY: the caller's.
    let block = unsafe {
        if layout.align() <= WORD {
            plain(layout.size())
        } else {
            aligned(layout.size(), layout.align())
        }
    };
    block.cast()
}

unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc's own allocation functions.
        unsafe { block(layout, mi::mi_malloc, mi::mi_malloc_aligned) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc's own allocation functions.
        unsafe { block(layout, mi::mi_zalloc, mi::mi_zalloc_aligned) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator (the trait's contract); `mi_free` frees any
        // block mimalloc gave, aligned or not.
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (block, align) = (ptr.cast::<c_void>(), layout.align());
        // SAFETY: as in `dealloc`; the block keeps at least the alignment it was asked for.
        let moved = unsafe {
            if align <= WORD {
                mi::mi_realloc(block, new_size)
            } else {
                mi::mi_realloc_aligned(block, new_size, align)
            }
        };
        moved.cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size and alignment a program asks for comes back aligned, sized and writable,
    /// through every entry point.
    #[test]
    fn blocks_are_aligned_as_asked() {
        let a = Mimalloc;
        for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [1, 3, 8, 12, 24, 40, 100, 1000, 5000, 70_000, 1 << 21] {
                let layout = Layout::from_size_align(size, align).unwrap_or_else(|e| panic!("{e}"));
                // SAFETY: a non-zero size; each block is freed with its own layout.
                unsafe {
                    let p = a.alloc(layout);
                    assert!(
                        !p.is_null() && (p as usize).is_multiple_of(align),
                        "{size} {align}"
                    );
                    p.write_bytes(7, size);
                    let p = a.realloc(p, layout, size * 3);
                    assert!(
                        !p.is_null() && (p as usize).is_multiple_of(align),
                        "{size} {align}"
                    );
                    assert_eq!(*p.add(size - 1), 7);
                    a.dealloc(p, Layout::from_size_align_unchecked(size * 3, align));
                    let z = a.alloc_zeroed(layout);
                    assert!(
                        !z.is_null() && (z as usize).is_multiple_of(align),
                        "{size} {align}"
                    );
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    a.dealloc(z, layout);
                }
            }
        }
    }
}
