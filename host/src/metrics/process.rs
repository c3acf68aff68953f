//! The `process_*` metrics Prometheus' clients export on Linux (the Go
//! client's process collector, which controller-runtime registers), read
//! from `/proc/self` at each scrape: the resource panels of the standard
//! dashboards plot CPU and resident memory from them.

use std::fmt;

use policyhost_measure::{Process, Stat};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Linux's `USER_HZ`, the unit of the times in `/proc/<pid>/stat`.
const TICKS_PER_SECOND: f64 = 100.0;

/// Encodes this process's CPU, memory, file descriptors, start time and
/// network traffic; a figure `/proc` does not give is left out.
#[derive(Debug)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let stat = Stat::of(Process::This);
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let gauges = [
            (
                "process_open_fds",
                "Number of open file descriptors.",
                open_fds(),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                limit(&limits, "Max open files"),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                stat.as_ref().and_then(|s| s.field(23)),
            ),
            (
                "process_virtual_memory_max_bytes",
                "Maximum amount of virtual memory available in bytes.",
                limit(&limits, "Max address space"),
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                policyhost_measure::memory(Process::This).map(|m| m.rss_mib * 1024.0 * 1024.0),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                stat.as_ref().and_then(start_time),
            ),
        ];
        let (received, sent) = network().unzip();
        let counters = [
            (
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                policyhost_measure::cpu_seconds(Process::This),
            ),
            (
                "process_network_receive_bytes",
                "Number of bytes received by the process over the network.",
                received,
            ),
            (
                "process_network_transmit_bytes",
                "Number of bytes sent by the process over the network.",
                sent,
            ),
        ];
        for (name, help, value) in counters {
            if let Some(value) = value {
                encode(&mut encoder, name, help, ConstCounter::new(value))?;
            }
        }
        for (name, help, value) in gauges {
            if let Some(value) = value {
                encode(&mut encoder, name, help, ConstGauge::new(value))?;
            }
        }
        Ok(())
    }
}

pub(super) fn encode(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric: impl EncodeMetric,
) -> Result<(), fmt::Error> {
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

/// Seconds since the epoch that `stat`'s process started: the machine's
/// boot time plus field 22, the start after boot in ticks.
fn start_time(stat: &Stat) -> Option<f64> {
    let boot: f64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(boot + stat.field(22)? / TICKS_PER_SECOND)
}

#[allow(clippy::cast_precision_loss)] // descriptors are far below 2^52
fn open_fds() -> Option<f64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as f64)
}

/// The soft limit `name` of `/proc/self/limits`; `unlimited` is the
/// largest value, as the Go client reports it.
fn limit(limits: &str, name: &str) -> Option<f64> {
    let soft = limits
        .lines()
        .find_map(|line| line.strip_prefix(name))?
        .split_whitespace()
        .next()?;
    #[allow(clippy::cast_precision_loss)] // the Go client's float of the same
    let unlimited = u64::MAX as f64;
    if soft == "unlimited" {
        Some(unlimited)
    } else {
        soft.parse().ok()
    }
}

/// Bytes received and sent by the process's network namespace (`IpExt`'s
/// `InOctets` and `OutOctets` of `/proc/self/net/netstat`), as the Go
/// client reads them.
fn network() -> Option<(f64, f64)> {
    let netstat = std::fs::read_to_string("/proc/self/net/netstat").ok()?;
    let mut ip_ext = netstat
        .lines()
        .filter_map(|line| line.strip_prefix("IpExt:"));
    let names: Vec<&str> = ip_ext.next()?.split_whitespace().collect();
    let values: Vec<&str> = ip_ext.next()?.split_whitespace().collect();
    let value = |name: &str| -> Option<f64> {
        let at = names.iter().position(|n| *n == name)?;
        values.get(at)?.parse().ok()
    };
    Some((value("InOctets")?, value("OutOctets")?))
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    use super::*;

    #[test]
    fn this_process_is_described_from_proc() {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut text = String::new();
        encode(&mut text, &registry).expect("encoded");
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|line| line.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing from\n{text}"))
                .parse()
                .expect("a number")
        };
        assert!(value("process_resident_memory_bytes") > 1e6, "{text}");
        assert!(value("process_open_fds") >= 3.0, "{text}");
        assert!(
            value("process_max_fds") >= value("process_open_fds"),
            "{text}"
        );
        assert!(value("process_cpu_seconds_total") >= 0.0, "{text}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch")
            .as_secs_f64();
        let started = value("process_start_time_seconds");
        assert!(started <= now + 1.0 && started > now - 86_400.0, "{text}");
        assert!(
            text.contains("# TYPE process_cpu_seconds counter"),
            "{text}"
        );
    }
}
