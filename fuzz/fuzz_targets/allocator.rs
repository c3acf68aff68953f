#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| policyhost_sdk::fuzzing::allocator(data));
