//! The counter really counts within one process, so a host that sees 1 on
//! every call proves it gives each call a fresh instance.

use policyhost_sdk::testing::{Call, JobFixture};
use static_counter::StaticCounter;

fn calls(call: &Call) -> serde_json::Value {
    let result = call
        .reconcile::<StaticCounter>()
        .result
        .expect("reconcile succeeds");
    serde_json::from_str(&result.status.outputs).expect("outputs are JSON")
}

#[test]
fn repeated_calls_in_one_instance_count_up() {
    let call = Call::new(JobFixture::new("demo"));
    let first = calls(&call)["calls"].as_u64().expect("a count");
    let second = calls(&call)["calls"].as_u64().expect("a count");
    assert_eq!(second, first + 1);
}
