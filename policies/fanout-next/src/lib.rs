//! A candidate of `fanout` as a team might write its next version: the same
//! answers, plus a ConfigMap `<job>-extra` for each DataJob labelled
//! [`EXTRA_LABEL`]. The shadow tests run it beside `fanout` and expect
//! exactly the labelled DataJobs to differ, at that child's JSON pointer.
//!
//! A DataJob labelled [`RENAME_LABEL`] gets its workers' container named
//! `main`, not `worker`: a change the API server refuses for a Pod that
//! exists (a Pod's containers are immutable), which the shadow's dry run
//! must show.
//!
//! A DataJob labelled [`SECRET_LABEL`] also gets a Secret `<job>-token`
//! whose `data.token` is the acting version's digest reversed: two versions
//! of this policy differ in that value alone, which the shadow must never
//! show.

use fanout::{Fanout, Params};
use policyhost_sdk::build::ConfigMap;
use policyhost_sdk::{
    Child, Cleanup, Context, DesiredChild, Job, Policy, PolicyError, Reconcile, Result,
};

/// The label that asks for the extra child.
pub const EXTRA_LABEL: &str = "policyhost.dev/test-extra";
/// The label that asks for the renamed container.
pub const RENAME_LABEL: &str = "policyhost.dev/test-rename";
/// The label that asks for the Secret.
pub const SECRET_LABEL: &str = "policyhost.dev/test-secret";

/// `fanout`, and one more child where asked.
pub struct FanoutNext;

policyhost_sdk::export!(FanoutNext);

impl Policy for FanoutNext {
    type Params = Params;

    fn reconcile(
        job: &Job,
        params: Params,
        children: &[Child],
        ctx: &Context,
    ) -> Result<Reconcile> {
        let mut result = Fanout::reconcile(job, params, children, ctx)?;
        if job.label(RENAME_LABEL).is_some() {
            for pod in result.children.iter_mut().filter(|c| c.kind == "Pod") {
                pod.manifest = pod
                    .manifest
                    .replace(r#""name":"worker""#, r#""name":"main""#);
            }
        }
        if job.label(EXTRA_LABEL).is_some() {
            let extra = ConfigMap::new(format!("{}-extra", job.name))
                .data("from", "fanout-next")
                .build()
                .map_err(|error| PolicyError::Failed(error.to_string()))?;
            result.children.push(extra);
        }
        if job.label(SECRET_LABEL).is_some() {
            // A digest's 64 hex digits are valid base64 as they are.
            let name = format!("{}-token", job.name);
            let token: String = ctx.policy_digest.chars().rev().collect();
            let manifest = format!(
                r#"{{"apiVersion":"v1","kind":"Secret","metadata":{{"name":"{name}"}},"data":{{"token":"{token}"}}}}"#
            );
            result
                .children
                .push(DesiredChild::from_json("v1", "Secret", name, manifest));
        }
        Ok(result)
    }

    fn cleanup(job: &Job, children: &[Child], ctx: &Context) -> Result<Cleanup> {
        Fanout::cleanup(job, children, ctx)
    }
}
