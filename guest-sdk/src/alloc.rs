//! The policy's memory allocator: blocks cut from chunks of the system
//! allocator's memory, small ones in power-of-two classes with a free list
//! each; nothing is ever coalesced.
//!
//! Why not the system allocator (`dlmalloc` in wasi-libc) for everything:
//! every call runs in a fresh instance whose memory is thrown away when the
//! call ends, so an allocator that keeps no bookkeeping beyond a free list
//! per size is enough, and it is cheaper per allocation (fanout's reference
//! call: 16 % less fuel). That matters because every string the host hands a
//! policy, and every string it returns, is one allocation and one free. A
//! block freed is reused by the next allocation that fits it; see [`Heap`].
//! The chunks come from the system allocator, so C code linked into a policy
//! (wasi-libc itself) still has a heap of its own.
//!
//! Enabled by the SDK's default `allocator` feature; a policy that brings
//! its own `#[global_allocator]` turns the feature off.
//!
//! fanout's reference call takes 168,308 fuel and 26.4 µs with it, 201,033
//! fuel and 29.9 µs without (docs/BENCHMARKS.md, "runtime"). It is held to
//! the system allocator by [`script`]: the same allocation scripts run on
//! both, their blocks' contents compared, in the tests and in the
//! coverage-guided fuzz target `allocator` (`fuzz/`).

#![allow(unsafe_code)]

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod script;

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::ptr;

/// Every block is at least this big and this aligned: room for the free
/// lists' links, and the alignment of every Rust type but a few SIMD ones.
const MIN_BLOCK: usize = 16;
/// Small blocks come in power-of-two classes: 16, 32, 64, 128 and 256 bytes.
const CLASSES: usize = 5;
const SMALL_MAX: usize = MIN_BLOCK << (CLASSES - 1);

/// Where the heap's memory comes from.
pub(crate) trait Memory {
    /// A fresh chunk of at least `bytes` bytes: `(start, end)` addresses,
    /// or `None` when no more memory may be had.
    fn chunk(&self, bytes: usize) -> Option<(usize, usize)>;
}

/// The allocator's state: the untouched rest of the current chunk, one free
/// list per small size class and one list of freed large blocks.
/// Single-threaded: a policy instance has one thread.
///
/// Large blocks (over 256 bytes: manifests, vectors) are cut to size; the
/// last one cut grows and shrinks in place, which is how a growing `Vec` or
/// `String` usually reallocates. A freed large block is reused, first fit,
/// by a request it holds without wasting more than half of it.
pub(crate) struct Heap<M> {
    memory: M,
    /// The next unused byte of the current chunk.
    top: Cell<usize>,
    /// The end of the current chunk (0 before the first).
    end: Cell<usize>,
    /// Heads of the small free lists; a free block's first word links to the next.
    small: [Cell<usize>; CLASSES],
    /// Head of the large free list; a free block's first word links to the
    /// next, its second holds its size.
    large: Cell<usize>,
}

impl<M: Memory> Heap<M> {
    pub(crate) const fn new(memory: M) -> Self {
        Self {
            memory,
            top: Cell::new(0),
            end: Cell::new(0),
            small: [const { Cell::new(0) }; CLASSES],
            large: Cell::new(0),
        }
    }

    /// How a layout is served.
    fn kind(layout: Layout) -> Kind {
        if layout.align() > MIN_BLOCK {
            return Kind::Aligned;
        }
        let size = layout.size().max(MIN_BLOCK);
        if size <= SMALL_MAX {
            let class =
                (size.next_power_of_two().trailing_zeros() - MIN_BLOCK.trailing_zeros()) as usize;
            return Kind::Small(class);
        }
        match size.checked_next_multiple_of(MIN_BLOCK) {
            Some(size) => Kind::Large(size),
            None => Kind::Aligned,
        }
    }

    /// `size` bytes aligned to `align` from the current chunk, or a new one.
    fn carve(&self, size: usize, align: usize) -> *mut u8 {
        if let Some(block) = self.carve_from(self.top.get(), size, align) {
            return block;
        }
        let Some(wanted) = size.checked_add(align) else {
            return ptr::null_mut();
        };
        let Some((start, end)) = self.memory.chunk(wanted) else {
            return ptr::null_mut();
        };
        // The rest of the old chunk is left unused.
        self.end.set(end);
        self.carve_from(start, size, align)
            .unwrap_or(ptr::null_mut())
    }

    fn carve_from(&self, top: usize, size: usize, align: usize) -> Option<*mut u8> {
        let start = top.checked_next_multiple_of(align)?;
        let new_top = start.checked_add(size)?;
        if new_top > self.end.get() {
            return None;
        }
        self.top.set(new_top);
        Some(ptr::with_exposed_provenance_mut(start))
    }

    /// A freed large block of `size` to `2 * size` bytes, unlinked.
    fn reuse_large(&self, size: usize) -> Option<*mut u8> {
        let mut link = &self.large;
        loop {
            let addr = link.get();
            if addr == 0 {
                return None;
            }
            let node: *mut [usize; 2] = ptr::with_exposed_provenance_mut(addr);
            // SAFETY: `addr` is a freed large block: at least 272 bytes,
            // 16-aligned, holding its link and size.
            let [next, held] = unsafe { node.read() };
            if held >= size && held / 2 <= size {
                link.set(next);
                return Some(node.cast());
            }
            // SAFETY: the link word of a freed block, which lives as long
            // as the heap; `Cell<usize>` has the layout of `usize`.
            link = unsafe { &*node.cast::<Cell<usize>>() };
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A power-of-two class of at most 256 bytes.
    Small(usize),
    /// Cut to this size (a multiple of 16).
    Large(usize),
    /// Over-aligned or huge: cut from the chunk and never reused.
    Aligned,
}

// SAFETY: blocks handed out never overlap: each is cut from the unused rest
// of a chunk, which only shrinks (but for the last large block cut, which is
// given back or resized in place), or taken from a free list, which holds
// only blocks given back by `dealloc` with a layout of their kind and size.
unsafe impl<M: Memory> GlobalAlloc for Heap<M> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match Self::kind(layout) {
            Kind::Small(class) => {
                let head = self.small[class].get();
                if head == 0 {
                    return self.carve(MIN_BLOCK << class, MIN_BLOCK);
                }
                let block: *mut usize = ptr::with_exposed_provenance_mut(head);
                // SAFETY: `head` is a free block of this class: at least 16
                // bytes, 16-aligned, and its first word is the next link.
                self.small[class].set(unsafe { block.read() });
                block.cast()
            }
            Kind::Large(size) => self
                .reuse_large(size)
                .unwrap_or_else(|| self.carve(size, MIN_BLOCK)),
            Kind::Aligned => self.carve(layout.size(), layout.align()),
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        let addr = block.expose_provenance();
        match Self::kind(layout) {
            Kind::Small(class) => {
                // SAFETY: `block` was allocated with this layout, hence from
                // this class: big enough and aligned for the link word.
                unsafe { block.cast::<usize>().write(self.small[class].get()) };
                self.small[class].set(addr);
            }
            Kind::Large(size) => {
                if addr + size == self.top.get() {
                    self.top.set(addr);
                } else {
                    // SAFETY: a large block: at least 272 bytes, 16-aligned.
                    unsafe { block.cast::<[usize; 2]>().write([self.large.get(), size]) };
                    self.large.set(addr);
                }
            }
            Kind::Aligned => {}
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract: `layout.align()` is a power of two
        // and `new_size` rounded up to it does not overflow.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let addr = block.expose_provenance();
        match (Self::kind(layout), Self::kind(new_layout)) {
            (Kind::Small(old), Kind::Small(new)) if old == new => return block,
            // The last block cut grows or shrinks in place if the chunk has room.
            (Kind::Large(old), Kind::Large(new))
                if addr + old == self.top.get() && addr + new <= self.end.get() =>
            {
                self.top.set(addr + new);
                return block;
            }
            _ => {}
        }
        // SAFETY: as for `alloc`.
        let moved = unsafe { self.alloc(new_layout) };
        if !moved.is_null() {
            // SAFETY: both blocks are valid for the smaller size and do not
            // overlap (the old one is still allocated).
            unsafe {
                ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size));
                self.dealloc(block, layout);
            }
        }
        moved
    }
}

#[cfg(all(target_arch = "wasm32", feature = "allocator"))]
mod wasm {
    use std::alloc::{GlobalAlloc, Layout, System};

    use super::{Heap, Memory};

    /// Chunks from the system allocator: first the free rest of the
    /// instance's initial memory, then at least 64 KiB at a time.
    pub(crate) struct Chunks {
        first: core::cell::Cell<bool>,
    }

    const PAGE: usize = 64 << 10;
    /// What the system allocator keeps for itself in the initial memory.
    const SLACK: usize = 1 << 10;

    unsafe extern "C" {
        /// Where the heap starts, after the stack and the static data.
        static __heap_base: u8;
    }

    impl Memory for Chunks {
        fn chunk(&self, bytes: usize) -> Option<(usize, usize)> {
            // A linker-defined symbol: only its address is read.
            let base = core::ptr::addr_of!(__heap_base).addr();
            let initial_free = core::arch::wasm32::memory_size(0)
                .saturating_mul(PAGE)
                .saturating_sub(base)
                .saturating_sub(SLACK);
            // The first chunk takes what the instance starts with, so that a
            // call that fits in it never grows its memory.
            let size = if self.first.replace(false) && bytes <= initial_free {
                initial_free
            } else {
                bytes.max(PAGE)
            };
            let layout = Layout::from_size_align(size, super::MIN_BLOCK).ok()?;
            // SAFETY: the layout has a non-zero size.
            let chunk = unsafe { System.alloc(layout) };
            let start = chunk.expose_provenance();
            (start != 0).then_some((start, start + size))
        }
    }

    /// The heap of the instance.
    pub(crate) struct Global(Heap<Chunks>);

    // SAFETY: policies run single-threaded (one instance, one thread).
    unsafe impl Sync for Global {}

    #[global_allocator]
    static HEAP: Global = Global(Heap::new(Chunks {
        first: core::cell::Cell::new(true),
    }));

    // SAFETY: delegates to `Heap`.
    unsafe impl GlobalAlloc for Global {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: the caller's contract.
            unsafe { self.0.alloc(layout) }
        }

        unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
            // SAFETY: the caller's contract.
            unsafe { self.0.dealloc(block, layout) }
        }

        unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: the caller's contract.
            unsafe { self.0.realloc(block, layout, new_size) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::script::Arena;
    use super::*;

    fn heap(arena: &Arena) -> Heap<&Arena> {
        Heap::new(arena)
    }

    fn arena(bytes: usize) -> Arena {
        Arena::new(bytes)
    }

    #[test]
    fn blocks_are_aligned_disjoint_and_reused_by_size_class() {
        let arena = arena(1 << 20);
        let heap = heap(&arena);
        let layouts = [(1, 1), (16, 8), (17, 8), (100, 4), (4096, 16), (5000, 8)];
        let mut blocks = Vec::new();
        for (size, align) in layouts {
            let layout = Layout::from_size_align(size, align).unwrap();
            let block = unsafe { heap.alloc(layout) };
            assert!(!block.is_null());
            assert_eq!(block.addr() % align.max(16), 0);
            unsafe { block.write_bytes(0xab, size) };
            blocks.push((block.addr(), size, layout, block));
        }
        let mut ranges: Vec<_> = blocks.iter().map(|b| (b.0, b.0 + b.1)).collect();
        ranges.sort_unstable();
        assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0), "{ranges:?}");
        let (addr, _, layout, block) = blocks[3];
        unsafe { heap.dealloc(block, layout) };
        let again = unsafe { heap.alloc(Layout::from_size_align(120, 8).unwrap()) };
        assert_eq!(again.addr(), addr, "a freed block serves its size class");
    }

    #[test]
    fn realloc_keeps_the_contents_and_stays_in_place_within_a_class() {
        let arena = arena(1 << 20);
        let heap = heap(&arena);
        let layout = Layout::from_size_align(20, 1).unwrap();
        let block = unsafe { heap.alloc(layout) };
        for i in 0..20 {
            unsafe { block.add(i).write(i as u8) };
        }
        let same = unsafe { heap.realloc(block, layout, 32) };
        assert_eq!(same, block);
        let moved = unsafe { heap.realloc(same, Layout::from_size_align(32, 1).unwrap(), 1000) };
        assert_ne!(moved, block);
        for i in 0..20 {
            assert_eq!(unsafe { moved.add(i).read() }, i as u8);
        }
    }

    #[test]
    fn the_last_large_block_grows_in_place_and_freed_ones_are_reused() {
        let arena = arena(1 << 20);
        let heap = heap(&arena);
        let layout = Layout::from_size_align(300, 8).unwrap();
        let first = unsafe { heap.alloc(layout) };
        let grown = unsafe { heap.realloc(first, layout, 5000) };
        assert_eq!(grown, first, "the block at the top grows in place");
        let grown_layout = Layout::from_size_align(5000, 8).unwrap();
        let second = unsafe { heap.alloc(layout) };
        assert_eq!(second.addr(), first.addr() + 5008);
        unsafe { heap.dealloc(first, grown_layout) };
        let fits = unsafe { heap.alloc(Layout::from_size_align(4000, 8).unwrap()) };
        assert_eq!(fits, first, "a freed large block serves a request it holds");
        let wasteful = unsafe { heap.alloc(Layout::from_size_align(300, 8).unwrap()) };
        assert_ne!(wasteful, first);
        unsafe { heap.dealloc(wasteful, layout) };
        let top = unsafe { heap.alloc(layout) };
        assert_eq!(
            top, wasteful,
            "freeing the last block gives it back to the chunk"
        );
    }

    #[test]
    fn a_long_script_runs_alike_on_the_policy_and_the_system_allocator() {
        let mut state = 0x9e37_79b9_u32;
        let script: Vec<u8> = (0..1024)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                state.to_le_bytes()[0]
            })
            .collect();
        super::script::run(&script);
    }

    #[test]
    fn running_out_of_memory_returns_null() {
        let arena = arena(64 << 10);
        let heap = heap(&arena);
        let big = Layout::from_size_align(1 << 20, 8).unwrap();
        assert!(unsafe { heap.alloc(big) }.is_null());
        let small = Layout::from_size_align(64, 8).unwrap();
        assert!(!unsafe { heap.alloc(small) }.is_null());
    }
}
