//! Allocation scripts run on the policy allocator and on the system allocator side by
//! side: the fuzz target `allocator` (in `fuzz/`) and the replay of its corpus.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};

use super::{Heap, Memory};

/// Chunks handed out from one buffer, up to its size.
pub(crate) struct Arena {
    bytes: RefCell<Vec<u128>>,
    used: Cell<usize>,
}

impl Arena {
    /// An arena of `bytes` bytes.
    pub(crate) fn new(bytes: usize) -> Self {
        Self {
            bytes: RefCell::new(vec![0; bytes / 16]),
            used: Cell::new(0),
        }
    }
}

impl Memory for &Arena {
    fn chunk(&self, bytes: usize) -> Option<(usize, usize)> {
        let mut buffer = self.bytes.borrow_mut();
        let capacity = buffer.len() * 16;
        let size = bytes.max(64 << 10);
        let used = self.used.get();
        if used + size > capacity {
            return None;
        }
        self.used.set(used + size);
        let start = buffer.as_mut_ptr().expose_provenance() + used;
        Some((start, start + size))
    }
}

/// At most this many steps of a script run.
const STEPS: usize = 256;
/// The largest block a step asks for: 255 << 8 bytes, and an alignment of 32.
const ARENA: usize = 32 << 20;

/// One live block: ours, the system allocator's, and their layout.
struct Block {
    ours: *mut u8,
    system: *mut u8,
    layout: Layout,
}

/// A layout from two script bytes: sizes from 1 to 65,295 bytes (every size class and
/// large blocks), alignments from 1 to 32 (over-aligned ones too).
fn layout(a: u8, b: u8) -> Layout {
    let size = ((usize::from(a) << (b % 9)) + usize::from(b >> 4)).max(1);
    let align = 1 << (b % 6);
    Layout::from_size_align(size, align).expect("a small power-of-two alignment")
}

/// Writes a pattern from `seed` into bytes `from..to` of both copies of a block.
///
/// # Safety
/// Both pointers are valid for `to` bytes.
unsafe fn fill(block: &Block, from: usize, to: usize, seed: u8) {
    for i in from..to {
        let byte = seed.wrapping_add(i as u8);
        // SAFETY: the caller's contract.
        unsafe {
            block.ours.add(i).write(byte);
            block.system.add(i).write(byte);
        }
    }
}

/// The blocks' bytes are the same in both allocators'.
fn same_contents(block: &Block, len: usize) -> bool {
    // SAFETY: both blocks are live and at least `len` bytes long.
    unsafe {
        std::slice::from_raw_parts(block.ours, len) == std::slice::from_raw_parts(block.system, len)
    }
}

/// Checks a block just handed out: not null, aligned, overlapping no other live one.
fn check_new<'a>(block: *mut u8, layout: Layout, live: impl IntoIterator<Item = &'a Block>) {
    assert!(
        !block.is_null(),
        "{layout:?}: null from a {ARENA}-byte arena"
    );
    assert_eq!(block.addr() % layout.align(), 0, "{layout:?} misaligned");
    let (start, end) = (block.addr(), block.addr() + layout.size());
    for other in live {
        let (o_start, o_end) = (other.ours.addr(), other.ours.addr() + other.layout.size());
        assert!(
            end <= o_start || o_end <= start,
            "{layout:?} at {start:#x} overlaps {:?} at {o_start:#x}",
            other.layout
        );
    }
}

/// Runs the script `data`: four bytes a step (allocate, free, or reallocate a live block
/// and refill the new part), then checks every live block against the system
/// allocator's copy and frees both.
pub(crate) fn run(data: &[u8]) {
    let arena = Arena::new(ARENA);
    let heap = Heap::new(&arena);
    let mut live: Vec<Block> = Vec::new();
    for (step, chunk) in data.chunks_exact(4).take(STEPS).enumerate() {
        let &[op, a, b, c] = chunk else {
            unreachable!("chunks of four")
        };
        let tag = step as u8;
        match op % 4 {
            0 | 1 => {
                let layout = layout(a, b);
                // SAFETY: a layout of non-zero size.
                let block = unsafe {
                    Block {
                        ours: heap.alloc(layout),
                        system: System.alloc(layout),
                        layout,
                    }
                };
                check_new(block.ours, layout, &live);
                assert!(!block.system.is_null(), "the system is out of memory");
                // SAFETY: both blocks are `layout.size()` bytes long.
                unsafe { fill(&block, 0, layout.size(), tag) };
                live.push(block);
            }
            2 if !live.is_empty() => {
                let block = live.swap_remove(usize::from(a) % live.len());
                assert!(same_contents(&block, block.layout.size()));
                // SAFETY: both blocks are live, with this layout.
                unsafe {
                    heap.dealloc(block.ours, block.layout);
                    System.dealloc(block.system, block.layout);
                }
            }
            3 if !live.is_empty() => {
                let index = usize::from(a) % live.len();
                let old = live[index].layout;
                let new_layout =
                    Layout::from_size_align(layout(b, c).size(), old.align()).expect("small");
                let new_size = new_layout.size();
                // SAFETY: the block is live with layout `old`; `new_size` is not zero and
                // valid for its alignment.
                let moved = unsafe {
                    Block {
                        ours: heap.realloc(live[index].ours, old, new_size),
                        system: System.realloc(live[index].system, old, new_size),
                        layout: new_layout,
                    }
                };
                assert!(!moved.system.is_null(), "the system is out of memory");
                check_new(
                    moved.ours,
                    new_layout,
                    live[..index].iter().chain(&live[index + 1..]),
                );
                assert!(
                    same_contents(&moved, old.size().min(new_size)),
                    "realloc from {old:?} to {new_size} lost bytes"
                );
                // SAFETY: both blocks are `new_size` bytes long.
                unsafe { fill(&moved, old.size().min(new_size), new_size, tag) };
                live[index] = moved;
            }
            _ => {}
        }
    }
    for block in live {
        assert!(
            same_contents(&block, block.layout.size()),
            "{:?}",
            block.layout
        );
        // SAFETY: both blocks are live, with this layout.
        unsafe {
            heap.dealloc(block.ours, block.layout);
            System.dealloc(block.system, block.layout);
        }
    }
}
