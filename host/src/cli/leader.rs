//! Leader election flags, shared by `run` (on by default) and `dev` (off).

use clap::Args;
use policyhost::leader;

use super::duration::{self, DurationArg};

/// Leader election settings.
#[derive(Debug, Clone, Args)]
pub(crate) struct LeaderArgs {
    /// Take part in leader election on a Lease so that only one replica
    /// reconciles (default: on for `run`, off for `dev`); `--leader-elect=false`
    /// leads at once, alone.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    leader_elect: Option<bool>,
    /// Shard the DataJobs over the replicas instead of electing one leader:
    /// each replica holds a member Lease (`<lease name>-<identity>`, name
    /// default `<instance>-shard`) and serves about 1/N of them; the lease
    /// flags below apply to the member Leases.
    #[arg(long)]
    shards: bool,
    /// Name of the Lease; default: `<instance>-leader`.
    #[arg(long, value_name = "NAME")]
    lease_name: Option<String>,
    /// Namespace of the Lease; default: `$POD_NAMESPACE` (downward API), else
    /// the kubeconfig context's namespace.
    #[arg(long, value_name = "NS")]
    lease_namespace: Option<String>,
    /// This replica's identity on the Lease; default: `$POD_NAME` (downward
    /// API), else `<hostname>-<pid>`.
    #[arg(long, value_name = "ID")]
    leader_identity: Option<String>,
    /// How long followers wait after the leader's last renewal before taking
    /// over (whole seconds).
    #[arg(long, default_value = "15s", value_parser = duration::seconds_before, value_name = "DURATION")]
    lease_duration: DurationArg,
    /// How long the leader keeps writing without a successful renewal.
    #[arg(long, default_value = "10s", value_parser = duration::seconds_before, value_name = "DURATION")]
    renew_deadline: DurationArg,
    /// How often the leader renews and followers try to take over.
    #[arg(long, default_value = "2s", value_parser = duration::seconds_before, value_name = "DURATION")]
    retry_period: DurationArg,
}

impl LeaderArgs {
    /// The election settings and the shards' (one of them at most): `None`
    /// when election is off (`default` says whether it is on when the
    /// flag is not given).
    pub(crate) fn coordination(
        &self,
        default: bool,
        instance: &str,
        default_namespace: &str,
    ) -> (Option<leader::Config>, Option<leader::Config>) {
        if self.shards {
            let suffix = "shard";
            return (None, Some(self.lease(instance, suffix, default_namespace)));
        }
        if !self.leader_elect.unwrap_or(default) {
            return (None, None);
        }
        (
            Some(self.lease(instance, "leader", default_namespace)),
            None,
        )
    }

    /// The Lease settings, the name defaulting to `<instance>-<suffix>`.
    fn lease(&self, instance: &str, suffix: &str, default_namespace: &str) -> leader::Config {
        let namespace = self
            .lease_namespace
            .clone()
            .or_else(|| env_var("POD_NAMESPACE"))
            .unwrap_or_else(|| default_namespace.to_owned());
        let identity = self
            .leader_identity
            .clone()
            .or_else(|| env_var("POD_NAME"))
            .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
        let lease_name = self
            .lease_name
            .clone()
            .unwrap_or_else(|| format!("{instance}-{suffix}"));
        leader::Config {
            lease_duration: self.lease_duration.0,
            renew_deadline: self.renew_deadline.0,
            retry_period: self.retry_period.0,
            ..leader::Config::new(lease_name, namespace, identity)
        }
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn hostname() -> String {
    env_var("HOSTNAME")
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "policyhost".to_owned())
}
