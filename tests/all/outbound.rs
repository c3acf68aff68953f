//! Outbound HTTP through the real runtime, against the test cloud
//! (`tests/common/cloud.rs`): what a grant lets through, what the host
//! refuses (each refusal seen by the guest and counted), and the deadline
//! over the network.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use policyhost::outbound::{ClientConfig, Grant, Outbound, Refusal};
use policyhost::runtime::{Error, Policy, PolicyLimits, PolicySpec, Runtime, RuntimeConfig};
use serde_json::{Value, json};

use crate::common::cloud::Cloud;
use crate::common::{self, guest_bytes, input, job};

/// A runtime whose client trusts the cloud's CA.
fn runtime(cloud: &Cloud) -> Runtime {
    Runtime::new(RuntimeConfig {
        threads: 2,
        outbound: ClientConfig {
            extra_roots: vec![cloud.ca()],
        },
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

fn grant(pairs: &[(&str, &str)]) -> Grant {
    let data: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    policyhost::grants::network::parse(&data).expect("grant")
}

/// `http-probe` granted `origin`, whose requests there carry `header` with
/// `value`, from the Secret `storage-token/token`.
fn credentialed_probe(runtime: &Runtime, origin: &str, header: &str, value: &str) -> Arc<Policy> {
    let granted = grant(&[
        ("origins", origin),
        (
            "credentials",
            &format!("{origin} {header} storage-token/token"),
        ),
    ]);
    probe(
        runtime,
        granted,
        &[("storage-token", "token", value)],
        5_000,
    )
}

fn probe(
    runtime: &Runtime,
    grant: Grant,
    secrets: &[(&str, &str, &str)],
    timeout_ms: u64,
) -> Arc<Policy> {
    let secrets = secrets
        .iter()
        .map(|(secret, key, value)| {
            (
                ((*secret).to_owned(), (*key).to_owned()),
                value.as_bytes().to_vec(),
            )
        })
        .collect();
    let outbound = Outbound::new(grant, &secrets).expect("credentials");
    let spec = PolicySpec::new("http-probe")
        .limits(PolicyLimits {
            timeout_ms: Some(timeout_ms),
            ..PolicyLimits::default()
        })
        .outbound(Some(Arc::new(outbound)));
    runtime
        .load(spec, &guest_bytes("http-probe"))
        .expect("load http-probe")
}

/// Runs the probe's reconcile over `requests`; its outputs and report.
fn run(
    runtime: &Runtime,
    policy: &Policy,
    requests: Value,
) -> (Value, policyhost::runtime::CallReport) {
    let outcome = runtime.reconcile_blocking(
        policy,
        &input(job("probe", "team-a", json!({ "requests": requests }))),
    );
    let reconciled = outcome.result.unwrap_or_else(|e| panic!("probe call: {e}"));
    (reconciled.status.outputs, outcome.report)
}

#[test]
fn a_component_importing_wasi_http_without_a_grant_is_rejected_naming_the_grant() {
    let runtime = common::runtime();
    let error = runtime
        .load(PolicySpec::new("http-probe"), &guest_bytes("http-probe"))
        .unwrap_err();
    assert!(
        matches!(error, Error::OutboundNotGranted { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains("wasi:http/"), "{message}");
    assert!(message.contains("grant-<policy>"), "{message}");
    assert_eq!(error.reason(), "OutboundNotGranted");
}

#[test]
fn a_granted_policy_creates_reads_and_deletes_through_the_host_and_the_ledger_shows_it() {
    let cloud = Cloud::start();
    let runtime = runtime(&cloud);
    let origin = cloud.origin();
    let policy = probe(&runtime, grant(&[("origins", &origin)]), &[], 5_000);
    let bucket = format!("{origin}/buckets/b1");
    let (outputs, report) = run(
        &runtime,
        &policy,
        json!([
            { "method": "PUT", "url": bucket, "body": "{\"owner\":\"probe\"}" },
            { "method": "GET", "url": bucket },
            { "method": "DELETE", "url": bucket },
            { "method": "GET", "url": bucket },
        ]),
    );
    let statuses: Vec<_> = outputs["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].clone())
        .collect();
    assert_eq!(
        statuses,
        [json!(201), json!(200), json!(204), json!(404)],
        "{outputs}"
    );
    assert_eq!(report.outbound.requests, 4);
    let ledger = cloud.ledger();
    assert_eq!(ledger["b1"].owner, "probe");
    assert!(ledger["b1"].deleted.is_some());
}

/// What shards (and a restarted leader) rely on: a cleanup interrupted
/// and run again, on this replica or another, sends each step with the
/// key it had, so a server that honours the header acts once.
#[test]
fn a_cleanups_requests_carry_an_idempotency_key_the_same_on_every_attempt_and_a_reconciles_none() {
    let cloud = Cloud::start();
    let runtime = runtime(&cloud);
    let origin = cloud.origin();
    let policy = probe(&runtime, grant(&[("origins", &origin)]), &[], 5_000);
    let bucket = format!("{origin}/buckets/k1");
    let params = json!({
        "requests": [{ "method": "PUT", "url": bucket, "body": "{\"owner\":\"probe\"}" }],
        "cleanup": [{ "method": "DELETE", "url": bucket }, { "method": "DELETE", "url": bucket }],
    });
    let a = input(job("a", "team-a", params.clone()));
    let b = input(job("b", "team-a", params));
    runtime
        .reconcile_blocking(&policy, &a)
        .result
        .expect("the reconcile");
    for input in [&a, &a, &b] {
        runtime
            .cleanup_blocking(&policy, input)
            .result
            .expect("the cleanup");
    }
    let sent = cloud.idempotency_keys();
    let keys: Vec<Option<String>> = sent.iter().map(|(_, _, key)| key.clone()).collect();
    assert_eq!(sent.len(), 7, "{sent:?}");
    assert_eq!(
        keys[0], None,
        "a reconcile's request carries none: {sent:?}"
    );
    let key = |i: usize| {
        keys[i]
            .clone()
            .unwrap_or_else(|| panic!("request {i} has a key: {sent:?}"))
    };
    assert!(
        key(1).starts_with('"') && key(1).len() == 34,
        "a structured-field string of 32 hex digits: {}",
        key(1)
    );
    assert_ne!(key(1), key(2), "two steps of one cleanup: {sent:?}");
    assert_eq!(
        (key(3), key(4)),
        (key(1), key(2)),
        "the cleanup again: {sent:?}"
    );
    assert!(
        key(5) != key(1) && key(6) != key(2) && key(5) != key(6),
        "another DataJob's cleanup: {sent:?}"
    );
}

#[test]
fn the_host_refuses_every_reach_outside_the_grant_and_the_guest_sees_each_refusal() {
    let cloud = Cloud::start();
    let runtime = runtime(&cloud);
    let port = cloud.port();
    // Granted by name: `localhost` resolves to a loopback address, which
    // the grant does not name, so the host refuses it after resolving. Two
    // requests per call: the refused `localhost` one and the first to the
    // cloud; the second to the cloud is one too many.
    let by_name = format!("https://localhost:{port}");
    let granted = grant(&[
        ("origins", &format!("{by_name}, {}", cloud.origin())),
        ("requestsPerCall", "2"),
    ]);
    let policy = probe(&runtime, granted, &[], 5_000);
    let ((outputs, report), log) = common::logs::recorded(|| {
        run(
            &runtime,
            &policy,
            json!([
                { "url": format!("{by_name}/buckets/x") },
                { "url": "http://169.254.169.254/latest/meta-data/" },
                { "url": format!("https://127.0.0.2:{port}/") },
                { "url": "https://example.com/" },
                { "url": format!("{}/buckets/y", cloud.origin()) },
                { "url": format!("{}/buckets/z", cloud.origin()) },
            ]),
        )
    });
    let results = outputs["results"].as_array().unwrap();
    let seen: Vec<(&str, bool)> = results
        .iter()
        .map(|r| {
            (
                r["error"].as_str().unwrap_or("answered"),
                r["refused"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("DestinationIpProhibited", true),
            ("HttpRequestDenied", true),
            ("HttpRequestDenied", true),
            ("HttpRequestDenied", true),
            ("answered", false),
            ("HttpRequestDenied", true),
        ],
        "{outputs}"
    );
    assert_eq!(report.outbound.refused(Refusal::Address), 1);
    assert_eq!(report.outbound.refused(Refusal::Origin), 3);
    assert_eq!(report.outbound.refused(Refusal::RequestsPerCall), 1);
    assert_eq!(
        report.outbound.requests, 1,
        "only the granted request reached a socket"
    );
    assert_eq!(cloud.requests(), 1, "the cloud saw one request: {report:?}");
    // Each refusal is a warning naming the policy, the origin and why.
    let refusals: Vec<(String, String)> = log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|record| record["level"] == "WARN" && record["target"] == "policyhost::outbound")
        .map(|record| {
            let fields = &record["fields"];
            assert_eq!(fields["policy"], "http-probe", "{record}");
            (
                fields["origin"].as_str().unwrap_or_default().to_owned(),
                fields["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let cloud_origin = format!("https://127.0.0.1:{port}");
    assert_eq!(
        refusals,
        [
            (format!("https://localhost:{port}"), "address".to_owned()),
            ("http://169.254.169.254:80".to_owned(), "origin".to_owned()),
            (format!("https://127.0.0.2:{port}"), "origin".to_owned()),
            ("https://example.com:443".to_owned(), "origin".to_owned()),
            (cloud_origin, "requests-per-call".to_owned()),
        ],
        "{log}"
    );
}

#[test]
fn a_stalled_server_ends_the_request_at_the_network_deadline_and_the_call_in_time() {
    let cloud = Cloud::start();
    let runtime = runtime(&cloud);
    let origin = cloud.origin();
    // 50 % of a 600 ms call may be spent waiting on the network.
    let policy = probe(
        &runtime,
        grant(&[("origins", &origin), ("networkShare", "50%")]),
        &[],
        600,
    );
    for route in ["stall", "drip"] {
        let (outputs, report) = run(
            &runtime,
            &policy,
            json!([{ "url": format!("{origin}/{route}") }]),
        );
        let error = outputs["results"][0]["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            ["ConnectionTimeout", "ConnectionReadTimeout"].contains(&error.as_str()),
            "{route}: {outputs}"
        );
        let network = Duration::from_millis(300);
        let took = report.duration;
        assert!(
            took >= network,
            "{route}: ended before the network deadline: {took:?}"
        );
        assert!(
            took < network + Duration::from_millis(50),
            "{route}: ended {:?} after the network deadline",
            took - network
        );
    }
}

#[test]
fn a_stalled_server_cannot_hold_a_call_past_its_deadline() {
    let cloud = Cloud::start();
    let runtime = runtime(&cloud);
    let origin = cloud.origin();
    // The whole call may wait on the network: the stall meets the call's
    // own deadline. Either the guest gets the timeout and returns at once,
    // or the wait reaches the deadline and ends the call; it never runs on.
    let policy = probe(
        &runtime,
        grant(&[("origins", &origin), ("networkShare", "100%")]),
        &[],
        400,
    );
    let stall = json!({ "requests": [{ "url": format!("{origin}/stall") }, { "url": format!("{origin}/stall") }] });
    let outcome = runtime.reconcile_blocking(&policy, &input(job("probe", "team-a", stall)));
    match &outcome.result {
        Err(Error::DeadlineExceeded { .. }) => {}
        Ok(reconciled) => {
            let results = &reconciled.status.outputs["results"];
            assert_eq!(results[0]["error"], "ConnectionTimeout", "{results}");
        }
        Err(other) => panic!("expected the deadline, got {other:?}"),
    }
    let over = outcome
        .report
        .duration
        .saturating_sub(Duration::from_millis(400));
    assert!(
        over < Duration::from_millis(50),
        "ended {over:?} after its deadline"
    );
}

#[test]
fn the_guests_own_timeouts_end_each_step_sooner_than_the_network_deadline() {
    let cloud = Cloud::start();
    let runtime = runtime(&cloud);
    let origin = cloud.origin();
    // Takes connections (the kernel's backlog) and never speaks: the TLS
    // handshake, part of connecting, stalls.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent = format!("https://{}", silent.local_addr().expect("address"));
    // 2 s of the 4 s call may wait on the network; each step asks for 150 ms.
    let policy = probe(
        &runtime,
        grant(&[
            ("origins", &format!("{origin} {silent}")),
            ("networkShare", "50%"),
        ]),
        &[],
        4_000,
    );
    let asked = Duration::from_millis(150);
    for (url, step, code) in [
        (format!("{silent}/"), "connect", "ConnectionTimeout"),
        (
            format!("{origin}/stall"),
            "firstByte",
            "ConnectionReadTimeout",
        ),
        (
            format!("{origin}/drip"),
            "betweenBytes",
            "ConnectionReadTimeout",
        ),
    ] {
        let (outputs, report) = run(
            &runtime,
            &policy,
            json!([{ "url": url, "timeoutsMs": { step: 150 } }]),
        );
        assert_eq!(outputs["results"][0]["error"], code, "{step}: {outputs}");
        let took = report.duration;
        assert!(took >= asked, "{step}: ended before its timeout: {took:?}");
        assert!(
            took < asked + Duration::from_millis(300),
            "{step}: ended {took:?} after the call began, not at its 150 ms"
        );
    }
}

#[test]
fn the_injected_credential_reaches_the_server_and_never_the_policy() {
    const SECRET: &str = "Bearer s3cret-never-seen";
    let cloud = Cloud::start();
    cloud.require_token(SECRET);
    let runtime = runtime(&cloud);
    let origin = cloud.origin();
    let policy = credentialed_probe(&runtime, &origin, "authorization", SECRET);
    let ((outputs, _), log) = common::logs::recorded(|| {
        run(
            &runtime,
            &policy,
            json!([{ "url": format!("{origin}/private"), "headers": { "authorization": "Bearer forged" } }]),
        )
    });
    assert_eq!(outputs["results"][0]["status"], 200, "{outputs}");
    assert_eq!(cloud.authorized(), 1);
    let text = outputs.to_string();
    assert!(
        !text.contains("s3cret"),
        "the policy saw the secret: {text}"
    );
    assert!(
        text.contains("Bearer forged"),
        "the probe reports what it set: {text}"
    );
    assert!(
        log.contains("/private"),
        "the probe's log lines are in the host's log"
    );
    assert!(!log.contains("s3cret"), "the secret reached the log: {log}");
}

/// A credential with the characters JSON escapes: a copy inside a JSON
/// string is escaped, and found decoded.
const REFLECTED: &str = r#"Bearer s3cret-"reflected"\token"#;

#[test]
fn a_credential_a_server_reflects_is_redacted_from_all_the_policy_publishes() {
    let cloud = Cloud::start();
    let runtime = runtime(&cloud);
    let origin = cloud.origin();
    let policy = credentialed_probe(&runtime, &origin, "authorization", REFLECTED);
    let params = json!({ "requests": [{ "url": format!("{origin}/echo") }], "publish": true });
    let ((reconciled, cleaned), log) = common::logs::recorded(|| {
        let input = input(job("echo", "team-a", params));
        (
            runtime.reconcile_blocking(&policy, &input).result,
            runtime.cleanup_blocking(&policy, &input).result,
        )
    });
    let reconciled = reconciled.unwrap_or_else(|e| panic!("probe call: {e}"));
    // The server did send it back, as a header and in the body.
    let results = &reconciled.status.outputs["results"];
    assert_eq!(results[0]["status"], 200, "{results}");
    let published = serde_json::to_string(&reconciled).expect("the result as JSON");
    assert!(!published.contains("s3cret"), "{published}");
    let status = &reconciled.status;
    assert_eq!(
        status.message,
        "the server said: authorization: [redacted]\n"
    );
    assert!(
        status.conditions[0].message.contains("back: [redacted]"),
        "{status:?}"
    );
    assert!(
        results[0]["body"]
            .as_str()
            .is_some_and(|body| body.contains("[redacted]")),
        "{results}"
    );
    assert!(
        reconciled.events[0].message.contains("back: [redacted]"),
        "{:?}",
        reconciled.events
    );
    let manifest = reconciled.children[0]
        .manifest_in("team-a")
        .expect("a manifest");
    assert_eq!(manifest["data"]["body"], "authorization: [redacted]\n");
    let error = cleaned.expect_err("the first cleanup fails quoting the server");
    assert_eq!(error.reason(), "PolicyFailed");
    let error = error.to_string();
    assert!(!error.contains("s3cret"), "{error}");
    assert!(error.contains("back: [redacted]"), "{error}");
    // log(), stdout and stderr, at every level the host records.
    assert!(!log.contains("s3cret"), "{log}");
    for target in ["guest", "guest::stdout", "guest::stderr"] {
        let redacted = log
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .any(|record| {
                record["target"] == format!("policyhost::{target}")
                    && record["fields"]["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("[redacted]"))
            });
        assert!(redacted, "no redacted record of {target}: {log}");
    }
}

#[test]
fn a_credential_in_the_name_of_a_refused_origin_is_redacted_from_the_hosts_log() {
    const TOKEN: &str = "s3cret-token";
    let cloud = Cloud::start();
    let runtime = runtime(&cloud);
    let origin = cloud.origin();
    let policy = credentialed_probe(&runtime, &origin, "x-token", TOKEN);
    let ((outputs, report), log) = common::logs::recorded(|| {
        run(
            &runtime,
            &policy,
            json!([{ "url": format!("https://{TOKEN}.example.com/") }]),
        )
    });
    assert_eq!(report.outbound.refused(Refusal::Origin), 1, "{outputs}");
    assert!(!log.contains("s3cret"), "{log}");
    assert!(
        log.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .any(|record| record["target"] == "policyhost::outbound"
                && record["fields"]["origin"] == "https://[redacted].example.com:443"),
        "{log}"
    );
}

#[test]
fn tls_is_verified_redirects_are_not_followed_and_bodies_are_capped() {
    let cloud = Cloud::start();
    let origin = cloud.origin();
    // A runtime that does not trust the cloud's CA.
    let untrusting = common::runtime();
    let policy = probe(&untrusting, grant(&[("origins", &origin)]), &[], 5_000);
    let (outputs, _) = run(
        &untrusting,
        &policy,
        json!([{ "url": format!("{origin}/buckets/t") }]),
    );
    assert_eq!(
        outputs["results"][0]["error"], "TlsCertificateError",
        "{outputs}"
    );
    assert!(cloud.ledger().is_empty());

    let runtime = runtime(&cloud);
    let policy = probe(
        &runtime,
        grant(&[("origins", &origin), ("responseBodyBytes", "1Ki")]),
        &[],
        5_000,
    );
    let (outputs, _) = run(
        &runtime,
        &policy,
        json!([
            { "url": format!("{origin}/redirect") },
            { "url": format!("{origin}/big?bytes=1024") },
            { "url": format!("{origin}/big?bytes=1025") },
        ]),
    );
    let results = &outputs["results"];
    assert_eq!(results[0]["status"], 302, "{outputs}");
    assert_eq!(results[1]["body"].as_str().map(str::len), Some(1024));
    assert_eq!(results[2]["error"], "HttpResponseBodySize", "{outputs}");
}

#[test]
fn a_request_body_over_the_grants_cap_ends_with_http_request_body_size() {
    let cloud = Cloud::start();
    let origin = cloud.origin();
    let runtime = runtime(&cloud);
    let policy = probe(
        &runtime,
        grant(&[("origins", &origin), ("requestBodyBytes", "1Ki")]),
        &[],
        5_000,
    );
    // The same JSON document, padded with spaces to `len` bytes.
    let body = |len: usize| format!("{:<len$}", "{\"owner\":\"probe\"}");
    let (outputs, _) = run(
        &runtime,
        &policy,
        json!([
            { "method": "PUT", "url": format!("{origin}/buckets/within"), "body": body(1024) },
            { "method": "PUT", "url": format!("{origin}/buckets/over"), "body": body(1025) },
        ]),
    );
    let results = &outputs["results"];
    assert_eq!(results[0]["status"], 201, "{outputs}");
    assert_eq!(results[1]["error"], "HttpRequestBodySize", "{outputs}");
    let ledger = cloud.ledger();
    assert_eq!(ledger["within"].owner, "probe");
    assert!(
        !ledger.contains_key("over"),
        "the server never took the body over the cap"
    );
}

mod operator {
    //! The grant through the operator: a policy ConfigMap, the platform
    //! team's grant ConfigMap, and a DataJob whose external resource lives
    //! and dies with it.

    use std::collections::BTreeMap;
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret};
    use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};
    use policyhost::crd::DataJob;
    use policyhost::policies::Role;
    use policyhost::policies::configmap::{self, Compression};
    use policyhost::policies::tenancy::Tenancy;
    use policyhost::publisher::publish;
    use policyhost::vocabulary::{ERROR_ANNOTATION, GRANT_LABEL};
    use serde_json::json;

    use super::REFLECTED;
    use crate::common::chaos;
    use crate::common::cloud::Cloud;
    use crate::common::cluster::{Env, OperatorSetup, condition, eventually};
    use crate::common::process::Replica;
    use crate::common::replicas::alone_args;
    use crate::common::{self, for_every_namespace, guest_bytes};

    async fn grant(env: &Env, origins: &str) {
        grant_with(env, origins, None).await;
    }

    /// Applies the platform team's grant of `bucket`, with `credentials` lines.
    async fn grant_with(env: &Env, origins: &str, credentials: Option<&str>) {
        grant_policy(env, "bucket", origins, credentials).await;
    }

    /// Applies the platform team's grant of `policy`, with `credentials` lines.
    async fn grant_policy(env: &Env, policy: &str, origins: &str, credentials: Option<&str>) {
        let mut data = BTreeMap::from([("origins".to_owned(), origins.to_owned())]);
        if let Some(credentials) = credentials {
            data.insert("credentials".to_owned(), credentials.to_owned());
        }
        crate::common::publishing::apply_grant(env, policy, data).await;
    }

    /// Pushes the `bucket` policy to the test's policy namespace.
    async fn push_bucket(env: &Env) -> ConfigMap {
        push(env, "bucket").await
    }

    /// Pushes the guest `policy` to the test's policy namespace.
    async fn push(env: &Env, policy: &str) -> ConfigMap {
        let map = configmap::build(
            policy,
            &env.policy_namespace,
            &guest_bytes(policy),
            &for_every_namespace(),
            Compression::Auto,
        )
        .expect("the policy ConfigMap");
        publish::apply(&env.client, &map)
            .await
            .expect("push the policy");
        map
    }

    /// Creates the Secret `name` with `key: value` in the policy namespace.
    async fn create_secret(env: &Env, name: &str, key: &str, value: &str) {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            string_data: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
            ..Default::default()
        };
        Api::<Secret>::namespaced(env.client.clone(), &env.policy_namespace)
            .create(&kube::api::PostParams::default(), &secret)
            .await
            .expect("create the Secret");
    }

    /// Waits until a version of `bucket` with its grant is in service.
    async fn served_with_grant(env: &Env) {
        let registry = Arc::clone(&env.operator().shared.registry);
        eventually("bucket in service with its grant", || {
            let registry = Arc::clone(&registry);
            async move {
                registry
                    .get("bucket")
                    .ok()
                    .filter(|p| p.outbound().is_some())
            }
        })
        .await;
    }

    /// The policy ConfigMap's `error` annotation, once it starts with `prefix`.
    async fn rejected_with(env: &Env, prefix: &str) -> String {
        let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
        eventually(&format!("policy-bucket rejected with {prefix}"), || {
            let api = api.clone();
            async move {
                let map = api.get("policy-bucket").await.ok()?;
                let error = map.metadata.annotations?.get(ERROR_ANNOTATION)?.clone();
                error.starts_with(prefix).then_some(error)
            }
        })
        .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_policy_serves_with_its_grant_and_a_datajob_goes_only_after_its_bucket() {
        let cloud = Cloud::start();
        let env = Env::start_with(OperatorSetup {
            outbound_roots: vec![cloud.ca()],
            ..OperatorSetup::configmaps()
        })
        .await;
        push_bucket(&env).await;
        let error = rejected_with(&env, "OutboundNotGranted").await;
        assert!(error.contains("grant-<policy>"), "{error}");

        grant(&env, &cloud.origin()).await;
        served_with_grant(&env).await;

        env.create_job("etl", "bucket", json!({ "service": cloud.origin() }))
            .await;
        env.wait_job("etl", "BucketReady", |job| {
            condition(job, "BucketReady").is_some_and(|c| c.status == "True")
        })
        .await;
        let bucket = format!("{}-etl", env.namespace);
        assert!(cloud.ledger()[&bucket].deleted.is_none());

        // A malformed grant is refused; the version in service keeps serving.
        grant(&env, "https://storage.example.com/with/a/path").await;
        let error = rejected_with(&env, "InvalidGrant").await;
        assert!(error.contains("an origin has no path"), "{error}");
        assert!(
            env.operator().shared.registry.get("bucket").is_ok(),
            "the last good version still serves"
        );
        grant(&env, &cloud.origin()).await;

        env.delete_job_and_wait("etl").await;
        let deleted = cloud.ledger()[&bucket].deleted;
        assert!(deleted.is_some(), "the DataJob went before its bucket");
        assert_eq!(cloud.live(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_teams_own_configmap_labelled_as_a_grant_grants_nothing_even_on_a_single_team_host() {
        let cloud = Cloud::start();
        let env = Env::start_with(OperatorSetup {
            outbound_roots: vec![cloud.ca()],
            policy_tenancy: Tenancy::SingleTeam,
            ..OperatorSetup::configmaps()
        })
        .await;
        push_bucket(&env).await;
        rejected_with(&env, "OutboundNotGranted").await;

        // The team may write its own ConfigMap: it labels it as the grant
        // of its policy.
        let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
        api.patch(
            "policy-bucket",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { GRANT_LABEL: "bucket" } } })),
        )
        .await
        .expect("label the team's ConfigMap as a grant");
        let note = env
            .warning(&env.policy_namespace, "policy-bucket", "GrantIgnored")
            .await;
        assert!(
            note.contains("which only the ConfigMap `grant-bucket` may grant: it grants nothing"),
            "{note}"
        );
        assert!(
            env.operator().shared.registry.get("bucket").is_err(),
            "never served"
        );
        let metrics = env.operator().metrics.render();
        assert!(
            metrics.contains(
                "policyhost_policy_load_errors_total{policy=\"bucket\",reason=\"GrantIgnored\"}"
            ),
            "{metrics}"
        );

        // The platform team's grant is the one that counts.
        grant(&env, &cloud.origin()).await;
        served_with_grant(&env).await;
    }

    /// The issue's scenario: 200 DataJobs each create their bucket; all are
    /// deleted while the service fails 30 % of requests and stalls 5 %, and
    /// the operator (its own process) is SIGKILLed and restarted three
    /// times. At the end no bucket lives, and none was deleted after its
    /// DataJob was released.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn through_faults_and_kills_every_bucket_goes_and_none_outlives_its_datajob() {
        const JOBS: usize = 200;
        let cloud = Cloud::start();
        let env = Env::cluster_only().await;
        let kubeconfig = env.kubeconfig_file();
        let ca = cloud.ca_file(&common::scratch());
        push_bucket(&env).await;
        grant(&env, &cloud.origin()).await;
        let ca = ca.to_string_lossy().into_owned();
        let more = [
            "--outbound-ca",
            ca.as_str(),
            "--workers",
            "8",
            "--min-cleanup-retry",
            "200ms",
        ];
        let args = alone_args(&env, &more);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let start = |run: usize| {
            Replica::start(
                &format!("{}-bucket-{run}", env.namespace),
                &kubeconfig,
                &args,
            )
        };
        let mut operator = start(1);
        let names: Vec<String> = (0..JOBS).map(|i| format!("b{i:03}")).collect();
        chaos::create_buckets(&env, &cloud, &names).await;
        let history = chaos::delete_through_faults(&env, &cloud, &names, 3, async |round| {
            operator.signal("KILL");
            operator.wait();
            operator = start(round + 2);
        })
        .await;
        drop(operator);
        chaos::assert_buckets_went_first(&env, &cloud, &history, &names);
    }

    /// A storage service that never answers one DataJob's bucket: that
    /// DataJob gets `Ready=False` naming the timeout and is retried, while
    /// the DataJobs created after it reconcile.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_service_fails_its_datajob_naming_the_timeout_and_others_reconcile() {
        let cloud = Cloud::start();
        cloud.stall_bucket("stalled");
        let env = Env::start_with(OperatorSetup {
            outbound_roots: vec![cloud.ca()],
            ..OperatorSetup::configmaps()
        })
        .await;
        push_bucket(&env).await;
        grant(&env, &cloud.origin()).await;
        served_with_grant(&env).await;

        let origin = cloud.origin();
        env.create_job(
            "stuck",
            "bucket",
            json!({ "service": origin, "bucket": "stalled" }),
        )
        .await;
        let stuck = env
            .wait_job("stuck", "Ready=False naming the timeout", |job| {
                condition(job, "Ready")
                    .is_some_and(|c| c.status == "False" && c.message.contains("ConnectionTimeout"))
            })
            .await;
        let ready = condition(&stuck, "Ready").expect("Ready");
        assert_eq!(ready.reason, "PolicyFailed", "{ready:?}");
        assert!(
            ready.message.contains("/buckets/stalled"),
            "the condition names the request: {}",
            ready.message
        );

        let others: Vec<String> = (0..3).map(|i| format!("other-{i}")).collect();
        for name in &others {
            env.create_job(name, "bucket", json!({ "service": origin }))
                .await;
        }
        for name in &others {
            env.wait_job(name, "BucketReady", |job| {
                condition(job, "BucketReady").is_some_and(|c| c.status == "True")
            })
            .await;
        }
        eventually("the stalled DataJob retried", || async {
            (cloud.held("stalled") >= 2).then_some(())
        })
        .await;
        let stuck = env.jobs().get("stuck").await.expect("get stuck");
        assert!(
            condition(&stuck, "BucketReady").is_none(),
            "the stalled bucket was never reported ready"
        );
        assert_eq!(cloud.live(), others.len());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_operator_injects_a_grants_secret_refuses_a_missing_one_and_follows_its_rotation() {
        const TOKEN: &str = "Bearer storage-s3cret";
        let cloud = Cloud::start();
        cloud.require_token_on_buckets(TOKEN);
        let env = Env::start_with(OperatorSetup {
            outbound_roots: vec![cloud.ca()],
            ..OperatorSetup::configmaps()
        })
        .await;
        let origin = cloud.origin();
        let credentials = format!("{origin} authorization storage-token/token");
        // The Secret does not exist yet: the version is refused, naming it.
        grant_with(&env, &origin, Some(&credentials)).await;
        push_bucket(&env).await;
        let error = rejected_with(&env, "GrantCredential").await;
        assert!(error.contains("storage-token"), "{error}");

        let secret = k8s_openapi::api::core::v1::Secret {
            metadata: ObjectMeta {
                name: Some("storage-token".into()),
                ..ObjectMeta::default()
            },
            string_data: Some(BTreeMap::from([("token".to_owned(), TOKEN.to_owned())])),
            ..Default::default()
        };
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
            env.client.clone(),
            &env.policy_namespace,
        )
        .create(&kube::api::PostParams::default(), &secret)
        .await
        .expect("create the Secret");
        // A change of the grant loads the policy again, now with the Secret.
        grant_with(&env, &origin, Some(&format!("{credentials}\n# rotated"))).await;
        served_with_grant(&env).await;
        env.create_job("secret", "bucket", json!({ "service": origin }))
            .await;
        env.wait_job("secret", "BucketReady", |job| {
            condition(job, "BucketReady").is_some_and(|c| c.status == "True")
        })
        .await;
        assert_eq!(
            cloud.live(),
            1,
            "the cloud took the request with the host's credential"
        );

        // The platform team rotates the token; the grant stays as it is.
        const ROTATED: &str = "Bearer storage-r0tated";
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
            env.client.clone(),
            &env.policy_namespace,
        )
        .patch(
            "storage-token",
            &PatchParams::default(),
            &Patch::Merge(json!({ "stringData": { "token": ROTATED } })),
        )
        .await
        .expect("rotate the Secret");
        cloud.require_token_on_buckets(ROTATED);
        env.create_job("rotated", "bucket", json!({ "service": origin }))
            .await;
        env.wait_job("rotated", "BucketReady with the rotated token", |job| {
            condition(job, "BucketReady").is_some_and(|c| c.status == "True")
        })
        .await;
        assert_eq!(cloud.live(), 2, "the rotated token reached the cloud");

        // A Secret that goes refuses the next load; the version in service
        // keeps its credential.
        let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
        eventually("the earlier refusal cleared", || {
            let maps = maps.clone();
            async move {
                let map = maps.get("policy-bucket").await.ok()?;
                let annotations = map.metadata.annotations.unwrap_or_default();
                (!annotations.contains_key(ERROR_ANNOTATION)).then_some(())
            }
        })
        .await;
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
            env.client.clone(),
            &env.policy_namespace,
        )
        .delete("storage-token", &DeleteParams::default())
        .await
        .expect("delete the Secret");
        let error = rejected_with(&env, "GrantCredential").await;
        assert!(error.contains("storage-token"), "{error}");
        env.create_job("after", "bucket", json!({ "service": origin }))
            .await;
        env.wait_job(
            "after",
            "BucketReady with the credential in service",
            |job| condition(job, "BucketReady").is_some_and(|c| c.status == "True"),
        )
        .await;
    }

    /// A granted policy whose server sends the injected credential back
    /// publishes it everywhere it can, through the operator's own process:
    /// the DataJob's status, its Events, its child, its cleanup error, the
    /// operator's log (every `policyhost` record, trace included) and its
    /// traces in Jaeger (every attribute and event) show the marker and
    /// never the value; each request the server got carried the
    /// `traceparent` of its span.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reflected_credential_leaves_the_operator_only_redacted() {
        let cloud = Cloud::start();
        let env = Env::cluster_only().await;
        let collector = common::jaeger::start(&env.namespace);
        let endpoint = collector.otlp_endpoint();
        let kubeconfig = env.kubeconfig_file();
        let ca = cloud.ca_file(&common::scratch());
        let origin = cloud.origin();
        create_secret(&env, "echo-token", "token", REFLECTED).await;
        let credentials = format!("{origin} authorization echo-token/token");
        grant_policy(&env, "http-probe", &origin, Some(&credentials)).await;
        push(&env, "http-probe").await;
        let ca = ca.to_string_lossy().into_owned();
        let name = format!("{}-echo", env.namespace);
        let more = [
            "--outbound-ca",
            ca.as_str(),
            "--otlp-endpoint",
            endpoint.as_str(),
        ];
        let args = alone_args(&env, &more);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let operator = Replica::start_with_env(
            &name,
            &kubeconfig,
            &args,
            &[
                ("POD_NAME".into(), name.clone()),
                ("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()),
                ("POLICYHOST_LOG".into(), "info,policyhost=trace".into()),
                ("POLICYHOST_LOG_FORMAT".into(), "json".into()),
            ],
        );
        // A `traceparent` of the policy's own is replaced by its span's.
        let forged = "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01";
        let request =
            json!({ "url": format!("{origin}/echo"), "headers": { "traceparent": forged } });
        let params = json!({ "requests": [request], "publish": true });
        env.create_job("echo", "http-probe", params).await;
        let running = env
            .wait_job("echo", "Echoed", |job| condition(job, "Echoed").is_some())
            .await;
        let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
        let child = eventually("the echo ConfigMap", || {
            let maps = maps.clone();
            async move { maps.get_opt("echo-echo").await.ok().flatten() }
        })
        .await;
        let events: Api<Event> = Api::namespaced(env.client.clone(), &env.namespace);
        let reflected = eventually("the policy's Event", || {
            let events = events.clone();
            async move {
                let list = events.list(&ListParams::default()).await.ok()?;
                list.items
                    .into_iter()
                    .find(|e| e.reason.as_deref() == Some("Reflected"))
            }
        })
        .await;

        env.jobs()
            .delete("echo", &DeleteParams::default())
            .await
            .expect("delete the DataJob");
        let jobs = env.jobs();
        let failed = eventually("the first cleanup's error recorded", || {
            let jobs = jobs.clone();
            async move {
                let job = jobs.get_opt("echo").await.ok()??;
                let cleanup = job.status.as_ref()?.cleanup.as_ref()?;
                cleanup.last_error.is_some().then_some(job)
            }
        })
        .await;
        eventually("echo to be released", || {
            let jobs = jobs.clone();
            async move { matches!(jobs.get_opt("echo").await, Ok(None)).then_some(()) }
        })
        .await;
        let events = events
            .list(&ListParams::default())
            .await
            .expect("list Events")
            .items;
        let job = format!("{}/echo", env.namespace);
        let spans = eventually(
            "the outbound requests' and the release's spans in Jaeger",
            || {
                let spans = common::jaeger::spans(&collector, &job);
                let cleaned = spans.iter().any(|s| s.name == "outbound GET")
                    && spans.iter().any(|s| s.name == "release");
                async move { cleaned.then_some(spans) }
            },
        )
        .await;
        let traced = common::jaeger::raw(&collector, &job);
        let log = operator.logs();
        drop(operator);

        fn text(value: &impl serde::Serialize) -> String {
            serde_json::to_string(value).expect("an object as JSON")
        }
        let published = [
            ("status", text(&running)),
            ("child", text(&child)),
            ("event", text(&reflected)),
            ("cleanup", text(&failed)),
            ("events", text(&events)),
        ];
        for (what, text) in &published {
            assert!(!text.contains("s3cret"), "{what}: {text}");
            assert!(text.contains("[redacted]"), "{what}: {text}");
        }
        let status = running.status.as_ref().expect("a status");
        assert_eq!(
            status.message.as_deref(),
            Some("the server said: authorization: [redacted]\n")
        );
        let cleanup = failed
            .status
            .as_ref()
            .and_then(|s| s.cleanup.as_ref())
            .and_then(|c| c.last_error.clone())
            .unwrap_or_default();
        assert!(cleanup.contains("back: [redacted]"), "{cleanup}");
        // The decision record names each request by method, origin and path
        // and holds neither the header the host injected nor the answer.
        let outbound = |job: &DataJob, call: &str| -> Vec<String> {
            let decisions = job.status.as_ref().map(|s| s.decisions.clone());
            let decisions = decisions.unwrap_or_default();
            let called = decisions.iter().filter(|d| d.call == call);
            called.flat_map(|d| d.outbound.clone()).collect()
        };
        let echo = format!("GET {origin}/echo 200");
        assert!(
            outbound(&running, "reconcile").contains(&echo),
            "{running:?}"
        );
        let cleaned = outbound(&failed, "cleanup");
        assert!(!cleaned.is_empty(), "the cleanup's requests: {failed:?}");
        for (what, text) in [("reconcile", text(&running)), ("cleanup", text(&failed))] {
            let decisions = &text[text.find("\"decisions\"").expect("decisions")..];
            assert!(!decisions.contains("authorization"), "{what}: {decisions}");
            assert!(
                !decisions.contains("redacted"),
                "{what}: no answer is kept: {decisions}"
            );
        }
        assert!(
            events
                .iter()
                .any(|e| e.reason.as_deref() == Some("CleanupFailed")
                    && e.message
                        .as_deref()
                        .is_some_and(|n| n.contains("[redacted]"))),
            "{events:?}"
        );
        assert!(!log.contains("s3cret"), "the operator's log: {log}");
        assert!(!traced.contains("s3cret"), "the traces: {traced}");
        assert!(
            spans.iter().any(|s| s.name == "guest reconcile"
                && s.events
                    .iter()
                    .any(|e| e.get("event").is_some_and(|m| m.contains("[redacted]")))),
            "the policy's log line, redacted, as an event: {traced}"
        );
        // Each request that reached the server carried its span's context.
        let requests: Vec<&common::jaeger::Span> =
            spans.iter().filter(|s| s.name == "outbound GET").collect();
        let sent = cloud.traceparents();
        assert!(
            sent.iter()
                .all(|(_, header)| header.as_deref() != Some(forged)),
            "the policy's own traceparent reached the server: {sent:?}"
        );
        for request in &requests {
            // Origin, method and status: never the path (nor a header).
            assert!(
                request.tags.values().all(|v| !v.contains("/echo")),
                "{request:?}"
            );
            assert_eq!(request.tag("origin"), Some(origin.as_str()), "{request:?}");
            assert_eq!(request.tag("method"), Some("GET"), "{request:?}");
            let parent = format!("00-{}-{}-01", request.trace, request.id);
            assert!(
                sent.iter()
                    .any(|(_, header)| header.as_deref() == Some(parent.as_str())),
                "{parent} not among {sent:?}"
            );
        }
        assert!(
            requests.iter().any(|s| s.tag("status") == Some("200")),
            "{requests:?}"
        );
        let records: Vec<serde_json::Value> = log
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        for target in ["guest", "guest::stdout", "guest::stderr"] {
            assert!(
                records.iter().any(|record| {
                    record["target"] == format!("policyhost::{target}")
                        && record["fields"]["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("[redacted]"))
                }),
                "no redacted record of {target}: {log}"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_candidates_outbound_requests_never_leave_the_host_and_the_serving_calls_answers_are_replayed()
     {
        let cloud = Cloud::start();
        let env = Env::start_with(OperatorSetup {
            outbound_roots: vec![cloud.ca()],
            ..OperatorSetup::configmaps()
        })
        .await;
        grant(&env, &cloud.origin()).await;
        push_bucket(&env).await;
        served_with_grant(&env).await;
        let candidate = common::variants::version(&guest_bytes("bucket"), "next");
        push_candidate_of(&env, "bucket", &candidate).await;

        env.create_job("etl", "bucket", json!({ "service": cloud.origin() }))
            .await;
        env.wait_job("etl", "BucketReady", |job| {
            condition(job, "BucketReady").is_some_and(|c| c.status == "True")
        })
        .await;
        let shared = Arc::clone(&env.operator().shared);
        let summary = eventually("the candidate compared", || {
            let shared = Arc::clone(&shared);
            async move {
                let summary = shared.shadow.summary("bucket")?;
                (summary.same > 0).then_some(summary)
            }
        })
        .await;
        env.wait_idle().await;
        // The cloud saw the serving version's requests and nothing else.
        let sent = env
            .operator()
            .metrics
            .outbound_requests_total
            .get_or_create(&policyhost::metrics::PolicyLabel {
                policy: "bucket".into(),
            })
            .get();
        assert!(sent > 0);
        assert_eq!(cloud.requests(), sent, "{summary:?}");
        assert_eq!(cloud.live(), 1, "one bucket, the serving version's");
        // The same requests got the serving call's answers: the same
        // answer, nothing refused, no fault.
        let summary = shared.shadow.summary("bucket").expect("a summary");
        assert_eq!(
            (summary.differs, summary.faults, summary.outbound_refused),
            (0, 0, 0),
            "{summary:?}"
        );
    }

    /// The issue's shadow cleanup: the candidate's `cleanup` asks to delete
    /// another path than the serving version's. The request the two share
    /// is answered from the serving call's record; the other is refused and
    /// never sent; `policy diff` shows both lists side by side.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_candidates_cleanup_shows_what_it_would_delete_outside_and_sends_nothing() {
        let cloud = Cloud::start();
        let env = Env::start_with(OperatorSetup {
            outbound_roots: vec![cloud.ca()],
            ..OperatorSetup::configmaps()
        })
        .await;
        let origin = cloud.origin();
        grant_policy(&env, "http-probe", &origin, None).await;
        let serving = guest_bytes("http-probe");
        push(&env, "http-probe").await;
        let shared = Arc::clone(&env.operator().shared);
        eventually("http-probe in service with its grant", || {
            let shared = Arc::clone(&shared);
            async move {
                shared
                    .registry
                    .get("http-probe")
                    .ok()
                    .filter(|p| p.outbound().is_some())
            }
        })
        .await;
        let candidate = common::variants::version(&serving, "next");
        push_candidate_of(&env, "http-probe", &candidate).await;
        let digest =
            |policy: &Arc<policyhost::runtime::Policy>| policy.digest().to_hex()[..12].to_owned();
        let h1 = digest(&shared.registry.get("http-probe").expect("serving"));
        let h2 = digest(
            &shared
                .registry
                .version("http-probe", Role::Candidate)
                .expect("the candidate")
                .policy,
        );
        env.create_job(
            "probe",
            "http-probe",
            json!({ "cleanup": [
                { "method": "GET", "url": format!("{origin}/buckets/shared") },
                { "method": "DELETE", "url": format!("{origin}/buckets/{{digest}}") },
            ] }),
        )
        .await;
        env.wait_job("probe", "reconciled", |job| {
            condition(job, "Ready").is_some_and(|c| c.status == "True")
        })
        .await;
        env.delete_job_and_wait("probe").await;
        let summary = eventually("the candidate's cleanup compared", || {
            let shared = Arc::clone(&shared);
            async move {
                let summary = shared.shadow.summary("http-probe")?;
                summary
                    .jobs
                    .iter()
                    .any(|job| job.call == "cleanup")
                    .then_some(summary)
            }
        })
        .await;
        let cleanup = summary
            .jobs
            .iter()
            .find(|job| job.call == "cleanup")
            .expect("the cleanup's difference");
        let expected = format!(
            "/outbound/1: expected \"DELETE {origin}/buckets/{h1}\", got \"DELETE {origin}/buckets/{h2}\""
        );
        assert!(
            cleanup.differences.contains(&expected),
            "{expected} in {cleanup:?}"
        );
        assert!(
            !cleanup
                .differences
                .iter()
                .any(|d| d.starts_with("/outbound/0")),
            "the shared request is the same: {cleanup:?}"
        );
        assert_eq!(summary.outbound_refused, 1, "{summary:?}");
        // The cloud saw the serving cleanup's two requests only.
        env.wait_idle().await;
        assert_eq!(cloud.requests(), 2);
        // `policy diff` reads the summary the host writes on the candidate.
        let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
        eventually("the cleanup's difference on candidate-http-probe", || {
            let maps = maps.clone();
            async move {
                let map = maps.get_opt("candidate-http-probe").await.ok()??;
                let written = policyhost::shadow::Summary::read(map.metadata.annotations.as_ref())?;
                written
                    .jobs
                    .iter()
                    .any(|job| job.call == "cleanup")
                    .then_some(())
            }
        })
        .await;
        let shown = crate::common::publishing::policy_command(&env, &["diff", "http-probe"]);
        let shown = crate::common::process::text(&shown);
        assert!(
            shown.contains(&format!("DELETE {origin}/buckets/{h2}")),
            "{shown}"
        );
    }

    /// Publishes `component` as the candidate of `policy` and waits until
    /// it is in service with the policy's grant.
    async fn push_candidate_of(env: &Env, policy: &str, component: &[u8]) {
        let map = configmap::into_candidate(
            configmap::build(
                policy,
                &env.policy_namespace,
                component,
                &for_every_namespace(),
                Compression::Auto,
            )
            .expect("the candidate's ConfigMap"),
            policy,
        );
        publish::apply(&env.client, &map)
            .await
            .expect("push the candidate");
        let shared = Arc::clone(&env.operator().shared);
        eventually("the candidate in service with the policy's grant", || {
            let shared = Arc::clone(&shared);
            async move {
                let candidate = shared.registry.version(policy, Role::Candidate)?;
                candidate.policy.outbound().is_some().then_some(())
            }
        })
        .await;
    }
}
