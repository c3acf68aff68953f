#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| policyhost::fuzzing::outbound_origin(data));
