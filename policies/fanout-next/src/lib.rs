//! A candidate of `fanout` as a team might write its next version: the same
//! answers, plus a ConfigMap `<job>-extra` for each DataJob labelled
//! [`EXTRA_LABEL`]. The shadow tests run it beside `fanout` and expect
//! exactly the labelled DataJobs to differ, at that child's JSON pointer.

use fanout::{Fanout, Params};
use policyhost_sdk::build::ConfigMap;
use policyhost_sdk::{Child, Cleanup, Context, Job, Policy, PolicyError, Reconcile};

/// The label that asks for the extra child.
pub const EXTRA_LABEL: &str = "policyhost.dev/test-extra";

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
    ) -> Result<Reconcile, PolicyError> {
        let mut result = Fanout::reconcile(job, params, children, ctx)?;
        if job.label(EXTRA_LABEL).is_some() {
            let extra = ConfigMap::new(format!("{}-extra", job.name))
                .data("from", "fanout-next")
                .build()
                .map_err(|error| PolicyError::Failed(error.to_string()))?;
            result.children.push(extra);
        }
        Ok(result)
    }

    fn cleanup(job: &Job, children: &[Child], ctx: &Context) -> Result<Cleanup, PolicyError> {
        Fanout::cleanup(job, children, ctx)
    }
}
