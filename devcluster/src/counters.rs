//! Request counters by verb, resource and client, so tests can assert what a client did
//! (for example that a reconcile issued no LIST), and a log of requests in the order
//! they arrived, with their arrival time (who wrote what, and when).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// How many individual requests the log keeps.
const LOG_CAP: usize = 100_000;

/// One API request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete` or `deletecollection`.
    pub verb: String,
    /// API group, "" for core.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
    /// Subresource (`status`), "" for the main resource.
    pub subresource: String,
    /// Namespace, "" when cluster-wide.
    pub namespace: String,
    /// Object name, "" for collections.
    pub name: String,
    /// The `User-Agent` header.
    pub user_agent: String,
    /// The bearer token or basic-auth user the client presented, "" when none.
    pub identity: String,
    /// Arrival order: 1 for the first request the server received, then 2, ...
    /// (set when recorded).
    pub seq: u64,
    /// Arrival time, microseconds since the Unix epoch (set when recorded).
    pub unix_micros: u64,
    /// The response's status code (201 when a write created the object), 0
    /// until answered; a watch is answered when its stream starts.
    pub code: u16,
    /// Whether it asked for a dry run (`dryRun=All`): checked and answered,
    /// never stored.
    pub dry_run: bool,
}

/// The counter key: a request without namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CounterKey {
    /// Verb.
    pub verb: String,
    /// API group.
    pub group: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource or "".
    pub subresource: String,
    /// `User-Agent`.
    pub user_agent: String,
    /// Identity or "".
    pub identity: String,
}

#[derive(Debug, Default)]
struct Inner {
    counts: BTreeMap<CounterKey, u64>,
    log: VecDeque<Request>,
    seq: u64,
}

/// Counters of API requests.
#[derive(Debug, Default)]
pub struct Counters {
    inner: Mutex<Inner>,
}

/// `pods` or `deployments.apps`: how resources are named in [`Counters::count`].
fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

impl Counters {
    /// Counts and logs `r`, stamping its arrival order and time; returns its `seq`.
    pub(crate) fn record(&self, mut r: Request) -> u64 {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.seq += 1;
        r.seq = inner.seq;
        r.unix_micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        let key = CounterKey {
            verb: r.verb.clone(),
            group: r.group.clone(),
            resource: r.resource.clone(),
            subresource: r.subresource.clone(),
            user_agent: r.user_agent.clone(),
            identity: r.identity.clone(),
        };
        *inner.counts.entry(key).or_default() += 1;
        if inner.log.len() == LOG_CAP {
            inner.log.pop_front();
        }
        let seq = r.seq;
        inner.log.push_back(r);
        seq
    }

    /// Records the status code the request `seq` was answered with.
    pub(crate) fn answered(&self, seq: u64, code: u16) {
        self.amend(seq, |r| r.code = code);
    }

    /// Records the name a create's body gave its object, as kube-apiserver's
    /// audit log does (a create's path names no object).
    pub(crate) fn created(&self, seq: u64, name: &str) {
        self.amend(seq, |r| {
            if r.name.is_empty() {
                name.clone_into(&mut r.name);
            }
        });
    }

    /// Changes the logged request `seq`, if it is still in the log.
    fn amend(&self, seq: u64, change: impl FnOnce(&mut Request)) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        // Recent requests are at the back, and the log is in `seq` order.
        if let Some(r) = inner.log.iter_mut().rev().find(|r| r.seq <= seq)
            && r.seq == seq
        {
            change(r);
        }
    }

    /// Requests with this verb on this resource (`pods`, `datajobs.policyhost.dev`,
    /// `pods/status`), from any client.
    pub fn count(&self, verb: &str, resource: &str) -> u64 {
        let (res, sub) = resource.split_once('/').unwrap_or((resource, ""));
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .counts
            .iter()
            .filter(|(k, _)| {
                k.verb == verb && qualified(&k.group, &k.resource) == res && k.subresource == sub
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// Every counter.
    pub fn snapshot(&self) -> Vec<(CounterKey, u64)> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.counts.iter().map(|(k, n)| (k.clone(), *n)).collect()
    }

    /// The most recent requests, oldest first (up to 100,000).
    pub fn requests(&self) -> Vec<Request> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.log.iter().cloned().collect()
    }

    /// Forgets everything counted so far.
    pub fn reset(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.counts.clear();
        inner.log.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(verb: &str, group: &str, resource: &str, sub: &str) -> Request {
        Request {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: String::new(),
            name: String::new(),
            user_agent: "test".into(),
            identity: String::new(),
            seq: 0,
            unix_micros: 0,
            code: 0,
            dry_run: false,
        }
    }

    #[test]
    fn counts_are_kept_per_verb_and_qualified_resource() {
        let c = Counters::default();
        c.record(req("list", "", "pods", ""));
        c.record(req("list", "", "pods", ""));
        c.record(req("patch", "apps", "deployments", "status"));
        assert_eq!(c.count("list", "pods"), 2);
        assert_eq!(c.count("patch", "deployments.apps/status"), 1);
        assert_eq!(c.count("patch", "deployments.apps"), 0);
        assert_eq!(c.requests().len(), 3);
        c.reset();
        assert!(c.requests().is_empty());
        assert_eq!(c.count("list", "pods"), 0);
    }

    #[test]
    fn requests_are_stamped_in_arrival_order() {
        let c = Counters::default();
        c.record(req("get", "", "pods", ""));
        c.record(req("patch", "", "pods", ""));
        let log = c.requests();
        assert_eq!(log.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2]);
        assert!(log[0].unix_micros > 1_600_000_000_000_000);
        assert!(log[0].unix_micros <= log[1].unix_micros);
        c.answered(2, 201);
        c.answered(7, 500);
        let codes: Vec<u16> = c.requests().iter().map(|r| r.code).collect();
        assert_eq!(codes, [0, 201], "unanswered is 0; unknown seq is ignored");
    }

    #[test]
    fn a_create_is_logged_with_the_name_its_body_gave() {
        let c = Counters::default();
        let create = c.record(req("create", "", "configmaps", ""));
        c.created(create, "settings");
        let mut named = req("get", "", "configmaps", "");
        named.name = "other".into();
        let get = c.record(named);
        c.created(get, "ignored");
        let names: Vec<String> = c.requests().into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["settings", "other"], "a name from the path stays");
    }
}
