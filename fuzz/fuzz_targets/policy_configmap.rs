#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| policyhost::fuzzing::policy_configmap(data));
