//! Leader election flags, shared by `run` (on by default) and `dev` (off).

use std::time::Duration;

use clap::Args;
use policyhost::leader;

/// Leader election settings.
#[derive(Debug, Clone, Args)]
pub(crate) struct LeaderArgs {
    /// Take part in leader election on a Lease so that only one replica
    /// reconciles (default: on for `run`, off for `dev`); `--leader-elect=false`
    /// leads at once, alone.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    leader_elect: Option<bool>,
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
    #[arg(long, default_value = "15s", value_parser = parse_duration, value_name = "DURATION")]
    lease_duration: Duration,
    /// How long the leader keeps writing without a successful renewal.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    renew_deadline: Duration,
    /// How often the leader renews and followers try to take over.
    #[arg(long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    retry_period: Duration,
}

impl LeaderArgs {
    /// The election settings, `None` when election is off (`default` says
    /// whether it is on when the flag is not given).
    pub(crate) fn config(
        &self,
        default: bool,
        instance: &str,
        default_namespace: &str,
    ) -> Option<leader::Config> {
        if !self.leader_elect.unwrap_or(default) {
            return None;
        }
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
            .unwrap_or_else(|| format!("{instance}-leader"));
        Some(leader::Config {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
            ..leader::Config::new(lease_name, namespace, identity)
        })
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

/// `15s`, `500ms`, `2m`, `1h`, or a bare number of seconds.
pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration such as 15s, 500ms or 2m"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => {
            return Err(format!(
                "`{text}`: unknown unit `{unit}` (use ms, s, m or h)"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("`{text}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_go_style_units() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("3d").is_err());
        assert!(parse_duration("s").is_err());
    }
}
