//! Versions of a component: the same code under another digest, or made
//! heavy with a large data segment (as a team that embeds a model or a
//! lookup table ships it). Each heavy version's segment holds other bytes,
//! so no two share a digest, compiled code or memory image.

use super::leb128;

/// Splits `bytes` (after an 8-byte header) into `(id, payload)` sections.
fn sections(bytes: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    let mut at = 8;
    while at < bytes.len() {
        let id = bytes[at];
        at += 1;
        let (size, read) = read_leb(&bytes[at..]);
        at += read;
        out.push((id, &bytes[at..at + size]));
        at += size;
    }
    out
}

fn read_leb(bytes: &[u8]) -> (usize, usize) {
    let (mut value, mut shift) = (0usize, 0);
    for (i, byte) in bytes.iter().enumerate() {
        value |= usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return (value, i + 1);
        }
        shift += 7;
    }
    panic!("a truncated LEB128 number")
}

fn signed_leb(mut n: i64, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        let done = (n == 0 && byte & 0x40 == 0) || (n == -1 && byte & 0x40 != 0);
        out.push(if done { byte } else { byte | 0x80 });
        if done {
            return;
        }
    }
}

fn push_section(id: u8, payload: &[u8], out: &mut Vec<u8>) {
    out.push(id);
    leb128(payload.len(), out);
    out.extend_from_slice(payload);
}

/// `component` under another digest: the same code, with a custom section
/// naming `label` appended.
#[must_use]
pub fn version(component: &[u8], label: &str) -> Vec<u8> {
    custom_section(component, "policyhost-test-version", label.as_bytes())
}

/// `component` saying, in a `policyhost-sdk` section as an SDK writes it,
/// that a Python SDK built it for `world`.
#[must_use]
pub fn built_for(component: &[u8], world: &str) -> Vec<u8> {
    let text = format!(r#"{{"language":"python","sdk":"9.9.9","world":"{world}"}}"#);
    custom_section(component, "policyhost-sdk", text.as_bytes())
}

/// `component` with a custom section `name` holding `payload` appended.
#[must_use]
pub fn custom_section(component: &[u8], name: &str, payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    leb128(name.len(), &mut body);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    let mut out = component.to_vec();
    push_section(0, &body, &mut out);
    out
}

/// `component` (a policy built for `wasm32-wasip2`) with an active data
/// segment of `size` bytes (a multiple of 64 KiB) filled from `seed`, in new
/// pages of the memory its first memory-defining core module defines: the
/// program's own data and heap are left where they were.
#[must_use]
pub fn with_data_segment(component: &[u8], size: usize, seed: u64) -> Vec<u8> {
    assert_eq!(size % 65536, 0, "whole pages");
    let mut out = component[..8].to_vec();
    let mut done = false;
    for (id, payload) in sections(component) {
        if id == 1
            && !done
            && let Some(module) = grow(payload, size, seed)
        {
            push_section(1, &module, &mut out);
            done = true;
            continue;
        }
        push_section(id, payload, &mut out);
    }
    assert!(done, "no core module of the component defines a memory");
    out
}

/// The core module with the segment, or `None` if it defines no memory.
fn grow(module: &[u8], size: usize, seed: u64) -> Option<Vec<u8>> {
    let parts = sections(module);
    let memory = parts.iter().find(|(id, _)| *id == 5)?.1;
    let (count, mut at) = read_leb(memory);
    if count == 0 {
        return None;
    }
    let flags = memory[at];
    assert_eq!(flags & !1, 0, "a 32-bit, unshared memory");
    at += 1;
    let (min, read) = read_leb(&memory[at..]);
    at += read;
    let max = (flags & 1 == 1).then(|| {
        let (max, read) = read_leb(&memory[at..]);
        at += read;
        max
    });
    let pages = size / 65536;
    let mut new_memory = Vec::new();
    leb128(count, &mut new_memory);
    new_memory.push(flags);
    leb128(min + pages, &mut new_memory);
    if let Some(max) = max {
        leb128(max.max(min + pages), &mut new_memory);
    }
    new_memory.extend_from_slice(&memory[at..]);

    let mut segment = vec![0x00, 0x41]; // active, memory 0, i32.const
    signed_leb(
        i64::try_from(min * 65536).expect("an i32 offset"),
        &mut segment,
    );
    segment.push(0x0b);
    leb128(size, &mut segment);
    // One page of xorshift64 bytes from `seed`, repeated: every version's
    // segment is its own, and it gzips into a ConfigMap (about 80:1).
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut page = Vec::with_capacity(4096);
    for _ in 0..4096 / 8 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        page.extend_from_slice(&state.to_le_bytes());
    }
    segment.reserve(size);
    for _ in 0..size / page.len() {
        segment.extend_from_slice(&page);
    }

    let mut out = module[..8].to_vec();
    let mut data_seen = false;
    for (id, payload) in parts {
        match id {
            5 => push_section(5, &new_memory, &mut out),
            11 => {
                let (n, read) = read_leb(payload);
                let mut data = Vec::new();
                leb128(n + 1, &mut data);
                data.extend_from_slice(&payload[read..]);
                data.extend_from_slice(&segment);
                push_section(11, &data, &mut out);
                data_seen = true;
            }
            12 => {
                let (n, _) = read_leb(payload);
                let mut count = Vec::new();
                leb128(n + 1, &mut count);
                push_section(12, &count, &mut out);
            }
            _ => push_section(id, payload, &mut out),
        }
    }
    assert!(data_seen, "the module has a data section");
    Some(out)
}
