//! Going back and staying back, end to end on both servers: every version
//! a policy serves is kept as a revision, `policy history` lists them,
//! `policy rollback` serves one again from its revision (no push of its
//! bytes, no compile), `policy pin` keeps a namespace or one DataJob on
//! one whatever serves the others; a digest the policy never served is
//! refused by the CLI and by the host alike, what is in force staying.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, Patch, PatchParams};
use policyhost::metrics::PolicyResult;
use policyhost::policies::configmap;
use policyhost::policies::revisions;
use policyhost::runtime::Digest;
use policyhost::vocabulary::{REVISION_DIGEST_ANNOTATION, REVISION_OF_LABEL};
use serde_json::json;

use crate::common::cluster::{Env, OperatorSetup, eventually, phase};
use crate::common::for_every_namespace;
use crate::common::guest_bytes;
use crate::common::process::text;
use crate::common::publishing::{policy_command, policy_map, push, push_map, wait_event};
use crate::common::variants::version;

/// Waits until DataJob `name` says `digest` reconciled it last.
async fn reconciled_by(env: &Env, name: &str, digest: &str) {
    eventually(&format!("{name} reconciled by sha256:{digest}"), || async {
        let job = env.jobs().get(name).await.ok()?;
        let by = job.status.and_then(|status| status.policy)?.digest;
        (by == digest).then_some(())
    })
    .await;
}

/// The digests of the revisions kept of `policy`.
async fn revisions_of(env: &Env, policy: &str) -> BTreeSet<String> {
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    api.list(&ListParams::default().labels(&format!("{REVISION_OF_LABEL}={policy}")))
        .await
        .expect("list the revisions")
        .items
        .into_iter()
        .map(|map| map.name_any())
        .collect()
}

fn revision_names(policy: &str, digests: &[&Digest]) -> BTreeSet<String> {
    digests
        .iter()
        .map(|digest| revisions::name(policy, digest))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_serves_an_earlier_version_from_its_revision_and_the_history_keeps_the_last_n() {
    let env = Env::start_with(OperatorSetup {
        policy_history: 2,
        ..OperatorSetup::configmaps()
    })
    .await;
    let first = guest_bytes("fanout");
    let second = version(&first, "second");
    let third = version(&first, "third");
    let [d1, d2, d3] = [&first, &second, &third].map(|bytes| Digest::of(bytes));
    let [h1, h2, h3] = [d1, d2, d3].map(|digest| digest.to_hex());

    assert_eq!(
        push(&env, "fanout", &first).await.loaded_digest,
        Some(h1.clone())
    );
    env.create_job(
        "a",
        "fanout",
        json!({"replicas": 1, "image": "busybox:1.36", "command": ["true"]}),
    )
    .await;
    env.wait_job("a", "Succeeded", |job| phase(job) == Some("Succeeded"))
        .await;
    reconciled_by(&env, "a", &h1).await;
    assert_eq!(
        push(&env, "fanout", &second).await.loaded_digest,
        Some(h2.clone())
    );
    reconciled_by(&env, "a", &h2).await;

    let history = policy_command(&env, &["history", "fanout"]);
    assert!(history.status.success(), "{}", text(&history));
    let lines = text(&history);
    let line_of = |digest: &str| {
        lines
            .lines()
            .find(|line| line.contains(digest))
            .unwrap_or_else(|| panic!("sha256:{digest} listed: {lines}"))
            .to_owned()
    };
    assert!(line_of(&h2).starts_with('*'), "in service: {lines}");
    assert!(line_of(&h1).starts_with(' '), "{lines}");
    assert!(
        line_of(&h1).contains("policyhost-push"),
        "who pushed it: {lines}"
    );

    // The version before: served again from its revision, compiled before.
    let rolled = policy_command(&env, &["rollback", "fanout", "--wait"]);
    assert!(rolled.status.success(), "{}", text(&rolled));
    assert!(
        text(&rolled).contains(&format!("serving sha256:{h1}")),
        "{}",
        text(&rolled)
    );
    let note = wait_event(
        &env,
        "policy-fanout",
        "PolicyLoaded",
        "served again from its revision",
    )
    .await
    .message
    .unwrap_or_default();
    assert!(note.contains(&format!("sha256:{h1} in service")), "{note}");
    assert!(note.contains("compile cache hit"), "no compile: {note}");
    reconciled_by(&env, "a", &h1).await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    let serving = api
        .get("policy-fanout")
        .await
        .expect("the policy ConfigMap");
    assert_eq!(
        serving
            .data
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect::<Vec<_>>(),
        vec![("revision".to_owned(), format!("sha256:{h1}"))],
        "the ConfigMap says what serves, and nothing else"
    );
    assert!(
        serving.binary_data.unwrap_or_default().is_empty(),
        "the component is the revision's"
    );

    // A digest the policy never served: the CLI refuses it, and the host
    // refuses a ConfigMap asking for it, the version in service serving on.
    let never = policy_command(&env, &["rollback", "fanout", "--to", &h3[..12]]);
    assert!(!never.status.success(), "{}", text(&never));
    assert!(
        text(&never).contains("never served a version"),
        "{}",
        text(&never)
    );
    let asked = push_map(
        &env,
        &configmap::rollback("fanout", &env.policy_namespace, d3),
    )
    .await;
    let error = asked.error.unwrap_or_default();
    assert!(error.starts_with("NeverServed"), "{error}");
    assert_eq!(asked.loaded_digest, Some(h1.clone()), "still serving");
    // Another key beside the ask: which settings are meant is unclear.
    let mut mixed = configmap::rollback("fanout", &env.policy_namespace, d2);
    mixed
        .data
        .get_or_insert_default()
        .insert("fuel".to_owned(), "1000".to_owned());
    let error = push_map(&env, &mixed).await.error.unwrap_or_default();
    assert!(error.starts_with("RevisionNotAlone"), "{error}");

    // A revision whose component is not the digest it is kept under (no
    // team can write one; the operator checks all the same).
    let forged = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(revisions::name("fanout", &d3)),
            labels: Some([(REVISION_OF_LABEL.to_owned(), "fanout".to_owned())].into()),
            annotations: Some([(REVISION_DIGEST_ANNOTATION.to_owned(), h3.clone())].into()),
            ..kube::api::ObjectMeta::default()
        },
        data: Some([("allowedNamespaces".to_owned(), "*".to_owned())].into()),
        binary_data: Some(
            [(
                configmap::MODULE_KEY.to_owned(),
                k8s_openapi::ByteString(second.clone()),
            )]
            .into(),
        ),
        ..ConfigMap::default()
    };
    api.create(&kube::api::PostParams::default(), &forged)
        .await
        .expect("create the forged revision");
    let asked = push_map(
        &env,
        &configmap::rollback("fanout", &env.policy_namespace, d3),
    )
    .await;
    let error = asked.error.unwrap_or_default();
    assert!(error.starts_with("DigestMismatch"), "{error}");
    assert_eq!(asked.loaded_digest, Some(h1.clone()), "still serving");
    api.delete(&forged.name_any(), &kube::api::DeleteParams::default())
        .await
        .expect("delete the forged revision");
    // A push replaces the ask; two revisions are kept, the last served.
    assert_eq!(
        push(&env, "fanout", &third).await.loaded_digest,
        Some(h3.clone())
    );
    eventually("two revisions, the last served", || async {
        let kept = revisions_of(&env, "fanout").await;
        (kept == revision_names("fanout", &[&d3, &d1])).then_some(())
    })
    .await;
    // A unique prefix names a version.
    let rolled = policy_command(&env, &["rollback", "fanout", "--to", &h1[..12], "--wait"]);
    assert!(
        text(&rolled).contains(&format!("serving sha256:{h1}")),
        "{}",
        text(&rolled)
    );
    reconciled_by(&env, "a", &h1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_namespace_and_datajob_keep_their_versions_through_a_promote_until_unpinned() {
    let env = Env::start_with(OperatorSetup {
        policy_history: 2,
        ..OperatorSetup::configmaps()
    })
    .await;
    let first = guest_bytes("fanout");
    let [second, third, never] = ["second", "third", "never"].map(|label| version(&first, label));
    let [d1, d2, d3, d4] = [&first, &second, &third, &never].map(|bytes| Digest::of(bytes));
    let [h1, h2, h3, h4] = [d1, d2, d3, d4].map(|digest| digest.to_hex());
    let worker = json!({"replicas": 1, "image": "busybox:1.36", "command": ["true"]});
    push(&env, "fanout", &first).await;
    push(&env, "fanout", &second).await;
    for name in ["a", "b"] {
        env.create_job(name, "fanout", worker.clone()).await;
        reconciled_by(&env, name, &h2).await;
    }
    // The platform team creates the pins ConfigMap beside the policy's.
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.policy_namespace);
    let pins = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(configmap::pins_name("fanout")),
            ..kube::api::ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    api.create(&kube::api::PostParams::default(), &pins)
        .await
        .expect("create pins-fanout");

    // The namespace keeps the first version; `b` the second.
    let namespace = env.namespace.clone();
    let pinned = policy_command(&env, &["pin", "fanout", &namespace, &h1[..12], "--wait"]);
    assert!(pinned.status.success(), "{}", text(&pinned));
    assert!(text(&pinned).contains("pins in force"), "{}", text(&pinned));
    let note = wait_event(&env, "pins-fanout", "PinsApplied", &h1[..12])
        .await
        .message
        .unwrap_or_default();
    assert!(
        note.contains(&format!("namespace {namespace} → sha256:{}", &h1[..12])),
        "{note}"
    );
    assert!(
        note.contains("(code "),
        "each pinned version's memory: {note}"
    );
    let pinned_code = |digest: &str| {
        let series =
            format!(r#"policyhost_policy_pinned_code_bytes{{policy="fanout",digest="{digest}"}} "#);
        env.operator()
            .metrics
            .render()
            .lines()
            .find_map(|line| line.strip_prefix(&series)?.parse::<u64>().ok())
    };
    assert!(
        pinned_code(&h1).is_some_and(|bytes| bytes > 0),
        "the metric says it too"
    );
    reconciled_by(&env, "a", &h1).await;
    reconciled_by(&env, "b", &h1).await;
    let own = format!("{namespace}/b");
    let pinned = policy_command(&env, &["pin", "fanout", &own, &h2, "--wait"]);
    assert!(pinned.status.success(), "{}", text(&pinned));
    reconciled_by(&env, "b", &h2).await;
    let history = text(&policy_command(&env, &["history", "fanout"]));
    let line_of = |digest: &str| {
        history
            .lines()
            .find(|line| line.contains(digest))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(line_of(&h1).ends_with(&namespace), "{history}");
    assert!(
        line_of(&h2).ends_with(&format!("{namespace}.b")),
        "{history}"
    );
    let listed = policy_command(&env, &["list", "-o", "json"]);
    let rows: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON rows");
    assert_eq!(
        rows[0]["pins"][namespace.as_str()],
        format!("sha256:{h1}"),
        "{rows}"
    );
    assert!(
        rows[0].get("candidate").is_none(),
        "pins are no candidate: {rows}"
    );

    // A promote serves a third version to everyone else; the pins hold, and
    // the first version's revision outlives the history while pinned.
    let candidate = configmap::into_candidate(
        policy_map(&env, "fanout", &third, &for_every_namespace()),
        "fanout",
    );
    push_map(&env, &candidate).await;
    // Every DataJob is pinned: the candidate is compared with the serving
    // version only, so a reconcile of a pinned one calls no candidate, even
    // of `b`, pinned to the serving digest.
    let reconciles = || {
        env.operator()
            .metrics
            .reconcile_total
            .get_or_create(&PolicyResult {
                policy: "fanout".into(),
                result: "success".into(),
            })
            .get()
    };
    let before = reconciles();
    let poke = json!({"metadata": {"annotations": {"test.policyhost.dev/poke": "1"}}});
    for name in ["a", "b"] {
        env.jobs()
            .patch(name, &PatchParams::default(), &Patch::Merge(&poke))
            .await
            .expect("annotate");
    }
    eventually("a and b reconciled again", || async {
        (reconciles() >= before + 2).then_some(())
    })
    .await;
    let shadowed: Vec<String> = env
        .operator()
        .metrics
        .render()
        .lines()
        .filter(|line| line.starts_with(r#"policyhost_shadow_calls_total{policy="fanout""#))
        .map(str::to_owned)
        .collect();
    assert!(
        shadowed.is_empty(),
        "no shadow call beside a pinned version: {shadowed:?}"
    );
    let promoted = policy_command(&env, &["promote", "fanout", "--force", "--wait"]);
    assert!(
        text(&promoted).contains(&format!("serving sha256:{h3}")),
        "{}",
        text(&promoted)
    );
    // A DataJob new in the pinned namespace gets the pinned version too.
    env.create_job("c", "fanout", worker.clone()).await;
    reconciled_by(&env, "c", &h1).await;
    for (name, digest) in [("a", &h1), ("b", &h2)] {
        let job = env.jobs().get(name).await.expect("the DataJob");
        assert_eq!(
            job.status.and_then(|s| s.policy).map(|p| p.digest).as_ref(),
            Some(digest),
            "{name} keeps its pinned version"
        );
    }
    eventually("the pinned revision kept past the history", || async {
        let kept = revisions_of(&env, "fanout").await;
        (kept == revision_names("fanout", &[&d1, &d2, &d3])).then_some(())
    })
    .await;

    // A digest the policy never served: the CLI refuses it, and the host
    // refuses pins naming it, the pins in force staying.
    let never = policy_command(&env, &["pin", "fanout", "elsewhere", &h4]);
    assert!(!never.status.success(), "{}", text(&never));
    assert!(text(&never).contains("never served"), "{}", text(&never));
    let mut by_hand = api.get("pins-fanout").await.expect("pins-fanout");
    by_hand
        .data
        .get_or_insert_default()
        .insert("elsewhere".to_owned(), format!("sha256:{h4}"));
    by_hand.metadata.managed_fields = None;
    let verdict = push_map(&env, &by_hand).await;
    let error = verdict.error.unwrap_or_default();
    assert!(error.starts_with("NeverServed"), "{error}");
    assert!(
        env.operator()
            .shared
            .registry
            .pinned("fanout")
            .is_some_and(|pinned| pinned.pins.0.len() == 2),
        "the pins in force stay"
    );

    // Unpinned, both follow the serving version.
    for target in [own.as_str(), namespace.as_str()] {
        let out = policy_command(&env, &["unpin", "fanout", target, "--wait"]);
        let stdout = text(&out);
        // The hand-written pin is still there: the host refuses the whole map.
        assert!(stdout.contains("NeverServed"), "{stdout}");
    }
    let out = policy_command(&env, &["unpin", "fanout", "elsewhere", "--wait"]);
    assert!(out.status.success(), "{}", text(&out));
    for name in ["a", "b", "c"] {
        reconciled_by(&env, name, &h3).await;
    }
    assert_eq!(
        pinned_code(&h1),
        None,
        "nothing pinned, nothing kept loaded for it"
    );
}
