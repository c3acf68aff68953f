//! The API requests a cluster answered, for the tests that count them:
//! devcluster's own request log, or on a real control plane the API server's
//! audit log (its path in `POLICYHOST_TEST_AUDIT_LOG`, which `cargo xtask
//! test` sets; the policy logs every request at the `Metadata` level).
//!
//! Both give [`Request`]s in arrival order. From the audit log a watch is
//! the event its stream started with, every other request the event of its
//! completed response; the identity is the authenticated user. Only resource
//! requests count, as in devcluster's log.

use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::PathBuf;

use devcluster::DevCluster;
pub use devcluster::counters::Request;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use serde_json::Value;

/// Where the requests are read from.
pub enum RequestLog<'a> {
    /// The in-process devcluster's log.
    Dev(&'a DevCluster),
    /// The real API server's audit log.
    Audit(PathBuf),
}

/// A place in the log: what came after it is [`RequestLog::since`] it.
#[derive(Debug, Clone, Copy)]
pub struct Mark(u64);

impl RequestLog<'_> {
    /// The log of the real control plane, if the tests run against one with
    /// an audit log.
    pub fn audit() -> Option<Self> {
        std::env::var_os("POLICYHOST_TEST_AUDIT_LOG").map(|path| Self::Audit(path.into()))
    }

    /// The end of the log now.
    pub fn mark(&self) -> Mark {
        match self {
            Self::Dev(cluster) => Mark(cluster.counters().requests().len() as u64),
            Self::Audit(path) => Mark(std::fs::metadata(path).map_or(0, |m| m.len())),
        }
    }

    /// Every request answered so far.
    pub fn all(&self) -> Vec<Request> {
        self.since(Mark(0))
    }

    /// The requests answered after `mark`.
    pub fn since(&self, mark: Mark) -> Vec<Request> {
        match self {
            Self::Dev(cluster) => {
                let all = cluster.counters().requests();
                let from = usize::try_from(mark.0).unwrap_or(usize::MAX).min(all.len());
                all[from..].to_vec()
            }
            Self::Audit(path) => audit_since(path, mark.0),
        }
    }

    /// The requests an operator (any `policyhost/…` user agent) made in
    /// `namespace` after `mark`: on a shared real cluster, other tests'
    /// operators work in other namespaces.
    pub fn operator_since(&self, mark: Mark, namespace: &str) -> Vec<Request> {
        self.since(mark)
            .into_iter()
            .filter(|r| r.user_agent.starts_with("policyhost/") && r.namespace == namespace)
            .collect()
    }
}

fn audit_since(path: &PathBuf, offset: u64) -> Vec<Request> {
    let mut file = std::fs::File::open(path)
        .unwrap_or_else(|e| panic!("open the audit log {}: {e}", path.display()));
    file.seek(SeekFrom::Start(offset))
        .expect("seek in the audit log");
    BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_str::<Value>(&line).ok())
        .filter_map(|event| request(&event))
        .zip(1..)
        .map(|(request, seq)| Request { seq, ..request })
        .collect()
}

/// The request an audit event records, if it is the one event counted for it.
fn request(event: &Value) -> Option<Request> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let verb = text(&event["verb"]);
    let counted = match event["stage"].as_str()? {
        "ResponseStarted" => verb == "watch",
        "ResponseComplete" => verb != "watch",
        _ => false,
    };
    // Non-resource requests (discovery, `/version`) have no object: devcluster
    // does not count them either.
    let object = event.get("objectRef")?;
    if !counted {
        return None;
    }
    let received: Option<MicroTime> =
        serde_json::from_value(event["requestReceivedTimestamp"].clone()).ok();
    Some(Request {
        verb,
        group: text(&object["apiGroup"]),
        resource: text(&object["resource"]),
        subresource: text(&object["subresource"]),
        namespace: text(&object["namespace"]),
        name: text(&object["name"]),
        user_agent: text(&event["userAgent"]),
        identity: text(&event["user"]["username"]),
        seq: 0,
        unix_micros: received
            .and_then(|t| u64::try_from(t.0.as_microsecond()).ok())
            .unwrap_or_default(),
        code: event["responseStatus"]["code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or_default(),
        dry_run: event["requestURI"]
            .as_str()
            .and_then(|uri| uri.split_once('?'))
            .is_some_and(|(_, query)| query.split('&').any(|pair| pair == "dryRun=All")),
    })
}
