//! An operator process's memory and CPU time over time, sampled every
//! 250 ms beside the machine's load, for the scale benchmarks' plots.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use policyhost_measure::{self as measure, Process as Measured};

/// One sample.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    /// Seconds since the process started.
    pub t: f64,
    /// `VmRSS`, MiB.
    pub rss_mib: f64,
    /// `VmHWM`, MiB.
    pub hwm_mib: f64,
    /// CPU time so far, seconds.
    pub cpu_s: f64,
    /// The machine's 1-minute load average.
    pub load: f64,
}

/// `VmRSS` and `VmHWM` of a process, in MiB.
pub fn memory_mib(pid: u32) -> Option<(f64, f64)> {
    measure::memory(Measured::Pid(pid)).map(|m| (m.rss_mib, m.peak_mib))
}

/// CPU time of a process so far, in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    measure::cpu_seconds(Measured::Pid(pid))
}

/// The 1-minute load average, `NaN` if unknown.
pub fn load_average() -> f64 {
    measure::load_average().map_or(f64::NAN, |[one, ..]| one)
}

/// Samples a process every 250 ms until it exits or the sampler is stopped.
pub struct Sampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    /// Starts sampling `pid`, which started at `started`.
    pub fn start(pid: u32, started: Instant) -> Self {
        let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
        let task = tokio::spawn({
            let samples = Arc::clone(&samples);
            async move {
                let mut tick = tokio::time::interval(Duration::from_millis(250));
                loop {
                    tick.tick().await;
                    let Some((rss_mib, hwm_mib)) = memory_mib(pid) else {
                        return;
                    };
                    let sample = Sample {
                        t: started.elapsed().as_secs_f64(),
                        rss_mib,
                        hwm_mib,
                        cpu_s: cpu_seconds(pid).unwrap_or(f64::NAN),
                        load: load_average(),
                    };
                    samples
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(sample);
                }
            }
        });
        Self { samples, task }
    }

    /// The samples so far.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops sampling; the samples taken.
    pub fn stop(self) -> Vec<Sample> {
        self.task.abort();
        self.samples()
    }
}
