//! The conformance scenarios as raw requests, one per area of devcluster's
//! conformance suite: create/read/update/delete and their errors, patches,
//! server-side apply, the status subresource, finalizers, garbage
//! collection, lists and pagination, watches, Pods.

use std::path::Path;

use http::Method;
use serde_json::{Value, json};

use super::compare::Report;
use super::session::{Exchange, Server, Session};

const CMS: &str = "/api/v1/namespaces/{ns}/configmaps";
const DATAJOBS: &str = "/apis/policyhost.dev/v1alpha1/namespaces/{ns}/datajobs";
const PODS: &str = "/api/v1/namespaces/{ns}/pods";
const CLAIMS: &str = "/api/v1/namespaces/{ns}/persistentvolumeclaims";
const MERGE: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

#[derive(Debug, Clone, Copy)]
enum Scenario {
    Crud,
    Patches,
    Apply,
    Status,
    Finalizers,
    Collection,
    Reads,
    Watches,
    Pods,
    Claims,
    Types,
    Sharding,
}

const SCENARIOS: &[Scenario] = &[
    Scenario::Crud,
    Scenario::Patches,
    Scenario::Apply,
    Scenario::Status,
    Scenario::Finalizers,
    Scenario::Collection,
    Scenario::Reads,
    Scenario::Watches,
    Scenario::Pods,
    Scenario::Claims,
    Scenario::Types,
    Scenario::Sharding,
];

impl Scenario {
    fn name(self) -> String {
        format!("{self:?}").to_lowercase()
    }

    async fn run(self, server: &Server) -> Vec<Exchange> {
        let namespace = format!("diff-{}-{}", self.name(), std::process::id());
        let mut s = Session::start(server, &namespace).await;
        match self {
            Self::Crud => crud(&mut s).await,
            Self::Patches => patches(&mut s).await,
            Self::Apply => apply(&mut s).await,
            Self::Status => status(&mut s).await,
            Self::Finalizers => finalizers(&mut s).await,
            Self::Collection => collection(&mut s).await,
            Self::Reads => reads(&mut s).await,
            Self::Watches => watches(&mut s).await,
            Self::Pods => pods(&mut s).await,
            Self::Claims => claims(&mut s).await,
            Self::Types => types(&mut s).await,
            Self::Sharding => sharding(&mut s).await,
        }
        s.finish().await
    }
}

/// Every scenario on a fresh devcluster and on the real server.
pub async fn compare_all(real: &Path) -> Report {
    let real = Server::real(real).await;
    let mut report = Report::default();
    for &scenario in SCENARIOS {
        let devcluster = Server::devcluster().await;
        let dev = scenario.run(&devcluster).await;
        let real = scenario.run(&real).await;
        report.add(&scenario.name(), &dev, &real);
    }
    report
}

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

fn path(collection: &str, name: &str) -> String {
    format!("{collection}/{name}")
}

fn rv(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn uid(object: &Value) -> String {
    object["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn gone(status: u16, _: &Value) -> bool {
    status == 404
}

async fn crud(s: &mut Session<'_>) {
    let a = cm("a", json!({"k": "v"}));
    let created = s.post("create", CMS, a.clone()).await;
    s.get("get", &path(CMS, "a")).await;
    s.post("create an existing name", CMS, a.clone()).await;
    s.get("get a missing name", &path(CMS, "missing")).await;
    let mut fresh = created.clone();
    fresh["data"]["k"] = json!("fresh");
    s.put("update", &path(CMS, "a"), fresh).await;
    let mut stale = created.clone();
    stale["data"]["k"] = json!("stale");
    s.put(
        "update from a stale resourceVersion",
        &path(CMS, "a"),
        stale,
    )
    .await;
    s.put(
        "update without a resourceVersion",
        &path(CMS, "a"),
        cm("a", json!({"k": "unconditional"})),
    )
    .await;
    s.put(
        "update another name than the path's",
        &path(CMS, "a"),
        cm("b", json!({})),
    )
    .await;
    s.put(
        "update a missing name",
        &path(CMS, "missing"),
        cm("missing", json!({})),
    )
    .await;
    s.post("create an invalid name", CMS, cm("Not_A_Name", json!({})))
        .await;
    let mut elsewhere = cm("c", json!({}));
    elsewhere["metadata"]["namespace"] = json!("elsewhere");
    s.post("create with another namespace in the body", CMS, elsewhere)
        .await;
    s.post(
        "create in a missing namespace",
        "/api/v1/namespaces/{ns}-missing/configmaps",
        cm("d", json!({})),
    )
    .await;
    s.post(
        "create with a generated name",
        CMS,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}}),
    )
    .await;
    s.raw(
        "create from a malformed body",
        Method::POST,
        CMS,
        "application/json",
        "{not json",
    )
    .await;
    s.request(
        "create from an unsupported media type",
        Method::POST,
        CMS,
        &[("content-type", "text/plain")],
        Some(&cm("e", json!({}))),
    )
    .await;
    s.delete(
        "delete with a wrong uid precondition",
        &path(CMS, "a"),
        Some(json!({"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}})),
    )
    .await;
    s.delete(
        "delete with the uid precondition",
        &path(CMS, "a"),
        Some(json!({"preconditions": {"uid": uid(&created)}})),
    )
    .await;
    s.delete("delete a missing name", &path(CMS, "a"), None)
        .await;
    s.get(
        "get an unknown resource",
        "/api/v1/namespaces/{ns}/nothings/x",
    )
    .await;
    s.get(
        "get an unknown group",
        "/apis/nothing.example.com/v1/namespaces/{ns}/things",
    )
    .await;
}

async fn patches(s: &mut Session<'_>) {
    let mut b = cm("b", json!({"a": "1", "b": "2"}));
    b["metadata"]["labels"] = json!({"x": "1"});
    let created = s.post("create", CMS, b).await;
    let at = path(CMS, "b");
    s.patch(
        "merge patch",
        &at,
        MERGE,
        json!({"data": {"b": null, "c": "3"}}),
    )
    .await;
    s.patch(
        "JSON patch",
        &at,
        JSON_PATCH,
        json!([{"op": "replace", "path": "/data/a", "value": "9"}, {"op": "add", "path": "/metadata/labels/y", "value": "2"}]),
    )
    .await;
    s.patch(
        "JSON patch whose test fails",
        &at,
        JSON_PATCH,
        json!([{"op": "test", "path": "/data/a", "value": "nope"}]),
    )
    .await;
    s.patch(
        "JSON patch of a missing path",
        &at,
        JSON_PATCH,
        json!([{"op": "remove", "path": "/data/nothing"}]),
    )
    .await;
    s.patch(
        "strategic merge patch",
        &at,
        STRATEGIC,
        json!({"metadata": {"labels": {"x": null, "z": "3"}}}),
    )
    .await;
    let mut stale = json!({"data": {"a": "stale"}});
    stale["metadata"] = json!({"resourceVersion": rv(&created)});
    s.patch(
        "merge patch from a stale resourceVersion",
        &at,
        MERGE,
        stale,
    )
    .await;
    s.patch(
        "merge patch of a missing name",
        &path(CMS, "missing"),
        MERGE,
        json!({"data": {"a": "1"}}),
    )
    .await;
    s.raw(
        "merge patch from a malformed body",
        Method::PATCH,
        &at,
        MERGE,
        "{not json",
    )
    .await;
    s.patch(
        "merge patch changing the name",
        &at,
        MERGE,
        json!({"metadata": {"name": "other"}}),
    )
    .await;
    s.post("create a DataJob", DATAJOBS, datajob("j", json!({})))
        .await;
    s.patch(
        "strategic merge patch of a custom resource",
        &path(DATAJOBS, "j"),
        STRATEGIC,
        json!({"spec": {"policy": "other"}}),
    )
    .await;
    s.patch(
        "merge patch of a custom resource",
        &path(DATAJOBS, "j"),
        MERGE,
        json!({"spec": {"policy": "other", "params": {"n": 1}}}),
    )
    .await;
}

fn datajob(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    if spec.get("policy").is_none() {
        spec["policy"] = json!("fanout");
    }
    json!({"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob", "metadata": {"name": name}, "spec": spec})
}

async fn apply(s: &mut Session<'_>) {
    let at = path(CMS, "c");
    let by = |manager: &str, force: bool| {
        format!(
            "{}?fieldManager={manager}{}",
            path(CMS, "c"),
            if force { "&force=true" } else { "" }
        )
    };
    s.patch(
        "apply creates",
        &by("alpha", false),
        APPLY,
        cm("c", json!({"a": "1", "b": "2"})),
    )
    .await;
    s.patch(
        "apply the same again",
        &by("alpha", false),
        APPLY,
        cm("c", json!({"a": "1", "b": "2"})),
    )
    .await;
    s.patch(
        "another manager's conflicting apply",
        &by("beta", false),
        APPLY,
        cm("c", json!({"a": "changed"})),
    )
    .await;
    s.patch(
        "another manager's forced apply",
        &by("beta", true),
        APPLY,
        cm("c", json!({"a": "changed"})),
    )
    .await;
    s.patch(
        "the first manager gives up a field",
        &by("alpha", false),
        APPLY,
        cm("c", json!({"b": "2"})),
    )
    .await;
    s.patch(
        "an update by a third manager",
        &format!("{at}?fieldManager=gamma"),
        MERGE,
        json!({"data": {"g": "1"}}),
    )
    .await;
    s.patch(
        "apply without a field manager",
        &at,
        APPLY,
        cm("c", json!({"a": "1"})),
    )
    .await;
    s.patch(
        "apply with another kind",
        &by("alpha", false),
        APPLY,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}}),
    )
    .await;
    s.patch(
        "apply that creates under another name than the URL's",
        &format!("{}?fieldManager=alpha", path(CMS, "d")),
        APPLY,
        cm("elsewhere", json!({})),
    )
    .await;
    s.get("the misnamed apply created nothing", &path(CMS, "d"))
        .await;
    let current = s.get("get", &at).await;
    // An apply naming a uid updates that object or nothing: a create-only
    // writer's update, which never creates nor reaches another object.
    let with_uid = |name: &str, uid: &str| {
        let mut body = cm(name, json!({"u": "1"}));
        body["metadata"]["uid"] = json!(uid);
        body
    };
    let unknown = "00000000-0000-0000-0000-000000000000";
    s.patch(
        "apply naming a uid onto a missing object",
        &format!("{}?fieldManager=alpha", path(CMS, "ghost")),
        APPLY,
        with_uid("ghost", unknown),
    )
    .await;
    s.get(
        "the apply naming a uid created nothing",
        &path(CMS, "ghost"),
    )
    .await;
    s.patch(
        "apply naming another object's uid",
        &by("alpha", false),
        APPLY,
        with_uid("c", unknown),
    )
    .await;
    s.patch(
        "apply naming the object's own uid",
        &by("alpha", false),
        APPLY,
        with_uid("c", &uid(&current)),
    )
    .await;
    // Managed fields a client replaces with an entry that owns nothing: it
    // is not kept, so the next apply finds an object nobody owns, and
    // applying the same again changes nothing.
    let e = path(CMS, "e");
    s.post("create e", CMS, cm("e", json!({"x": "1"}))).await;
    s.patch(
        "managed fields that own nothing",
        &e,
        MERGE,
        json!({"metadata": {"managedFields": [{"manager": "other", "operation": "Apply",
            "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {}}]}}),
    )
    .await;
    let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "e"}});
    let by_alpha = format!("{e}?fieldManager=alpha");
    s.patch(
        "apply to an object nobody owns",
        &by_alpha,
        APPLY,
        bare.clone(),
    )
    .await;
    s.patch("the same apply again", &by_alpha, APPLY, bare)
        .await;
    s.post(
        "dry-run create",
        &format!("{CMS}?dryRun=All"),
        cm("dry", json!({})),
    )
    .await;
    s.get("the dry run stored nothing", &path(CMS, "dry")).await;
    s.patch(
        "apply a custom resource",
        &format!("{}?fieldManager=alpha", path(DATAJOBS, "j")),
        APPLY,
        datajob("j", json!({"params": {"n": 1}})),
    )
    .await;
}

async fn status(s: &mut Session<'_>) {
    let mut j = datajob("j", json!({"params": {}}));
    j["status"] = json!({"phase": "Faked"});
    let created = s.post("create with a status", DATAJOBS, j).await;
    let at = path(DATAJOBS, "j");
    let mut with_status = created.clone();
    with_status["status"] = json!({"phase": "Running", "observedGeneration": 1});
    with_status["spec"]["policy"] = json!("ignored");
    s.put("update the status", &format!("{at}/status"), with_status)
        .await;
    s.patch(
        "patch the spec",
        &at,
        MERGE,
        json!({"spec": {"policy": "other"}, "status": {"phase": "Ignored"}}),
    )
    .await;
    s.patch(
        "patch the status",
        &format!("{at}/status"),
        MERGE,
        json!({"status": {"phase": "Succeeded"}, "spec": {"policy": "ignored"}}),
    )
    .await;
    s.patch(
        "a metadata-only patch",
        &at,
        MERGE,
        json!({"metadata": {"labels": {"l": "1"}}}),
    )
    .await;
    s.get("get the status", &format!("{at}/status")).await;
    s.post(
        "create with an unknown field, strictly",
        &format!("{DATAJOBS}?fieldValidation=Strict"),
        datajob("strict", json!({"unknown": 1})),
    )
    .await;
    s.post(
        "create with an unknown field",
        DATAJOBS,
        datajob("pruned", json!({"unknown": 1})),
    )
    .await;
    s.post(
        "create with a wrongly typed field",
        DATAJOBS,
        datajob("typed", json!({"policy": 7})),
    )
    .await;
    s.get(
        "a status of a missing name",
        &format!("{DATAJOBS}/missing/status"),
    )
    .await;
    let mut absent = datajob("absent", json!({"policy": "p"}));
    absent["status"] = json!({"phase": "Running"});
    s.patch(
        "apply to the status of a missing name",
        &format!("{DATAJOBS}/absent/status?fieldManager=alpha"),
        APPLY,
        absent,
    )
    .await;
    s.get(
        "the status apply created nothing",
        &path(DATAJOBS, "absent"),
    )
    .await;
}

async fn finalizers(s: &mut Session<'_>) {
    let mut f = cm("f", json!({}));
    f["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let created = s.post("create with a finalizer", CMS, f).await;
    let at = path(CMS, "f");
    let from = format!("{CMS}?watch=1&resourceVersion={}", rv(&created));
    s.watch(
        "events until it is gone",
        &from,
        |events| events.iter().any(|e| e["type"] == "DELETED"),
        async |s: &mut Session<'_>| {
            s.delete("delete", &at, None).await;
            s.get("get while it is deleted", &at).await;
            s.patch(
                "patch while it is deleted",
                &at,
                MERGE,
                json!({"data": {"late": "1"}}),
            )
            .await;
            s.patch(
                "a new finalizer while it is deleted",
                &at,
                JSON_PATCH,
                json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/late"}]),
            )
            .await;
            s.delete("delete again", &at, None).await;
            s.patch(
                "remove the finalizers",
                &at,
                MERGE,
                json!({"metadata": {"finalizers": null}}),
            )
            .await;
        },
    )
    .await;
    s.get("get after the finalizers went", &at).await;
}

async fn collection(s: &mut Session<'_>) {
    for (owner, policy) in [
        ("background", "Background"),
        ("foreground", "Foreground"),
        ("orphan", "Orphan"),
    ] {
        let created = s
            .post(&format!("create owner {owner}"), CMS, cm(owner, json!({})))
            .await;
        let mut dependent = cm(&format!("{owner}-dependent"), json!({}));
        dependent["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": uid(&created),
            "blockOwnerDeletion": true,
        }]);
        s.post(&format!("create {owner}'s dependent"), CMS, dependent)
            .await;
        s.delete(
            &format!("delete owner {owner}"),
            &path(CMS, owner),
            Some(json!({"propagationPolicy": policy})),
        )
        .await;
        s.eventually(&format!("owner {owner} is gone"), &path(CMS, owner), gone)
            .await;
        let dependent = path(CMS, &format!("{owner}-dependent"));
        if policy == "Orphan" {
            s.eventually("the orphan keeps no owner", &dependent, |_, body| {
                body["metadata"].get("ownerReferences").is_none()
            })
            .await;
        } else {
            s.eventually(&format!("{owner}'s dependent is gone"), &dependent, gone)
                .await;
        }
    }
    s.delete(
        "an unknown propagation policy",
        &path(CMS, "orphan-dependent"),
        Some(json!({"propagationPolicy": "Sideways"})),
    )
    .await;
}

async fn reads(s: &mut Session<'_>) {
    for (name, tier) in [
        ("r1", "a"),
        ("r2", "b"),
        ("r3", "a"),
        ("r4", "b"),
        ("r5", "a"),
    ] {
        let mut r = cm(name, json!({}));
        r["metadata"]["labels"] = json!({"tier": tier});
        s.post(&format!("create {name}"), CMS, r).await;
    }
    s.get("list", CMS).await;
    s.get("by label", &format!("{CMS}?labelSelector=tier%3Da"))
        .await;
    s.get(
        "by set-based label",
        &format!("{CMS}?labelSelector=tier%20notin%20(a)"),
    )
    .await;
    s.get(
        "by name field",
        &format!("{CMS}?fieldSelector=metadata.name%3Dr2"),
    )
    .await;
    s.get(
        "by an unsupported field",
        &format!("{CMS}?fieldSelector=data.k%3Dv"),
    )
    .await;
    s.get(
        "by a malformed label selector",
        &format!("{CMS}?labelSelector=tier%3D%3D%3D"),
    )
    .await;
    let mut page = s.get("first page", &format!("{CMS}?limit=2")).await;
    let mut n = 1;
    while let Some(token) = page["metadata"]["continue"]
        .as_str()
        .filter(|t| !t.is_empty())
    {
        n += 1;
        let next = format!("{CMS}?limit=2&continue={}", urlencode(token));
        page = s.get(&format!("page {n}"), &next).await;
    }
    s.get(
        "a malformed continue token",
        &format!("{CMS}?limit=2&continue=garbage"),
    )
    .await;
    s.get(
        "list from the cache",
        &format!("{CMS}?resourceVersion=0&labelSelector=tier%3Db"),
    )
    .await;
    s.get(
        "across namespaces, by label",
        "/api/v1/configmaps?labelSelector=tier%3Db",
    )
    .await;
    s.request(
        "as a table",
        Method::GET,
        &format!("{CMS}?labelSelector=tier%3Da"),
        &[("accept", TABLE)],
        None,
    )
    .await;
    s.post("create a DataJob", DATAJOBS, datajob("j", json!({})))
        .await;
    s.request(
        "custom resources as a table",
        Method::GET,
        DATAJOBS,
        &[("accept", TABLE)],
        None,
    )
    .await;
}

fn urlencode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

async fn watches(s: &mut Session<'_>) {
    let start = s.post("create w0", CMS, cm("w0", json!({}))).await;
    let from = rv(&start);
    let selected = format!("{CMS}?watch=1&labelSelector=w%3Dyes&resourceVersion={from}");
    s.watch(
        "a selector's events",
        &selected,
        Session::events(3),
        async |s: &mut Session<'_>| {
            let mut w1 = cm("w1", json!({}));
            w1["metadata"]["labels"] = json!({"w": "yes"});
            s.post("create w1", CMS, w1).await;
            s.post("create w2", CMS, cm("w2", json!({}))).await;
            s.patch(
                "update w1",
                &path(CMS, "w1"),
                MERGE,
                json!({"data": {"a": "1"}}),
            )
            .await;
            s.patch(
                "w1 leaves the selector",
                &path(CMS, "w1"),
                MERGE,
                json!({"metadata": {"labels": {"w": "no"}}}),
            )
            .await;
        },
    )
    .await;
    s.watch(
        "replayed from a resourceVersion",
        &format!("{CMS}?watch=1&resourceVersion={from}"),
        Session::events(4),
        async |_: &mut Session<'_>| {},
    )
    .await;
    s.watch(
        "a streaming list",
        &format!(
            "{CMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
        ),
        |events| events.iter().any(|e| e["type"] == "BOOKMARK"),
        async |_: &mut Session<'_>| {},
    )
    .await;
    s.watch(
        "one name",
        &format!("{CMS}?watch=1&fieldSelector=metadata.name%3Dw2&resourceVersion={from}"),
        |events| events.iter().any(|e| e["type"] == "DELETED"),
        async |s: &mut Session<'_>| {
            s.delete("delete w2", &path(CMS, "w2"), None).await;
        },
    )
    .await;
    s.get(
        "a watch from a malformed resourceVersion",
        &format!("{CMS}?watch=1&resourceVersion=abc"),
    )
    .await;
    s.get(
        "a streaming list without its match",
        &format!("{CMS}?watch=1&sendInitialEvents=true"),
    )
    .await;
}

async fn pods(s: &mut Session<'_>) {
    // Bound to a node no one runs: no scheduler or kubelet touches it.
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {
            "nodeName": "nowhere",
            "restartPolicy": "Never",
            "containers": [{"name": "app", "image": "app:1"}],
        },
    });
    s.post("create", PODS, pod).await;
    let at = path(PODS, "p");
    s.patch(
        "apply a container whose name is null",
        &format!("{}?fieldManager=alpha", path(PODS, "q")),
        APPLY,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"},
            "spec": {"nodeName": "nowhere", "containers": [{"name": null, "image": "app:1"}]}}),
    )
    .await;
    s.get("the refused apply created nothing", &path(PODS, "q"))
        .await;
    // An applier that set a defaulted field and then leaves it out: the
    // field goes with its only owner and is defaulted again, so the spec,
    // which an update may barely change, stays as it was.
    let applied = |spec: Value| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "r"}, "spec": spec});
    let r = format!("{}?fieldManager=alpha", path(PODS, "r"));
    s.patch(
        "apply a Pod naming its DNS policy",
        &r,
        APPLY,
        applied(json!({"nodeName": "nowhere", "dnsPolicy": "ClusterFirst",
            "containers": [{"name": "app", "image": "app:1"}]})),
    )
    .await;
    s.patch(
        "apply it again without the DNS policy",
        &r,
        APPLY,
        applied(json!({"nodeName": "nowhere",
            "containers": [{"name": "app", "image": "app:1"}]})),
    )
    .await;
    s.patch(
        "change the image",
        &at,
        STRATEGIC,
        json!({"spec": {"containers": [{"name": "app", "image": "app:2"}]}}),
    )
    .await;
    // Another manager's container stays beside the applied one: two
    // containers where there was one, refused before any other check.
    s.patch(
        "apply a renamed container",
        &format!("{at}?fieldManager=beta&force=true"),
        APPLY,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "main", "image": "app:2"}]}}),
    )
    .await;
    s.patch(
        "change the restart policy",
        &at,
        MERGE,
        json!({"spec": {"restartPolicy": "Always"}}),
    )
    .await;
    s.patch(
        "the status",
        &format!("{at}/status"),
        MERGE,
        json!({"status": {"phase": "Running"}}),
    )
    .await;
    s.delete(
        "delete at once",
        &at,
        Some(json!({"gracePeriodSeconds": 0})),
    )
    .await;
    s.eventually("gone", &at, gone).await;
}

async fn claims(s: &mut Session<'_>) {
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "scratch"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    });
    s.post("create", CLAIMS, claim).await;
    let at = path(CLAIMS, "scratch");
    s.get("read it back", &at).await;
    s.patch(
        "change its access modes",
        &at,
        MERGE,
        json!({"spec": {"accessModes": ["ReadWriteOnce"]}}),
    )
    .await;
    s.patch(
        "label it",
        &at,
        MERGE,
        json!({"metadata": {"labels": {"team": "a"}}}),
    )
    .await;
    s.delete("delete it", &at, None).await;
    s.eventually("gone once no Pod uses it", &at, gone).await;
}

/// A body of each built-in kind with a field of the wrong JSON type (one
/// the Go type names plainly: a named string type such as `v1.Protocol`
/// reads as `string` to devcluster), and the collection it is posted to.
fn mistyped() -> Vec<(&'static str, &'static str, Value)> {
    let object = |api_version: &str, kind: &str, name: &str, fields: Value| {
        let mut body = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}});
        if let (Some(body), Value::Object(fields)) = (body.as_object_mut(), fields) {
            body.extend(fields);
        }
        body
    };
    let rbac = "rbac.authorization.k8s.io/v1";
    let container = |fields: Value| {
        let mut container = json!({"name": "a", "image": "app:1"});
        if let (Some(container), Value::Object(fields)) = (container.as_object_mut(), fields) {
            container.extend(fields);
        }
        json!({"spec": {"containers": [container]}})
    };
    vec![
        (
            "a Namespace whose label is a number",
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": "{ns}-typed", "labels": {"a": 1}}}),
        ),
        (
            "a Pod whose image is a number",
            PODS,
            object("v1", "Pod", "typed", container(json!({"image": 1}))),
        ),
        (
            "a Pod whose CPU limit is no quantity",
            PODS,
            object(
                "v1",
                "Pod",
                "typed",
                container(json!({"resources": {"limits": {"cpu": "abc"}}})),
            ),
        ),
        (
            "a ConfigMap whose data holds a boolean",
            CMS,
            cm("typed", json!({"a": true})),
        ),
        (
            "a ConfigMap whose creation time is no time",
            CMS,
            object(
                "v1",
                "ConfigMap",
                "typed",
                json!({"metadata": {"name": "typed", "creationTimestamp": "garbage"}}),
            ),
        ),
        (
            "a Secret whose data is not base64",
            "/api/v1/namespaces/{ns}/secrets",
            object(
                "v1",
                "Secret",
                "typed",
                json!({"data": {"a": "not base64!"}}),
            ),
        ),
        (
            "a Service whose target port is a boolean",
            "/api/v1/namespaces/{ns}/services",
            object(
                "v1",
                "Service",
                "typed",
                json!({"spec": {"ports": [{"port": 80, "targetPort": true}]}}),
            ),
        ),
        (
            "an Event whose count is a string",
            "/api/v1/namespaces/{ns}/events",
            object(
                "v1",
                "Event",
                "typed",
                json!({"involvedObject": {"kind": "Pod", "name": "p"}, "count": "3"}),
            ),
        ),
        (
            "a ServiceAccount whose token automounting is a string",
            "/api/v1/namespaces/{ns}/serviceaccounts",
            object(
                "v1",
                "ServiceAccount",
                "typed",
                json!({"automountServiceAccountToken": "yes"}),
            ),
        ),
        (
            "a Node whose unschedulability is a string",
            "/api/v1/nodes",
            object(
                "v1",
                "Node",
                "{ns}-typed",
                json!({"spec": {"unschedulable": "yes"}}),
            ),
        ),
        (
            "a Deployment whose replicas are a string",
            "/apis/apps/v1/namespaces/{ns}/deployments",
            object(
                "apps/v1",
                "Deployment",
                "typed",
                json!({"spec": {"replicas": "3"}}),
            ),
        ),
        (
            "a Job whose parallelism is a fraction",
            "/apis/batch/v1/namespaces/{ns}/jobs",
            object(
                "batch/v1",
                "Job",
                "typed",
                json!({"spec": {"parallelism": 1.5}}),
            ),
        ),
        (
            "a Lease whose duration is a string",
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
            object(
                "coordination.k8s.io/v1",
                "Lease",
                "typed",
                json!({"spec": {"leaseDurationSeconds": "15"}}),
            ),
        ),
        (
            "an events.k8s.io Event whose note is a number",
            "/apis/events.k8s.io/v1/namespaces/{ns}/events",
            object(
                "events.k8s.io/v1",
                "Event",
                "typed",
                json!({"eventTime": "2024-01-01T00:00:00.000000Z", "note": 5}),
            ),
        ),
        (
            "a Role whose verbs are a string",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
            object(rbac, "Role", "typed", json!({"rules": [{"verbs": "get"}]})),
        ),
        (
            "a RoleBinding whose subject's name is a number",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
            object(
                rbac,
                "RoleBinding",
                "typed",
                json!({"subjects": [{"kind": "User", "name": 5}],
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}}),
            ),
        ),
        (
            "a ClusterRole whose rules are an object",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            object(rbac, "ClusterRole", "{ns}-typed", json!({"rules": {}})),
        ),
        (
            "a ClusterRoleBinding whose role's name is a boolean",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            object(
                rbac,
                "ClusterRoleBinding",
                "{ns}-typed",
                json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": true}}),
            ),
        ),
        (
            "a PodDisruptionBudget whose minimum is a boolean",
            "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
            object(
                "policy/v1",
                "PodDisruptionBudget",
                "typed",
                json!({"spec": {"minAvailable": true}}),
            ),
        ),
        (
            "a CustomResourceDefinition whose schema's type is a number",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            object(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "typeds.{ns}.example.com",
                json!({"spec": {"group": "{ns}.example.com", "scope": "Namespaced",
                    "names": {"plural": "typeds", "kind": "Typed"},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object",
                            "additionalProperties": {"type": 5}}}}]}}),
            ),
        ),
    ]
}

/// Writes whose body does not fit the kind's Go type: every built-in kind's
/// create, and a ConfigMap's update and patches of each type, each refused
/// in the words of the decoder that reads it.
async fn types(s: &mut Session<'_>) {
    for (what, collection, body) in mistyped() {
        s.post(&format!("create {what}"), collection, body).await;
    }
    s.get("the mistyped creates stored nothing", &path(CMS, "typed"))
        .await;
    let created = s
        .post("create a ConfigMap", CMS, cm("m", json!({"a": "x"})))
        .await;
    let at = path(CMS, "m");
    let mut update = created.clone();
    update["data"]["a"] = json!(true);
    s.put("update with a boolean in data", &at, update).await;
    s.patch(
        "merge patch with a boolean in data",
        &at,
        MERGE,
        json!({"data": {"b": true}}),
    )
    .await;
    s.patch(
        "JSON patch with a boolean in data",
        &at,
        JSON_PATCH,
        json!([{"op": "add", "path": "/data/b", "value": true}]),
    )
    .await;
    s.patch(
        "strategic merge patch with a boolean in data",
        &at,
        STRATEGIC,
        json!({"data": {"b": true}}),
    )
    .await;
    s.patch(
        "apply with a boolean in data",
        &format!("{at}?fieldManager=alpha"),
        APPLY,
        cm("m", json!({"b": true})),
    )
    .await;
    s.get("the mistyped writes changed nothing", &at).await;
    s.patch(
        "apply that creates with a boolean in data",
        &format!("{}?fieldManager=alpha", path(CMS, "applied")),
        APPLY,
        cm("applied", json!({"b": true})),
    )
    .await;
    s.patch(
        "apply a Deployment whose replicas are a string",
        "/apis/apps/v1/namespaces/{ns}/deployments/applied?fieldManager=alpha",
        APPLY,
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "applied"},
               "spec": {"replicas": "3"}}),
    )
    .await;
    s.patch(
        "apply a ConfigMap whose creation time is no time",
        &format!("{}?fieldManager=alpha", path(CMS, "applied")),
        APPLY,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "applied", "creationTimestamp": "garbage"}}),
    )
    .await;
    s.get(
        "the mistyped applies created nothing",
        &path(CMS, "applied"),
    )
    .await;
}

/// 64-bit FNV-1a, the hash of `shardRange` (Go's `hash/fnv`).
pub fn fnv1a_64(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `shardRange(field, start, end)` with 16-digit bounds (`end` may be 2^64).
pub fn shard_range(field: &str, start: u64, end: Option<u64>) -> String {
    let end = end.map_or_else(
        || "0x10000000000000000".to_owned(),
        |e| format!("{e:#018x}"),
    );
    format!("shardRange({field}, '{start:#018x}', '{end}')")
}

/// Shard selectors over the namespace's hash, which both servers share (a
/// uid differs between them; `shard_ranges_split_by_uid` checks those):
/// lists, pages, watches and custom resources, and each refusal.
async fn sharding(s: &mut Session<'_>) {
    const NS: &str = "object.metadata.namespace";
    for name in ["s1", "s2", "s3"] {
        s.post(&format!("create {name}"), CMS, cm(name, json!({})))
            .await;
    }
    let hash = fnv1a_64(&s.namespace);
    let ours = shard_range(NS, hash, hash.checked_add(1));
    let other = if hash == 0 {
        shard_range(NS, 1, None)
    } else {
        shard_range(NS, 0, Some(hash))
    };
    let query = |selector: &str| format!("shardSelector={}", urlencode(selector));
    s.get("its own range", &format!("{CMS}?{}", query(&ours)))
        .await;
    s.get("another range", &format!("{CMS}?{}", query(&other)))
        .await;
    s.get(
        "ranges joined",
        &format!("{CMS}?{}", query(&format!("{other} || {ours}"))),
    )
    .await;
    s.get(
        "a page of its range",
        &format!("{CMS}?limit=2&{}", query(&ours)),
    )
    .await;
    s.get(
        "with a label selector",
        &format!("{CMS}?labelSelector=tier%3Da&{}", query(&ours)),
    )
    .await;
    s.get("an empty selector", &format!("{CMS}?shardSelector="))
        .await;
    s.post("create a DataJob", DATAJOBS, datajob("j", json!({})))
        .await;
    s.get("DataJobs in range", &format!("{DATAJOBS}?{}", query(&ours)))
        .await;
    let from = rv(&s.get("list", CMS).await);
    s.watch(
        "a watch of its range",
        &format!("{CMS}?watch=1&resourceVersion={from}&{}", query(&ours)),
        Session::events(2),
        async |s: &mut Session<'_>| {
            s.post("create s4", CMS, cm("s4", json!({}))).await;
            s.delete("delete s1", &path(CMS, "s1"), None).await;
        },
    )
    .await;
    s.watch(
        "a watch of another range",
        &format!(
            "{CMS}?watch=1&timeoutSeconds=2&resourceVersion={from}&{}",
            query(&other)
        ),
        |_: &[Value]| false,
        async |_: &mut Session<'_>| {},
    )
    .await;
    let bounds = [
        ("'0x0'", "'0x8000000000000000'"),
        ("'ff'", "'0x8000000000000000'"),
        ("'0x'", "'0x8000000000000000'"),
        ("'0x0000000000000000'", "'0x800000000000000g'"),
        ("'0x0000000000000000'", "'0x20000000000000000'"),
        ("'0x0000000000000000'", "'0x100000000000000000'"),
        ("'0x8000000000000000'", "'0x8000000000000000'"),
        ("0", "'0x8000000000000000'"),
    ];
    for (start, end) in bounds {
        let selector = format!("shardRange(object.metadata.uid, {start}, {end})");
        s.get(
            &format!("refused: {selector}"),
            &format!("{CMS}?{}", query(&selector)),
        )
        .await;
    }
    let zero = "'0x0000000000000000'";
    let half = "'0x8000000000000000'";
    for selector in [
        format!("shardRange(object.metadata.name, {zero}, {half})"),
        format!("shardRange(object.metadata.uid, {zero})"),
        format!(
            "shardRange(object.metadata.uid, {zero}, {half}) || shardRange({NS}, {zero}, {half})"
        ),
        format!(
            "shardRange(object.metadata.uid, {zero}, {half}) && shardRange(object.metadata.uid, {zero}, {half})"
        ),
        "uidRange(object.metadata.uid)".to_owned(),
        "object.metadata.uid".to_owned(),
        "shardRange(object.metadata.uid".to_owned(),
    ] {
        s.get(
            &format!("refused: {selector}"),
            &format!("{CMS}?{}", query(&selector)),
        )
        .await;
    }
    s.get(
        "refused on a watch",
        &format!("{CMS}?watch=1&{}", query("shardRange(object.metadata.uid)")),
    )
    .await;
}

/// On `server`: four quarter ranges of the uid hash split a namespace's
/// objects exactly as FNV-1a of each uid says, in lists and in a watch.
/// Not compared between the servers, whose uids differ: each is held to
/// the hash.
pub async fn shard_ranges_split_by_uid(server: &Server) {
    const UID: &str = "object.metadata.uid";
    let namespace = format!("shard-uid-{}-{}", server.name, std::process::id());
    let mut s = Session::start(server, &namespace).await;
    let quarter = |q: u64| {
        let start = q << 62;
        shard_range(UID, start, (q < 3).then(|| (q + 1) << 62))
    };
    let in_quarter = |uid: &str| fnv1a_64(uid) >> 62;
    for i in 0..24 {
        s.post("create", CMS, cm(&format!("u{i}"), json!({}))).await;
    }
    let all = s.get("list", CMS).await;
    let uid_of = |item: &Value| item["metadata"]["uid"].as_str().unwrap().to_owned();
    let mut seen = 0;
    for q in 0..4 {
        let page = s
            .get(
                "quarter",
                &format!("{CMS}?shardSelector={}", urlencode(&quarter(q))),
            )
            .await;
        assert_eq!(
            page["metadata"]["shardInfo"]["selector"],
            quarter(q),
            "{}: {page}",
            server.name
        );
        let mut got: Vec<String> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(uid_of)
            .collect();
        let mut want: Vec<String> = all["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(uid_of)
            .filter(|uid| in_quarter(uid) == q)
            .collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "{}: quarter {q}", server.name);
        seen += got.len();
    }
    assert_eq!(seen, 24, "{}: every object in one quarter", server.name);
    let from = rv(&all);
    s.watch(
        "a quarter's events",
        &format!(
            "{CMS}?watch=1&timeoutSeconds=3&resourceVersion={from}&shardSelector={}",
            urlencode(&quarter(0))
        ),
        |_: &[Value]| false,
        async |s: &mut Session<'_>| {
            for i in 24..48 {
                s.post("create", CMS, cm(&format!("u{i}"), json!({}))).await;
            }
        },
    )
    .await;
    let events = s.last();
    let created = s.get("list", CMS).await;
    let mut want: Vec<String> = created["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| {
            item["metadata"]["name"].as_str().unwrap()[1..]
                .parse::<u32>()
                .unwrap()
                >= 24
        })
        .map(uid_of)
        .filter(|uid| in_quarter(uid) == 0)
        .collect();
    let mut got: Vec<String> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|event| {
            assert_eq!(event["type"], "ADDED", "{}: {event}", server.name);
            uid_of(&event["object"])
        })
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "{}: the quarter's watch", server.name);
    s.finish().await;
}
