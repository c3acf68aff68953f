//! kubectl sessions: the same commands against both servers, their exit
//! codes and output compared line by line (uids, resourceVersions,
//! timestamps, ages and kubectl diff's temporary paths normalised).

use std::path::Path;

use serde_json::{Value, json};

use super::compare::Report;
use super::session::{Exchange, Server, Session};
use crate::common::Kubectl;

/// The session on a fresh devcluster and on the real server.
pub async fn compare_all(real: &Path) -> Report {
    let real = Server::real(real).await;
    let devcluster = Server::devcluster().await;
    let dev = session(&devcluster).await;
    let real = session(&real).await;
    let mut report = Report::default();
    report.add("kubectl", &dev, &real);
    report
}

fn configmap(ns: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "k1", "namespace": ns}, "data": data})
}

async fn session(server: &Server) -> Vec<Exchange> {
    let ns = format!("diff-kubectl-{}", std::process::id());
    let mut s = Session::start(server, &ns).await;
    let k = Kubectl::with_kubeconfig(&server.kubeconfig, &format!("diff-{}", server.name));
    let first = k.file("k1.yaml", &configmap(&ns, json!({"a": "1"})));
    let changed = k.file("k1-changed.yaml", &configmap(&ns, json!({"a": "2"})));
    let other = k.file(
        "k1-other.yaml",
        &configmap(&ns, json!({"a": "3", "z": "9"})),
    );
    let list = k.file(
        "list.yaml",
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "l1", "namespace": ns}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "l2", "namespace": ns}},
        ]}),
    );
    let datajob = |name: &str, spec: Value| {
        json!({"apiVersion": "policyhost.dev/v1alpha1", "kind": "DataJob",
               "metadata": {"name": name, "namespace": ns}, "spec": spec})
    };
    let dj = k.file("dj.yaml", &datajob("j1", json!({"policy": "fanout"})));
    let dj_unknown = k.file(
        "dj-unknown.yaml",
        &datajob("j2", json!({"policy": "fanout", "unknown": 1})),
    );
    let commands: Vec<Vec<&str>> = vec![
        vec!["create", "configmap", "k0", "--from-literal=a=1"],
        vec!["apply", "-f", &first],
        vec!["apply", "-f", &first],
        vec!["get", "configmap", "k1", "-o", "yaml"],
        vec!["get", "configmaps"],
        vec!["get", "configmaps", "-o", "wide", "--show-labels"],
        vec!["get", "configmap", "k1", "-o", "jsonpath={.data}"],
        vec!["label", "configmap", "k1", "tier=a"],
        vec!["annotate", "configmap", "k1", "note=x"],
        vec!["label", "configmap", "k1", "tier=b"],
        vec![
            "patch",
            "configmap",
            "k1",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"b":"2"}}"#,
        ],
        vec![
            "patch",
            "configmap",
            "k1",
            "--type",
            "json",
            "-p",
            r#"[{"op":"remove","path":"/data/zzz"}]"#,
        ],
        vec!["apply", "-f", &changed],
        vec!["apply", "--server-side", "-f", &changed],
        vec![
            "apply",
            "--server-side",
            "--field-manager",
            "other",
            "-f",
            &other,
        ],
        vec!["diff", "-f", &other],
        vec!["get", "configmap", "missing"],
        vec!["get", "configmaps", "-l", "tier=a", "-o", "name"],
        vec!["apply", "-f", &list],
        vec!["apply", "-f", &dj],
        vec!["get", "datajobs"],
        vec!["get", "dj", "j1", "-o", "jsonpath={.spec.policy}"],
        vec!["apply", "-f", &dj_unknown],
        vec!["delete", "configmap", "k1"],
        vec!["delete", "configmap", "k1"],
        vec!["auth", "can-i", "create", "configmaps"],
        vec!["api-resources", "--api-group=policyhost.dev"],
        vec!["explain", "datajob.spec"],
    ];
    for args in commands {
        let mut all = args.clone();
        all.extend(["-n", &ns]);
        let output = k.output(&all).await;
        // The manifests' directory differs by server.
        let dir = k.path("").display().to_string();
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).replace(&dir, "<dir>/");
        let label = args
            .iter()
            .map(|a| a.rsplit('/').next().unwrap_or(a))
            .collect::<Vec<_>>()
            .join(" ");
        s.record(
            &label,
            u16::try_from(output.status.code().unwrap_or(-1)).unwrap_or(u16::MAX),
            json!({
                "stdout": lines(&text(&output.stdout)),
                "stderr": lines(&text(&output.stderr)),
            }),
        );
    }
    s.finish().await
}

/// The output's lines, normalised: whitespace runs become one space.
fn lines(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| {
            let words: Vec<String> = line.split_whitespace().map(word).collect();
            match words.first().map(String::as_str) {
                // kubectl diff's headers name temporary files and their times.
                Some("diff" | "---" | "+++") => words[0].clone(),
                _ => words.join(" "),
            }
        })
        .collect()
}

/// One word, normalised.
fn word(word: &str) -> String {
    let bare = word.trim_matches(|c: char| "\"',{}[]:".contains(c));
    if is_uid(bare) {
        word.replace(bare, "<uid>")
    } else if is_timestamp(bare) {
        word.replace(bare, "<time>")
    } else if is_age(bare) {
        "<age>".to_owned()
    } else if bare.chars().all(|c| c.is_ascii_digit()) && !bare.is_empty() && word.contains('"') {
        // resourceVersion: "123" (a quoted number: kubectl prints no others here).
        word.replace(bare, "<n>")
    } else {
        word.to_owned()
    }
}

fn is_uid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.chars().all(|c| c.is_ascii_hexdigit()))
}

fn is_timestamp(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() >= 20
        && bytes.get(4) == Some(&b'-')
        && bytes.get(10) == Some(&b'T')
        && text.ends_with('Z')
}

/// `5s`, `3m2s`, `2d`: kubectl's ages.
fn is_age(text: &str) -> bool {
    let mut digits = false;
    let mut any = false;
    for c in text.chars() {
        match c {
            '0'..='9' => digits = true,
            's' | 'm' | 'h' | 'd' | 'y' if digits => {
                digits = false;
                any = true;
            }
            _ => return false,
        }
    }
    any && !digits
}
