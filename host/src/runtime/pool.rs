//! A bounded pool of threads that run guest calls, off the async runtime.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use tokio::sync::{Semaphore, oneshot};

type Job = Box<dyn FnOnce() + Send>;

/// Jobs admitted per thread: the one it runs and one waiting.
const QUEUED_PER_THREAD: usize = 2;

/// `threads` dedicated OS threads. At most `threads` jobs run and as many
/// more wait in the queue, so a thread that finishes a call finds the next
/// one instead of parking until the async side hands it over; further
/// submitters wait (asynchronously) for a slot.
pub(crate) struct Pool {
    sender: Mutex<Option<mpsc::Sender<Job>>>,
    permits: Arc<Semaphore>,
    threads: Vec<JoinHandle<()>>,
}

/// The pool was shut down before the job ran.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the guest call pool is shut down")]
pub(crate) struct Closed;

impl Pool {
    pub(crate) fn new(threads: usize) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        let handles = (0..threads)
            .map(|i| {
                let receiver = Arc::clone(&receiver);
                std::thread::Builder::new()
                    .name(format!("policyhost-guest-{i}"))
                    .spawn(move || {
                        loop {
                            let job = receiver
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .recv();
                            match job {
                                Ok(job) => job(),
                                Err(_) => break,
                            }
                        }
                    })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Self {
            sender: Mutex::new(Some(sender)),
            permits: Arc::new(Semaphore::new(threads * QUEUED_PER_THREAD)),
            threads: handles,
        })
    }

    /// Runs `job` on a pool thread and waits for its result.
    pub(crate) async fn run<R: Send + 'static>(
        &self,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, Closed> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| Closed)?;
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            let result = job();
            drop(permit);
            let _ = tx.send(result);
        });
        self.sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .ok_or(Closed)?
            .send(job)
            .map_err(|_| Closed)?;
        rx.await.map_err(|_| Closed)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.permits.close();
        self.sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jobs_run_on_pool_threads_with_bounded_concurrency() {
        let pool = Arc::new(Pool::new(2).unwrap());
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (pool, running, peak) = (pool.clone(), running.clone(), peak.clone());
                tokio::spawn(async move {
                    pool.run(move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        running.fetch_sub(1, Ordering::SeqCst);
                        std::thread::current().name().map(str::to_owned)
                    })
                    .await
                })
            })
            .collect();
        for task in tasks {
            let name = task.await.unwrap().unwrap().unwrap();
            assert!(name.starts_with("policyhost-guest-"), "{name}");
        }
        assert!(peak.load(Ordering::SeqCst) <= 2);
    }
}
