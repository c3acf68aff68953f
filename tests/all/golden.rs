//! `fanout` golden cases: the compiled component through the real runtime
//! gives the same result JSON as the SDK's native harness on the same inputs.

use policyhost::runtime::{
    Child, ChildPhase, Context, DataJob, Error, Input, KeyValue, PolicyLimits,
};
use policyhost_sdk::testing::Golden;
use serde_json::{Value, json};

use crate::common;

/// Reads the inputs of a golden file (format: policies/fanout/tests/golden/README.md).
fn input_of(case: &Value) -> Input {
    let job = &case["job"];
    let name = job["name"].as_str().expect("job.name").to_owned();
    let pairs = |v: &Value| -> Vec<KeyValue> {
        let mut pairs: Vec<KeyValue> = v
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| KeyValue {
                        key: k.clone(),
                        value: v.as_str().unwrap_or_default().to_owned(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        pairs.sort_by(|a, b| a.key.cmp(&b.key));
        pairs
    };
    let record = DataJob {
        uid: job["uid"]
            .as_str()
            .map_or_else(|| format!("uid-{name}"), str::to_owned),
        namespace: job["namespace"].as_str().unwrap_or("default").to_owned(),
        generation: job["generation"].as_u64().unwrap_or(1),
        labels: pairs(&job["labels"]),
        annotations: pairs(&job["annotations"]),
        params: if job["params"].is_null() {
            "{}".into()
        } else {
            job["params"].to_string()
        },
        status: (!job["status"].is_null()).then(|| job["status"].to_string()),
        deletion_unix_ms: job["deletionUnixMs"].as_u64(),
        name,
    };
    let children = case["children"]
        .as_array()
        .map(|children| {
            children
                .iter()
                .map(|c| Child {
                    api_version: c["apiVersion"].as_str().unwrap_or("v1").to_owned(),
                    kind: c["kind"].as_str().unwrap_or("Pod").to_owned(),
                    name: c["name"].as_str().expect("child name").to_owned(),
                    phase: match c["phase"].as_str().unwrap_or("pending") {
                        "running" => ChildPhase::Running,
                        "succeeded" => ChildPhase::Succeeded,
                        "failed" => ChildPhase::Failed,
                        "unknown" => ChildPhase::Unknown,
                        _ => ChildPhase::Pending,
                    },
                    ready: c["ready"].as_bool().unwrap_or(false),
                    deleting: c["deleting"].as_bool().unwrap_or(false),
                    labels: pairs(&c["labels"]),
                })
                .collect()
        })
        .unwrap_or_default();
    let ctx = &case["context"];
    Input {
        job: record,
        children,
        ctx: Context {
            now_unix_ms: ctx["nowUnixMs"].as_u64().unwrap_or(1_700_000_000_000),
            attempt: ctx["attempt"]
                .as_u64()
                .and_then(|a| u32::try_from(a).ok())
                .unwrap_or(1),
            policy_digest: String::new(),
        },
    }
}

/// The result JSON of a runtime call (a policy error in its documented shape).
fn json_of<T: serde::Serialize>(result: Result<T, Error>) -> Value {
    match result {
        Ok(value) => serde_json::to_value(value).expect("serialize"),
        Err(Error::PolicyError(e)) => serde_json::to_value(e).expect("serialize"),
        Err(other) => panic!("runtime fault: {other}"),
    }
}

#[test]
fn fanout_through_the_runtime_matches_the_native_harness_on_every_golden_case() {
    let dir = common::workspace().join("policies/fanout/tests/golden");
    let cases = Golden::load_dir(&dir).expect("golden cases");
    assert!(cases.len() >= 10, "only {} golden cases", cases.len());
    let runtime = common::runtime();
    let fanout = common::load(&runtime, "fanout", PolicyLimits::default());
    for (path, case) in cases {
        let raw: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        let input = input_of(&raw);
        let native = case.run::<fanout::Fanout>().expect("native harness");
        let wasm = match raw["call"].as_str() {
            Some("cleanup") => json_of(runtime.cleanup_blocking(&fanout, &input).result),
            _ => json_of(runtime.reconcile_blocking(&fanout, &input).result),
        };
        assert_eq!(
            wasm,
            native,
            "{}: runtime and native harness differ",
            path.display()
        );
        assert_eq!(
            wasm,
            raw["expected"],
            "{}: differs from expected",
            path.display()
        );
    }
}

#[test]
fn fanout_invalid_params_are_a_policy_error_in_the_documented_shape() {
    let runtime = common::runtime();
    let fanout = common::load(&runtime, "fanout", PolicyLimits::default());
    let input = common::input(common::job("bad", "default", json!({"replicas": "many"})));
    let outcome = runtime.reconcile_blocking(&fanout, &input);
    let value = json_of(outcome.result);
    assert!(value["invalidParams"].is_string(), "{value}");
}
