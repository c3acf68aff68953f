//! Fair shares between policies: the workers, the guest-call threads and the
//! API write budget are divided between the policies that want them, in
//! proportion to each policy's share.
//!
//! Many teams' policies run on one host. Without this, whoever queues first
//! holds everything: 100 DataJobs of a policy whose every call runs to its
//! deadline would take every worker and every guest-call thread, and
//! another team's DataJobs would wait behind all of them.
//!
//! # How it is divided
//!
//! Each policy is a [`Tenant`]: its name and its [`Share`] (from the
//! `share` key of its ConfigMap, default 1, clamped to the host's
//! `--max-share`). Three places hand out something scarce, and all three
//! choose whom to serve next with one rule ([`Ledger`]):
//!
//! - the work queue ([`crate::queue::WorkQueue`]) keeps one sub-queue per
//!   policy and, when a worker asks, serves the policy that holds the fewest
//!   workers per unit of share;
//! - the guest-call [`Gate`] in front of the call pool admits as many calls
//!   as there are threads, choosing the same way among waiting callers;
//! - the API write budget ([`crate::throttle`]) puts a one-slot [`Gate`] in
//!   front of the token bucket, so tokens go to waiting writers in
//!   proportion to their shares.
//!
//! # Guarantees
//! - **Work conserving**: nothing is held back while it is free; a policy
//!   alone on an idle host gets every worker, thread and token.
//! - **Weighted**: while several policies wait, each holds (or is granted)
//!   in proportion to its share.
//! - **No starvation**: a waiting policy is served at the latest when the
//!   policies ahead of it in virtual time have been served once per share,
//!   so a share of 1 beside a share of 1000 still moves.
//!
//! Publication (loads, pulls, the compile slot and budget) is divided the
//! same way between teams rather than policies ([`Teams`]): a team of
//! fifty policies publishes as fast as a team of one.
//!
//! # Caveats
//! Calls already running are not preempted: a policy that arrives while
//! another holds every thread waits for the first thread to free up (at
//! most one call deadline), then gets the next ones in turn.

mod gate;
mod ledger;
mod team;

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;

pub use gate::{Gate, Slot};
pub use ledger::Ledger;
pub use team::{Team, TeamError, Teams};

/// A policy's weight in every fair division; at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Share(NonZeroU32);

impl Share {
    /// The share of a policy that asks for none.
    pub const DEFAULT: Self = Self(NonZeroU32::MIN);

    /// A share of `weight`; `None` for 0.
    #[must_use]
    pub fn new(weight: u32) -> Option<Self> {
        NonZeroU32::new(weight).map(Self)
    }

    /// The weight.
    #[must_use]
    pub fn get(self) -> u32 {
        self.0.get()
    }
}

impl Default for Share {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl std::fmt::Display for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Who something is done for: a policy (by name) and its share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tenant {
    name: Arc<str>,
    share: Share,
}

impl Tenant {
    /// The policy `name` with `share`.
    #[must_use]
    pub fn new(name: impl Into<Arc<str>>, share: Share) -> Self {
        Self {
            name: name.into(),
            share,
        }
    }

    /// The host's own work, and the work of DataJobs whose policy is not in
    /// service: one tenant for all of it, so that naming many unknown
    /// policies cannot multiply a DataJob author's share.
    #[must_use]
    pub fn host() -> Self {
        Self::new("", Share::DEFAULT)
    }

    /// The policy's name (empty for [`Tenant::host`]).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The policy's share.
    #[must_use]
    pub fn share(&self) -> Share {
        self.share
    }

    pub(crate) fn key(&self) -> &Arc<str> {
        &self.name
    }
}

tokio::task_local! {
    /// The tenant the current task writes for (see [`writing_for`]).
    static WRITER: Tenant;
}

/// Runs `work` as `tenant`'s: the API writes it makes draw on that
/// tenant's part of the write budget.
///
/// A task-local rather than a request extension, because kube's `Api`
/// builds the requests. It reaches the write throttle through kube's
/// `tower::buffer::Buffer` because the throttle reads it in the response
/// future, which the caller's task polls, not in `Service::call`, which
/// runs on the buffer's worker task.
pub async fn writing_for<F: Future>(tenant: Tenant, work: F) -> F::Output {
    WRITER.scope(tenant, work).await
}

/// The tenant the current task writes for; [`Tenant::host`] outside
/// [`writing_for`].
#[must_use]
pub fn current_writer() -> Tenant {
    WRITER
        .try_with(Clone::clone)
        .unwrap_or_else(|_| Tenant::host())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_share_does_not_exist_and_the_default_is_one() {
        assert_eq!(Share::new(0), None);
        assert_eq!(Share::default().get(), 1);
        assert_eq!(Share::new(7).map(Share::get), Some(7));
    }

    #[tokio::test]
    async fn the_writer_is_the_host_outside_a_scope_and_the_tenant_inside() {
        assert_eq!(current_writer(), Tenant::host());
        let team = Tenant::new("fanout", Share::new(3).expect("non-zero"));
        let seen = writing_for(team.clone(), async { current_writer() }).await;
        assert_eq!(seen, team);
    }
}
