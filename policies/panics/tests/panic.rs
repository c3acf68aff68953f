//! The panic carries the recognisable marker.

use panics::Panics;
use policyhost_sdk::testing::{Call, JobFixture};

#[test]
#[should_panic(expected = "policyhost-test-panic: reconcile of demo gave up")]
fn reconcile_panics_with_the_marker() {
    let _ = Call::new(JobFixture::new("demo")).reconcile::<Panics>();
}
