//! A bounded pool of threads that run guest calls, off the async runtime,
//! with a guard that never lets a call hold its thread past its bound.
//!
//! # Guarantees
//!
//! A job run with a bound ([`Pool::run`] with `Some(bound)`) is waited for at
//! most `bound` from the moment a thread starts it. If it is still running
//! then (a host function blocked: nothing the sandbox links should, see
//! `wasi.rs`), the caller gets [`Error::Overran`] at once, and the pool
//! starts a new thread in its place, logs a warning and counts it
//! ([`Pool::replaced`]): the other calls keep their threads. The overrunning
//! thread is abandoned: it exits when (if ever) its job returns, and its
//! result is dropped.
//!
//! # Caveats
//!
//! An OS thread cannot be killed: an abandoned thread lives on until its job
//! returns. The guard only makes sure it no longer counts as capacity.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// What a thread does with a job: run it, given the thread's id.
type Job = Box<dyn FnOnce(usize) -> After + Send>;

/// What the thread does after a job.
enum After {
    /// Take the next job.
    Continue,
    /// Exit: a new thread has taken this one's place.
    Exit,
}

/// Jobs admitted per thread: the one it runs and one waiting.
const QUEUED_PER_THREAD: usize = 2;

/// `threads` dedicated OS threads. At most `threads` jobs run and as many
/// more wait in the queue, so a thread that finishes a call finds the next
/// one instead of parking until the async side hands it over; further
/// submitters wait (asynchronously) for a slot.
pub(crate) struct Pool {
    sender: Mutex<Option<mpsc::Sender<Job>>>,
    receiver: Arc<Mutex<mpsc::Receiver<Job>>>,
    permits: Arc<Semaphore>,
    workers: Mutex<Workers>,
}

/// The pool's live threads, by id.
struct Workers {
    handles: Vec<(usize, JoinHandle<()>)>,
    next_id: usize,
    replaced: u64,
}

/// Why a job gave no result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Error {
    /// The pool was shut down before the job ran.
    #[error("the guest call pool is shut down")]
    Closed,
    /// The job still ran when its bound was up; its thread was replaced.
    #[error("the guest call held its thread past {} ms; the thread was replaced", bound.as_millis())]
    Overran {
        /// The bound the job was run with.
        bound: Duration,
    },
}

/// Where a job and its waiter meet: one allocation per job, like the
/// channel it stands for.
struct Handoff<R> {
    stage: Mutex<Stage<R>>,
    changed: Notify,
}

enum Stage<R> {
    /// In the queue; holds the job's admission.
    Queued(OwnedSemaphorePermit),
    /// On thread `worker` since `since`; still holds the admission.
    Running {
        since: std::time::Instant,
        worker: usize,
        _permit: OwnedSemaphorePermit,
    },
    /// Finished; the result waits for its caller.
    Done(R),
    /// Handed to the caller.
    Taken,
    /// The caller stopped waiting for an overrunning job.
    Abandoned,
    /// The job was dropped without running (the pool shut down).
    Dropped,
}

impl<R> Handoff<R> {
    fn stage(&self) -> MutexGuard<'_, Stage<R>> {
        self.stage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the result if there is one (or learns there will be none).
    fn take(&self) -> Option<Result<R, Error>> {
        let mut stage = self.stage();
        match std::mem::replace(&mut *stage, Stage::Taken) {
            Stage::Done(result) => Some(Ok(result)),
            Stage::Dropped => Some(Err(Error::Closed)),
            other => {
                *stage = other;
                None
            }
        }
    }

    /// When and where the job started, once it has.
    fn started(&self) -> Option<(std::time::Instant, usize)> {
        match &*self.stage() {
            Stage::Running { since, worker, .. } => Some((*since, *worker)),
            _ => None,
        }
    }
}

/// The job's end of the handoff: reports a job dropped unrun.
struct Reply<R>(Arc<Handoff<R>>);

impl<R> Reply<R> {
    fn start(&self, worker: usize) {
        let mut stage = self.0.stage();
        if let Stage::Queued(permit) = std::mem::replace(&mut *stage, Stage::Taken) {
            *stage = Stage::Running {
                since: std::time::Instant::now(),
                worker,
                _permit: permit,
            };
        }
        drop(stage);
        self.0.changed.notify_one();
    }

    fn finish(&self, result: R) -> After {
        let mut stage = self.0.stage();
        if matches!(*stage, Stage::Abandoned) {
            return After::Exit;
        }
        // Dropping the running stage releases the admission.
        *stage = Stage::Done(result);
        drop(stage);
        self.0.changed.notify_one();
        After::Continue
    }
}

impl<R> Drop for Reply<R> {
    fn drop(&mut self) {
        let mut stage = self.0.stage();
        if matches!(*stage, Stage::Queued(_) | Stage::Running { .. }) {
            *stage = Stage::Dropped;
            drop(stage);
            self.0.changed.notify_one();
        }
    }
}

impl Pool {
    pub(crate) fn new(threads: usize) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let (sender, receiver) = mpsc::channel::<Job>();
        let pool = Self {
            sender: Mutex::new(Some(sender)),
            receiver: Arc::new(Mutex::new(receiver)),
            permits: Arc::new(Semaphore::new(threads * QUEUED_PER_THREAD)),
            workers: Mutex::new(Workers {
                handles: Vec::with_capacity(threads),
                next_id: 0,
                replaced: 0,
            }),
        };
        {
            let mut workers = pool.workers();
            for _ in 0..threads {
                pool.spawn(&mut workers)?;
            }
        }
        Ok(pool)
    }

    fn workers(&self) -> MutexGuard<'_, Workers> {
        self.workers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts one more thread.
    fn spawn(&self, workers: &mut Workers) -> std::io::Result<()> {
        let id = workers.next_id;
        let receiver = Arc::clone(&self.receiver);
        let handle = std::thread::Builder::new()
            .name(format!("policyhost-guest-{id}"))
            .spawn(move || {
                loop {
                    let job = receiver
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .recv();
                    match job {
                        Ok(job) => match job(id) {
                            After::Continue => {}
                            After::Exit => break,
                        },
                        Err(_) => break,
                    }
                }
            })?;
        workers.next_id += 1;
        workers.handles.push((id, handle));
        Ok(())
    }

    /// Puts a new thread in the place of `worker`, whose job overran.
    fn replace(&self, worker: usize, bound: Duration) {
        let mut workers = self.workers();
        // Dropping the handle detaches the thread: nobody waits for it.
        workers.handles.retain(|(id, _)| *id != worker);
        workers.replaced += 1;
        let spawned = self.spawn(&mut workers);
        drop(workers);
        match spawned {
            Ok(()) => tracing::warn!(
                thread = %format!("policyhost-guest-{worker}"),
                bound_ms = bound.as_millis(),
                "a guest call held its thread past its deadline; the thread is abandoned and replaced"
            ),
            Err(error) => tracing::error!(
                thread = %format!("policyhost-guest-{worker}"),
                %error,
                "a guest call held its thread past its deadline; no thread could replace it"
            ),
        }
    }

    /// Threads replaced so far because a job overran its bound.
    pub(crate) fn replaced(&self) -> u64 {
        self.workers().replaced
    }

    /// Runs `job` on a pool thread and waits for its result, or, with a
    /// `bound`, at most that long from the moment a thread starts it.
    pub(crate) async fn run<R: Send + 'static>(
        &self,
        bound: Option<Duration>,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, Error> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| Error::Closed)?;
        let handoff = Arc::new(Handoff {
            stage: Mutex::new(Stage::Queued(permit)),
            changed: Notify::new(),
        });
        let reply = Reply(Arc::clone(&handoff));
        // The job runs in the caller's span: a call's span is a child of
        // its pass's.
        let span = tracing::Span::current();
        let job: Job = Box::new(move |worker| {
            reply.start(worker);
            let result = span.in_scope(job);
            reply.finish(result)
        });
        self.sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .ok_or(Error::Closed)?
            .send(job)
            .map_err(|_| Error::Closed)?;
        // `notify_one` keeps a wake-up for a waiter that is not waiting yet,
        // so checking and then waiting loses none.
        let Some(bound) = bound else {
            return loop {
                if let Some(result) = handoff.take() {
                    break result;
                }
                handoff.changed.notified().await;
            };
        };
        let (since, worker) = loop {
            if let Some(result) = handoff.take() {
                return result;
            }
            if let Some(started) = handoff.started() {
                break started;
            }
            handoff.changed.notified().await;
        };
        let until = Instant::from_std(since) + bound;
        loop {
            if let Some(result) = handoff.take() {
                return result;
            }
            if tokio::time::timeout_at(until, handoff.changed.notified())
                .await
                .is_err()
            {
                break;
            }
        }
        {
            let mut stage = handoff.stage();
            if let Stage::Done(result) = std::mem::replace(&mut *stage, Stage::Abandoned) {
                *stage = Stage::Taken;
                return Ok(result);
            }
            // Dropping the running stage gives its admission back.
        }
        self.replace(worker, bound);
        Err(Error::Overran { bound })
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.permits.close();
        self.sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let handles = std::mem::take(&mut self.workers().handles);
        // The last `Runtime` can be dropped by a job on one of these threads
        // (a call's closure holds a clone): that thread finishes by itself,
        // and joining it from itself would fail.
        let current = std::thread::current().id();
        for (_, thread) in handles {
            if thread.thread().id() != current {
                let _ = thread.join();
            }
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
            .map(|i| {
                let (pool, running, peak) = (pool.clone(), running.clone(), peak.clone());
                let bound = (i % 2 == 0).then_some(Duration::from_secs(30));
                tokio::spawn(async move {
                    pool.run(bound, move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(5));
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
        assert_eq!(pool.replaced(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_that_blocks_past_its_bound_is_abandoned_and_its_thread_replaced() {
        let pool = Pool::new(1).unwrap();
        let bound = Duration::from_millis(100);
        let (release, blocked) = mpsc::channel::<()>();
        let (exited_tx, exited) = std::sync::mpsc::channel::<String>();
        let started = std::time::Instant::now();
        let outcome = pool
            .run(Some(bound), move || {
                // Blocks natively, as a host function that never returns would.
                let _ = blocked.recv();
                let name = std::thread::current().name().unwrap_or_default().to_owned();
                let _ = exited_tx.send(name);
                "late"
            })
            .await;
        let waited = started.elapsed();
        assert_eq!(outcome, Err(Error::Overran { bound }));
        assert!(waited >= bound, "gave up after {waited:?}");
        assert!(
            waited < bound + Duration::from_millis(50),
            "gave up after {waited:?}"
        );
        assert_eq!(pool.replaced(), 1);
        // The only thread is stuck, yet the next job runs: on its replacement.
        let name = pool
            .run(Some(bound), || {
                std::thread::current().name().map(str::to_owned)
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(name, "policyhost-guest-1");
        // Released, the abandoned thread finishes its job and exits instead
        // of taking more work; the pool keeps one thread.
        release.send(()).unwrap();
        assert_eq!(
            exited.recv_timeout(Duration::from_secs(10)).unwrap(),
            "policyhost-guest-0"
        );
        for _ in 0..4 {
            let name = pool
                .run(None, || std::thread::current().name().map(str::to_owned))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(name, "policyhost-guest-1");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_bound_counts_from_the_start_of_the_job_not_from_its_queueing() {
        let pool = Arc::new(Pool::new(1).unwrap());
        let bound = Duration::from_millis(300);
        let first = {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move {
                pool.run(Some(bound), || {
                    std::thread::sleep(Duration::from_millis(200))
                })
                .await
            })
        };
        // Queued behind the first for ~200 ms, then runs 200 ms: 400 ms after
        // submission but within its bound of running time.
        let second = pool
            .run(Some(bound), || {
                std::thread::sleep(Duration::from_millis(200))
            })
            .await;
        assert_eq!(first.await.unwrap(), Ok(()));
        assert_eq!(second, Ok(()));
        assert_eq!(pool.replaced(), 0);
    }
}
