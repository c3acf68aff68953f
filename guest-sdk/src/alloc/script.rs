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
/// The arena's size: a script may spend it, and then a null is the right answer.
const ARENA: usize = 4 << 20;
/// The smallest chunk the arena hands out.
const CHUNK: usize = 64 << 10;

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

/// Bytes 0, 1, ..., 255, twice: any run of up to 256 of them, from any start.
static PATTERN: [u8; 512] = {
    let mut bytes = [0; 512];
    let mut i = 0;
    while i < 512 {
        bytes[i] = i as u8;
        i += 1;
    }
    bytes
};

/// Writes `seed + i` (wrapping) at each byte `i` in `from..to` of both copies of a block,
/// a pattern that tells a block's bytes from any other's and from themselves moved.
///
/// # Safety
/// Both pointers are valid for `to` bytes.
unsafe fn fill(block: &Block, from: usize, to: usize, seed: u8) {
    let mut at = from;
    while at < to {
        let start = usize::from(seed.wrapping_add(at as u8));
        let len = (to - at).min(256);
        let run = &PATTERN[start..start + len];
        // SAFETY: the caller's contract; `run` is not in either block.
        unsafe {
            std::ptr::copy_nonoverlapping(run.as_ptr(), block.ours.add(at), len);
            std::ptr::copy_nonoverlapping(run.as_ptr(), block.system.add(at), len);
        }
        at += len;
    }
}

/// The blocks' bytes are the same in both allocators'.
fn same_contents(block: &Block, len: usize) -> bool {
    // SAFETY: both blocks are live and at least `len` bytes long.
    unsafe {
        std::slice::from_raw_parts(block.ours, len) == std::slice::from_raw_parts(block.system, len)
    }
}

impl Arena {
    /// Whether a null for `layout` is right: the arena has no chunk left that holds it.
    fn spent_for(&self, layout: Layout) -> bool {
        let left = self.bytes.borrow().len() * 16 - self.used.get();
        left < (layout.size() + layout.align() + 16).max(CHUNK)
    }
}

/// Whether a block just handed out is one: a null only from a spent arena; otherwise
/// aligned and overlapping no other live block.
fn check_new<'a>(
    block: *mut u8,
    layout: Layout,
    arena: &Arena,
    live: impl IntoIterator<Item = &'a Block>,
) -> bool {
    if block.is_null() {
        assert!(
            arena.spent_for(layout),
            "{layout:?}: null from an arena with room"
        );
        return false;
    }
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
    true
}

/// Frees both copies of a block after checking they still agree.
fn free(heap: &Heap<&Arena>, block: &Block) {
    assert!(
        same_contents(block, block.layout.size()),
        "{:?}",
        block.layout
    );
    // SAFETY: both blocks are live, with this layout.
    unsafe {
        heap.dealloc(block.ours, block.layout);
        System.dealloc(block.system, block.layout);
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
                let ours = unsafe { heap.alloc(layout) };
                if !check_new(ours, layout, &arena, &live) {
                    continue;
                }
                // SAFETY: as above.
                let system = unsafe { System.alloc(layout) };
                assert!(!system.is_null(), "the system is out of memory");
                let block = Block {
                    ours,
                    system,
                    layout,
                };
                // SAFETY: both blocks are `layout.size()` bytes long.
                unsafe { fill(&block, 0, layout.size(), tag) };
                live.push(block);
            }
            2 if !live.is_empty() => {
                let block = live.swap_remove(usize::from(a) % live.len());
                free(&heap, &block);
            }
            3 if !live.is_empty() => {
                let index = usize::from(a) % live.len();
                let old = live[index].layout;
                let new_layout =
                    Layout::from_size_align(layout(b, c).size(), old.align()).expect("small");
                let new_size = new_layout.size();
                // SAFETY: the block is live with layout `old`; `new_size` is not zero and
                // valid for its alignment.
                let ours = unsafe { heap.realloc(live[index].ours, old, new_size) };
                let others = live[..index].iter().chain(&live[index + 1..]);
                if !check_new(ours, new_layout, &arena, others) {
                    // The old block is still ours, as `realloc` promises.
                    continue;
                }
                // SAFETY: as above.
                let system = unsafe { System.realloc(live[index].system, old, new_size) };
                assert!(!system.is_null(), "the system is out of memory");
                let moved = Block {
                    ours,
                    system,
                    layout: new_layout,
                };
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
    for block in &live {
        free(&heap, block);
    }
}
