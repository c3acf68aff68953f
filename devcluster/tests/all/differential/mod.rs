//! devcluster held to the real API server: the same scenarios, request by
//! request, against a fresh devcluster and the cluster
//! `POLICYHOST_TEST_KUBECONFIG` names (`cargo xtask test` runs them on the
//! control plane it builds), and every answer compared: status codes, bodies
//! (uids, resourceVersions, timestamps and generated names normalised), watch
//! events in order, and kubectl's output.
//!
//! A difference fails the test unless [`known`] lists it with its reason;
//! devcluster's README lists the same. Each test prints how many answers and
//! fields it compared and how many differed.

mod compare;
mod kubectl;
mod scenarios;
mod session;

use std::path::PathBuf;

use compare::{Difference, Report};

/// The real cluster's kubeconfig, or why these tests cannot run.
fn real_kubeconfig() -> PathBuf {
    std::env::var_os("POLICYHOST_TEST_KUBECONFIG")
        .map(PathBuf::from)
        .expect(
            "POLICYHOST_TEST_KUBECONFIG names no cluster: these tests compare devcluster \
             with a real API server (`cargo xtask test` brings one up)",
        )
}

/// A difference between the servers that devcluster keeps, with its reason.
pub struct Known {
    /// The scenario, and the exchange's label within it (`*`: any).
    pub scenario: &'static str,
    pub label: &'static str,
    /// The JSON pointer under which it lies (a prefix; `*` matches any
    /// one segment).
    pub pointer: &'static str,
    pub reason: &'static str,
}

impl Known {
    fn covers(&self, difference: &Difference) -> bool {
        let matches = |pattern: &str, value: &str| pattern == "*" || pattern == value;
        if !matches(self.scenario, &difference.scenario) || !matches(self.label, &difference.label)
        {
            return false;
        }
        let pattern: Vec<&str> = self.pointer.split('/').skip(1).collect();
        let pointer: Vec<&str> = difference.pointer.split('/').skip(1).collect();
        pattern.len() <= pointer.len()
            && pattern
                .iter()
                .zip(&pointer)
                .all(|(pattern, segment)| matches(pattern, segment))
    }
}

/// The differences devcluster keeps (devcluster's README, "Known
/// differences from kube-apiserver").
pub fn known() -> &'static [Known] {
    &[]
}

/// Fails the test with every difference no [`Known`] covers; prints the
/// counts, and how many differences each known one accounts for.
fn assert_no_unknown(what: &str, report: &Report) {
    let mut covered = vec![0_usize; known().len()];
    let mut unknown = Vec::new();
    for difference in &report.differences {
        match known().iter().position(|k| k.covers(difference)) {
            Some(i) => covered[i] += 1,
            None => unknown.push(difference.to_string()),
        }
    }
    println!(
        "{what}: {} answers and {} fields compared; {} differ ({} known, {} unknown)",
        report.exchanges,
        report.fields,
        report.differences.len(),
        report.differences.len() - unknown.len(),
        unknown.len()
    );
    for (k, count) in known().iter().zip(covered).filter(|(_, n)| *n > 0) {
        println!("  {count:>4} known: {}", k.reason);
    }
    assert!(
        unknown.is_empty(),
        "devcluster answers differently from the real API server:\n{}",
        unknown.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server (POLICYHOST_TEST_KUBECONFIG); `cargo xtask test` runs it"]
async fn devcluster_answers_every_request_as_the_real_api_server_does() {
    let real = real_kubeconfig();
    let report = scenarios::compare_all(&real).await;
    assert_no_unknown("API requests", &report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real API server (POLICYHOST_TEST_KUBECONFIG); `cargo xtask test` runs it"]
async fn kubectl_prints_the_same_against_devcluster_and_the_real_api_server() {
    let real = real_kubeconfig();
    let report = kubectl::compare_all(&real).await;
    assert_no_unknown("kubectl sessions", &report);
}
