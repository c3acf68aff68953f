//! A failed read becomes the guest's own `failed` error naming the path.

use fs_read::FsRead;
use policyhost_sdk::PolicyError;
use policyhost_sdk::testing::{Call, JobFixture};
use serde_json::json;

#[test]
fn a_missing_file_fails_the_call_naming_the_path() {
    let job = JobFixture::new("demo").params(json!({ "path": "/nonexistent/policyhost-test" }));
    let outcome = Call::new(job).reconcile::<FsRead>();
    let Err(PolicyError::Failed(message)) = outcome.result else {
        panic!("expected failed")
    };
    assert!(
        message.starts_with("cannot read /nonexistent/policyhost-test: "),
        "{message}"
    );
}
