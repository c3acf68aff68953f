//! Request counters by verb, resource and client, so tests can assert what a client did
//! (for example that a reconcile issued no LIST).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

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
    pub(crate) fn record(&self, r: Request) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
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
        inner.log.push_back(r);
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
        assert_eq!(c.count("list", "pods"), 0);
    }
}
