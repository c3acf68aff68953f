//! Leader election on a `coordination.k8s.io/v1` Lease: one replica
//! reconciles and writes, the others keep their caches warm and wait.
//!
//! # Expected flow
//!
//! 1. Every replica builds an [`Elector`] (its own identity, the Lease's name
//!    and namespace, three durations) and a [`Leadership`] handle, and runs
//!    the elector next to its watches.
//! 2. A candidate reads the Lease every `retry_period`. It takes the Lease
//!    when nobody holds it, or when the holder has not renewed it for
//!    `leaseDurationSeconds` *as measured on the candidate's own clock since
//!    it first saw the current record* (client-go's rule: no comparison of
//!    timestamps written by another machine, so clock skew does not matter).
//!    Every write is an update with the `resourceVersion` it read, so two
//!    candidates cannot both win: the second gets 409 Conflict.
//! 3. The leader renews every `retry_period`. Each successful renewal extends
//!    its *write validity* to `start of that renewal + renew_deadline`.
//! 4. The leader stops leading when it sees another holder, or when the
//!    validity passes without a successful renewal (API server unreachable,
//!    process paused, ...). It becomes a candidate again; its caches stay warm.
//! 5. On a graceful stop the leader releases the Lease (empty holder), so a
//!    follower takes over at its next poll instead of after the lease duration.
//!
//! # Guarantees
//!
//! - **No write after the validity**: [`FenceLayer`] sits innermost in the
//!   operator's client and refuses every write request (any method but
//!   GET/HEAD/OPTIONS) unless [`Leadership::permits_writes`] holds at the
//!   moment the request is handed to the connection. The check compares the
//!   monotonic clock with the validity, so it closes on time even if the
//!   elector task itself is late.
//! - **No overlap with the next leader**: the validity is anchored at the
//!   *start* of the renewal that succeeded, which is before the API server
//!   stored it, which is before any follower observed it; a follower waits
//!   `lease_duration` from its observation. So the fence closes at least
//!   `lease_duration - renew_deadline` (5 s with the defaults) before any
//!   follower may take the Lease.
//!
//! # Caveats
//!
//! - A write handed to the connection just before the fence closes may reach
//!   the API server up to its network latency later; the margin
//!   `lease_duration - renew_deadline` is there for that, so keep it well
//!   above the API server's latency.
//! - The Lease API stores `leaseDurationSeconds` as whole seconds, so the
//!   lease duration is a whole number of seconds; the renew deadline and the
//!   retry period may be finer.

mod elector;
mod fence;
mod leadership;

use std::time::Duration;

pub use elector::Elector;
pub use fence::{Fence, FenceLayer, Fenced};
pub use leadership::{Leadership, Role};

/// How a replica takes part in the election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The Lease's name.
    pub lease_name: String,
    /// The Lease's namespace (the operator's own).
    pub namespace: String,
    /// This replica's identity, written as `holderIdentity` (the Pod name).
    pub identity: String,
    /// How long followers wait after the last renewal they saw before taking
    /// the Lease (whole seconds; the Lease stores seconds).
    pub lease_duration: Duration,
    /// How long the leader keeps writing without a successful renewal.
    pub renew_deadline: Duration,
    /// How often candidates try to take the Lease and the leader renews it.
    pub retry_period: Duration,
}

impl Config {
    /// client-go's defaults (15 s, 10 s, 2 s) for `identity` on `lease_name`
    /// in `namespace`.
    #[must_use]
    pub fn new(
        lease_name: impl Into<String>,
        namespace: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            lease_name: lease_name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Checks the durations' order: `retry_period < renew_deadline < lease_duration`,
    /// the lease duration in whole seconds, and a non-empty identity.
    pub fn validate(&self) -> Result<()> {
        if self.identity.is_empty() {
            return Err(Error::EmptyIdentity);
        }
        if self.lease_name.is_empty() || self.namespace.is_empty() {
            return Err(Error::NoLease);
        }
        if self.lease_duration.subsec_nanos() != 0
            || self.lease_duration.is_zero()
            || i32::try_from(self.lease_duration.as_secs()).is_err()
        {
            return Err(Error::LeaseDurationNotSeconds(self.lease_duration));
        }
        if self.retry_period.is_zero()
            || self.retry_period >= self.renew_deadline
            || self.renew_deadline >= self.lease_duration
        {
            return Err(Error::DurationOrder {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            });
        }
        Ok(())
    }

    /// `leaseDurationSeconds` as the Lease stores it.
    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// Why the election settings are unusable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The identity is empty: nobody could tell the holder.
    #[error("the leader election identity is empty (set --leader-identity or POD_NAME)")]
    EmptyIdentity,
    /// The Lease name or namespace is empty.
    #[error("the leader election Lease needs a name and a namespace")]
    NoLease,
    /// The lease duration is not a positive whole number of seconds.
    #[error("the lease duration must be a whole number of seconds, not {0:?}")]
    LeaseDurationNotSeconds(Duration),
    /// The durations are not ordered `retry_period < renew_deadline < lease_duration`.
    #[error(
        "leader election needs retry period < renew deadline < lease duration \
         (got {retry_period:?}, {renew_deadline:?}, {lease_duration:?})"
    )]
    DurationOrder {
        /// The lease duration.
        lease_duration: Duration,
        /// The renew deadline.
        renew_deadline: Duration,
        /// The retry period.
        retry_period: Duration,
    },
}

/// The result of checking election settings.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_order_is_enforced() {
        let config = Config::new("policyhost", "policyhost-system", "pod-a");
        assert_eq!(config.validate(), Ok(()));
        let bad = Config {
            renew_deadline: Duration::from_secs(15),
            ..config.clone()
        };
        assert!(matches!(bad.validate(), Err(Error::DurationOrder { .. })));
        let bad = Config {
            retry_period: Duration::from_secs(10),
            ..config.clone()
        };
        assert!(matches!(bad.validate(), Err(Error::DurationOrder { .. })));
        let bad = Config {
            lease_duration: Duration::from_millis(1500),
            ..config.clone()
        };
        assert_eq!(
            bad.validate(),
            Err(Error::LeaseDurationNotSeconds(Duration::from_millis(1500)))
        );
        let bad = Config {
            identity: String::new(),
            ..config
        };
        assert_eq!(bad.validate(), Err(Error::EmptyIdentity));
    }

    #[test]
    fn errors_say_what_to_change() {
        assert_eq!(
            Error::EmptyIdentity.to_string(),
            "the leader election identity is empty (set --leader-identity or POD_NAME)"
        );
        assert_eq!(
            Error::LeaseDurationNotSeconds(Duration::from_millis(1500)).to_string(),
            "the lease duration must be a whole number of seconds, not 1.5s"
        );
        assert_eq!(
            Error::DurationOrder {
                lease_duration: Duration::from_secs(2),
                renew_deadline: Duration::from_secs(3),
                retry_period: Duration::from_secs(1),
            }
            .to_string(),
            "leader election needs retry period < renew deadline < lease duration \
             (got 1s, 3s, 2s)"
        );
        assert_eq!(
            Error::NoLease.to_string(),
            "the leader election Lease needs a name and a namespace"
        );
    }
}
