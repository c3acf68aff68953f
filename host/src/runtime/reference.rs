//! The reference workload of the runtime's figures (docs/BENCHMARKS.md, "runtime"): a
//! `fanout` DataJob whose workers all run and are ready, nothing changed since the last
//! call. `cargo bench`, `policy bench` and the tests call with it; the same DataJob as a
//! file is `host/benches/fanout-10.yaml`, and a test holds the two together.

use super::{Child, ChildPhase, Context, DataJob, Input};

/// The call's clock: a fixed time, so that every run answers the same.
pub const NOW_UNIX_MS: u64 = 1_700_000_000_000;

/// The DataJob `default/bench` with `n` workers, and its context.
#[must_use]
pub fn fanout(n: usize) -> Input {
    let params =
        serde_json::json!({"replicas": n, "image": "busybox:1.36", "command": ["sleep", "3600"]});
    let outputs = serde_json::json!({"phase": "Running", "desired": n, "pending": 0, "running": n, "succeeded": 0, "failed": 0});
    Input {
        job: DataJob {
            name: "bench".into(),
            namespace: "default".into(),
            uid: "uid-bench".into(),
            generation: 1,
            labels: vec![],
            annotations: vec![],
            params: params.to_string(),
            status: Some(outputs.to_string()),
            deletion_unix_ms: None,
        },
        children: workers("bench", n),
        ctx: Context {
            now_unix_ms: NOW_UNIX_MS,
            attempt: 1,
            policy_digest: String::new(),
        },
    }
}

/// `n` running, ready worker Pods of the DataJob `job`, in name order as the cache hands
/// them over; without labels, which fanout does not read.
#[must_use]
pub fn workers(job: &str, n: usize) -> Vec<Child> {
    let mut children: Vec<Child> = (0..n)
        .map(|i| Child {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: format!("{job}-worker-{i}"),
            phase: ChildPhase::Running,
            ready: true,
            deleting: false,
            labels: vec![],
        })
        .collect();
    children.sort_by(|a, b| a.name.cmp(&b.name));
    children
}
