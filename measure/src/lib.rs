//! What `policyhost policy bench` and every benchmark measure with, defined
//! once so that their figures mean the same thing: percentiles of samples,
//! a process's memory and CPU time, and the machine's load (Linux `/proc`).

use std::time::Duration;

/// The `q` quantile of `sorted` (ascending), by nearest rank: the smallest
/// sample such that at least a fraction `q` of the samples are at or below
/// it. `q` = 0.5 is the median, 1.0 the maximum; `None` without samples.
///
/// Nearest rank always answers with a measured sample, never an
/// interpolation between two.
#[must_use]
pub fn percentile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "a rank within the slice's length"
    )]
    let rank = (sorted.len() as f64 * q.clamp(0.0, 1.0)).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The `q` quantile of `sorted` durations, in milliseconds (`NaN` without
/// samples, which a table prints as such).
#[must_use]
pub fn percentile_ms(sorted: &[Duration], q: f64) -> f64 {
    percentile(sorted, q).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

/// Which process (or thread) to read: this one or another by pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// The calling process.
    This,
    /// The calling thread alone.
    ThisThread,
    /// Another process.
    Pid(u32),
}

impl Process {
    fn file(self, name: &str) -> Option<String> {
        let path = match self {
            Self::This => format!("/proc/self/{name}"),
            Self::ThisThread => format!("/proc/thread-self/{name}"),
            Self::Pid(pid) => format!("/proc/{pid}/{name}"),
        };
        std::fs::read_to_string(path).ok()
    }
}

/// A process's resident memory, now and at its peak.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Memory {
    /// `VmRSS`, MiB.
    pub rss_mib: f64,
    /// `VmHWM`, the peak RSS, MiB.
    pub peak_mib: f64,
}

/// The memory of `process`; `None` when it is gone (or not on Linux).
#[must_use]
pub fn memory(process: Process) -> Option<Memory> {
    let status = process.file("status")?;
    let mib = |field: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .map(|kb| kb / 1024.0)
    };
    Some(Memory {
        rss_mib: mib("VmRSS:")?,
        peak_mib: mib("VmHWM:")?,
    })
}

/// The fields of `/proc/<pid>/stat` after the command name, numbered as
/// in proc(5).
#[derive(Debug, Clone)]
pub struct Stat(Vec<String>);

impl Stat {
    /// `process`'s stat; `None` when it is gone (or not on Linux).
    #[must_use]
    pub fn of(process: Process) -> Option<Self> {
        let stat = process.file("stat")?;
        // The command name may hold spaces and parentheses: fields are
        // counted after its closing parenthesis, where field 3 (the state)
        // starts.
        let rest = stat.rsplit_once(')')?.1;
        Some(Self(rest.split_whitespace().map(str::to_owned).collect()))
    }

    /// Field `n` (3 is the state, 14 and 15 utime and stime, ...) as a number.
    #[must_use]
    pub fn field(&self, n: usize) -> Option<f64> {
        self.0.get(n.checked_sub(3)?)?.parse().ok()
    }
}

/// User + system CPU seconds `process` has used so far.
#[must_use]
pub fn cpu_seconds(process: Process) -> Option<f64> {
    let stat = Stat::of(process)?;
    // utime and stime, in clock ticks; Linux's USER_HZ is 100 on every
    // architecture it runs on.
    Some((stat.field(14)? + stat.field(15)?) / 100.0)
}

/// The machine's 1, 5 and 15 minute load averages: figures are only
/// comparable between runs on an equally busy machine.
#[must_use]
pub fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([fields.next()??, fields.next()??, fields.next()??])
}

/// The load averages as `/proc/loadavg` prints them, or `unknown`.
#[must_use]
pub fn load_average_text() -> String {
    load_average().map_or_else(
        || "unknown".to_owned(),
        |[one, five, fifteen]| format!("{one:.2} {five:.2} {fifteen:.2}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank_samples() {
        let samples: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&samples, 0.50), Some(50));
        assert_eq!(percentile(&samples, 0.99), Some(99));
        assert_eq!(percentile(&samples, 1.0), Some(100));
        assert_eq!(percentile(&samples, 0.0), Some(1));
        assert_eq!(percentile(&[7, 9], 0.5), Some(7));
        assert_eq!(percentile(&[7, 9], 0.51), Some(9));
        assert_eq!(percentile::<u32>(&[], 0.5), None);
        let durations = [Duration::from_millis(2), Duration::from_millis(4)];
        assert!((percentile_ms(&durations, 1.0) - 4.0).abs() < 1e-9);
        assert!(percentile_ms(&[], 0.5).is_nan());
    }

    #[test]
    fn this_process_has_memory_cpu_time_and_the_machine_a_load() {
        let memory = memory(Process::This).expect("Linux /proc");
        assert!(memory.rss_mib > 0.0 && memory.peak_mib >= memory.rss_mib);
        // Burn a little CPU so the counter cannot be zero by rounding.
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(100) {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        }
        std::hint::black_box(x);
        assert!(cpu_seconds(Process::This).expect("Linux /proc") > 0.0);
        assert!(cpu_seconds(Process::ThisThread).expect("Linux /proc") > 0.0);
        assert_eq!(memory_of_pid_zero(), None, "no process has pid 0 in /proc");
        assert!(load_average().is_some_and(|l| l.iter().all(|v| *v >= 0.0)));
        assert_eq!(load_average_text().split(' ').count(), 3);
    }

    fn memory_of_pid_zero() -> Option<Memory> {
        memory(Process::Pid(0))
    }
}
