//! The protocol library declares no global allocator: a program that links it (a
//! third-party extension on the SDK) chooses its own. Were one declared in the library,
//! this test would not link ("the `#[global_allocator]` in this crate conflicts with
//! global allocator in: protocol").

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting its allocations.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator with the same arguments.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is `System.alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn a_program_linking_protocol_allocates_with_its_own_allocator() {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let text = protocol::time::format_rfc3339_ms(1_709_164_800_000);
    assert_eq!(text, "2024-02-29T00:00:00.000Z");
    assert!(
        ALLOCATIONS.load(Ordering::Relaxed) > before,
        "the string protocol made was not allocated by this program's allocator"
    );
}
