#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| devcluster::fuzzing::patch(data));
