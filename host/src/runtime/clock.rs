//! Virtual time: the WASI clocks and `wasi:io/poll` of a call, answered from
//! the call's context instead of the host's clocks, so that no wait is ever
//! slept through.
//!
//! wasmtime-wasi's own `monotonic-clock` and `poll` sleep for real inside the
//! host function, where the epoch deadline cannot reach: a guest that called
//! `std::thread::sleep(5s)` held a call thread for 5 s under a 1 s deadline,
//! and one that blocked on an endless duration held it forever. Here:
//!
//! - Both clocks start at the context's `now-unix-ms` and move only when the
//!   guest waits, by exactly what it waits: a call sees the same time through
//!   WASI as in its context, a loop that waits until some instant ends, and
//!   the same inputs replay to the same readings.
//! - A wait (`block`, or `poll` with nothing ready) on a clock pollable is
//!   answered at once, moving the clock to the earliest instant waited for.
//!   A wait that would move it past the call's timeout is refused: the call
//!   ends with [`super::Error::DeadlineExceeded`], as it would have after a
//!   real wait, but without holding the thread. The virtual time a call can
//!   spend is thus its timeout, and its real time is bounded by the epoch
//!   deadline as for any guest code.
//! - A wait on anything else that is not ready (nothing in the sandbox: stdin
//!   is closed and stdout/stderr always accept writes) is refused as a trap,
//!   [`Refused::NeverReady`], instead of blocking forever.
//! - The exception is a call with outbound HTTP ([`crate::outbound`]): its
//!   responses and bodies take real time. A wait on them is a real wait,
//!   bounded by the call's deadline ([`VirtualClock::with_real_waits`]) and by
//!   the earliest clock pollable of the same wait; the clocks then move by
//!   the time really waited.
//!
//! Readiness of the non-clock pollables is asked once, without a runtime and
//! without waiting (a no-op waker): their futures are immediate.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::{Duration, Instant};

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::p2::bindings::clocks::{monotonic_clock, wall_clock};
use wasmtime_wasi::p2::bindings::io::poll as async_poll;
use wasmtime_wasi::p2::bindings::sync::io::poll;
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

/// The time of one call.
#[derive(Debug)]
pub(crate) struct VirtualClock {
    /// The context's time, in nanoseconds since the Unix epoch.
    start: u64,
    /// Virtual time waited so far, in nanoseconds.
    waited: u64,
    /// The call's timeout: the most virtual time it may wait.
    timeout: Duration,
    /// When each live clock pollable is due (virtual nanoseconds since the
    /// Unix epoch), by its table index.
    timers: BTreeMap<u32, u64>,
    /// For a call with outbound HTTP: until when it may really wait.
    real_until: Option<Instant>,
}

/// Why a wait was refused; the call ends with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    /// The wait would move the virtual clock past the call's timeout.
    #[error(
        "the policy waited past its deadline of {} ms (WASI clocks are virtual: a wait is answered at once, up to the deadline)",
        timeout.as_millis()
    )]
    PastDeadline {
        /// The call's timeout.
        timeout: Duration,
    },
    /// Nothing waited for is ready, and no clock will make it so.
    #[error("the policy waited on a pollable that never becomes ready in the sandbox")]
    NeverReady,
}

impl VirtualClock {
    /// A clock at the context's time, for a call of `timeout`.
    pub(crate) fn new(now_unix_ms: u64, timeout: Duration) -> Self {
        Self {
            start: now_unix_ms.saturating_mul(1_000_000),
            waited: 0,
            timeout,
            timers: BTreeMap::new(),
            real_until: None,
        }
    }

    /// Lets waits on pollables other than clocks really wait, until `until`
    /// at the latest (the call's deadline).
    #[must_use]
    pub(crate) fn with_real_waits(mut self, until: Instant) -> Self {
        self.real_until = Some(until);
        self
    }

    /// Moves the clock by time really waited.
    fn pass(&mut self, waited: Duration) {
        let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.waited = self.waited.saturating_add(nanos);
    }

    /// The current virtual time, nanoseconds since the Unix epoch.
    pub(crate) fn now(&self) -> u64 {
        self.start.saturating_add(self.waited)
    }

    /// Moves the clock to `due`, unless that is past the call's timeout.
    fn advance_to(&mut self, due: u64) -> Result<(), Refused> {
        let waited = due.saturating_sub(self.start);
        let budget = u64::try_from(self.timeout.as_nanos()).unwrap_or(u64::MAX);
        if waited > budget {
            return Err(Refused::PastDeadline {
                timeout: self.timeout,
            });
        }
        self.waited = self.waited.max(waited);
        Ok(())
    }
}

/// What the clock and poll host functions work on.
pub(crate) struct Time<'a> {
    pub(crate) clock: &'a mut VirtualClock,
    pub(crate) table: &'a mut ResourceTable,
}

/// Gives the clock and poll bindings a call's [`Time`], as wasmtime-wasi's
/// views give theirs their context.
pub(crate) trait ClockView {
    /// The call's virtual clock and its resource table.
    fn time(&mut self) -> Time<'_>;
}

/// Links `wasi:clocks/*` and `wasi:io/poll` to [`Time`].
struct VirtualTime;

impl HasData for VirtualTime {
    type Data<'a> = Time<'a>;
}

/// Links the virtual `wasi:clocks/wall-clock`, `wasi:clocks/monotonic-clock`
/// and `wasi:io/poll` into `linker`.
pub(crate) fn add_to_linker<T: ClockView + 'static>(
    linker: &mut Linker<T>,
) -> wasmtime::Result<()> {
    poll::add_to_linker::<T, VirtualTime>(linker, T::time)?;
    wall_clock::add_to_linker::<T, VirtualTime>(linker, T::time)?;
    monotonic_clock::add_to_linker::<T, VirtualTime>(linker, T::time)
}

/// What a clock pollable points at: its due time is kept in the clock.
struct Timer;

impl Pollable for Timer {
    fn ready<'a, 'b>(&'a mut self) -> Pin<Box<dyn Future<Output = ()> + Send + 'b>>
    where
        'a: 'b,
    {
        // Never asked: `Time` answers for timers from their due time.
        Box::pin(std::future::ready(()))
    }
}

impl Time<'_> {
    fn subscribe(&mut self, due: u64) -> wasmtime::Result<Resource<DynPollable>> {
        let timer = self.table.push(Timer)?;
        let pollable = subscribe(self.table, timer)?;
        self.clock.timers.insert(pollable.rep(), due);
        Ok(pollable)
    }

    /// Whether `pollable` is ready now, without waiting.
    fn ready_now(&mut self, pollable: &Resource<DynPollable>) -> wasmtime::Result<bool> {
        if let Some(&due) = self.clock.timers.get(&pollable.rep()) {
            return Ok(due <= self.clock.now());
        }
        let borrowed = Resource::new_borrow(pollable.rep());
        let ready = pin!(async_poll::HostPollable::ready(&mut *self.table, borrowed));
        match ready.poll(&mut TaskContext::from_waker(Waker::noop())) {
            Poll::Ready(ready) => ready,
            Poll::Pending => Ok(false),
        }
    }
}

impl Time<'_> {
    /// Really waits until one of `pending` (none of them clocks) is ready,
    /// or the earliest clock of the wait (`due`) comes, whichever is first;
    /// refuses the wait where the call may not really wait, or when it
    /// reaches the call's deadline.
    fn wait_for_real(&mut self, pending: &[u32], due: Option<u64>) -> wasmtime::Result<()> {
        let (Some(until), false) = (self.clock.real_until, pending.is_empty()) else {
            return Ok(());
        };
        let started = Instant::now();
        let timer =
            due.map(|due| started + Duration::from_nanos(due.saturating_sub(self.clock.now())));
        let limit = timer.map_or(until, |timer| timer.min(until));
        let list = pending
            .iter()
            .map(|rep| Resource::new_borrow(*rep))
            .collect();
        let table = &mut *self.table;
        // The timer is made inside: it needs the runtime `in_tokio` enters.
        let waited = wasmtime_wasi::runtime::in_tokio(async move {
            tokio::time::timeout_at(limit.into(), async_poll::Host::poll(table, list)).await
        });
        self.clock.pass(started.elapsed());
        match waited {
            Ok(ready) => ready.map(drop),
            Err(_) if timer.is_some_and(|timer| timer < until) => Ok(()),
            Err(_) => Err(Refused::PastDeadline {
                timeout: self.clock.timeout,
            }
            .into()),
        }
    }
}

impl wall_clock::Host for Time<'_> {
    fn now(&mut self) -> wasmtime::Result<wall_clock::Datetime> {
        let now = self.clock.now();
        Ok(wall_clock::Datetime {
            seconds: now / 1_000_000_000,
            nanoseconds: u32::try_from(now % 1_000_000_000).unwrap_or(0),
        })
    }

    fn resolution(&mut self) -> wasmtime::Result<wall_clock::Datetime> {
        Ok(wall_clock::Datetime {
            seconds: 0,
            nanoseconds: 1,
        })
    }
}

impl monotonic_clock::Host for Time<'_> {
    fn now(&mut self) -> wasmtime::Result<monotonic_clock::Instant> {
        Ok(self.clock.now())
    }

    fn resolution(&mut self) -> wasmtime::Result<monotonic_clock::Duration> {
        Ok(1)
    }

    fn subscribe_instant(
        &mut self,
        when: monotonic_clock::Instant,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.subscribe(when)
    }

    fn subscribe_duration(
        &mut self,
        when: monotonic_clock::Duration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let due = self.clock.now().saturating_add(when);
        self.subscribe(due)
    }
}

impl poll::Host for Time<'_> {
    fn poll(&mut self, pollables: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        if pollables.is_empty() {
            wasmtime::bail!("empty poll list");
        }
        let mut ready = Vec::new();
        let mut earliest: Option<u64> = None;
        let mut pending = Vec::new();
        for (index, pollable) in (0u32..).zip(&pollables) {
            if self.ready_now(pollable)? {
                ready.push(index);
            } else if let Some(&due) = self.clock.timers.get(&pollable.rep()) {
                earliest = Some(earliest.map_or(due, |e| e.min(due)));
            } else {
                pending.push(pollable.rep());
            }
        }
        if !ready.is_empty() {
            return Ok(ready);
        }
        if self.clock.real_until.is_some() && !pending.is_empty() {
            self.wait_for_real(&pending, earliest)?;
            for (index, pollable) in (0u32..).zip(&pollables) {
                if self.ready_now(pollable)? {
                    ready.push(index);
                }
            }
            if !ready.is_empty() {
                return Ok(ready);
            }
        }
        let due = earliest.ok_or(Refused::NeverReady)?;
        self.clock.advance_to(due)?;
        Ok((0u32..)
            .zip(&pollables)
            .filter(|(_, p)| self.clock.timers.get(&p.rep()).is_some_and(|&d| d <= due))
            .map(|(index, _)| index)
            .collect())
    }
}

impl poll::HostPollable for Time<'_> {
    fn ready(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<bool> {
        self.ready_now(&pollable)
    }

    fn block(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        if self.ready_now(&pollable)? {
            return Ok(());
        }
        if self.clock.real_until.is_some() && !self.clock.timers.contains_key(&pollable.rep()) {
            self.wait_for_real(&[pollable.rep()], None)?;
            if self.ready_now(&pollable)? {
                return Ok(());
            }
        }
        let due = *self
            .clock
            .timers
            .get(&pollable.rep())
            .ok_or(Refused::NeverReady)?;
        Ok(self.clock.advance_to(due)?)
    }

    fn drop(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        self.clock.timers.remove(&pollable.rep());
        async_poll::HostPollable::drop(&mut *self.table, pollable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn clock() -> VirtualClock {
        VirtualClock::new(1_000, Duration::from_secs(1))
    }

    #[test]
    fn the_clock_starts_at_the_context_time() {
        assert_eq!(clock().now(), SECOND);
    }

    #[test]
    fn a_block_on_a_duration_returns_at_once_and_moves_the_clock_by_it() {
        let (mut clock, mut table) = (clock(), ResourceTable::new());
        let mut time = Time {
            clock: &mut clock,
            table: &mut table,
        };
        let pollable = monotonic_clock::Host::subscribe_duration(&mut time, SECOND / 4).unwrap();
        assert!(
            !poll::HostPollable::ready(&mut time, Resource::new_borrow(pollable.rep())).unwrap()
        );
        poll::HostPollable::block(&mut time, Resource::new_borrow(pollable.rep())).unwrap();
        assert_eq!(time.clock.now(), SECOND + SECOND / 4);
        assert!(
            poll::HostPollable::ready(&mut time, Resource::new_borrow(pollable.rep())).unwrap()
        );
        poll::HostPollable::drop(&mut time, pollable).unwrap();
        assert!(time.clock.timers.is_empty());
        assert!(time.table.is_empty());
    }

    #[test]
    fn a_wait_past_the_timeout_is_refused_and_the_clock_stays() {
        let (mut clock, mut table) = (clock(), ResourceTable::new());
        let mut time = Time {
            clock: &mut clock,
            table: &mut table,
        };
        let endless = monotonic_clock::Host::subscribe_duration(&mut time, u64::MAX).unwrap();
        let error = poll::HostPollable::block(&mut time, endless).unwrap_err();
        assert_eq!(
            error.downcast_ref::<Refused>(),
            Some(&Refused::PastDeadline {
                timeout: Duration::from_secs(1)
            })
        );
        assert_eq!(time.clock.now(), SECOND);
    }

    #[test]
    fn poll_answers_the_earliest_timers_at_once() {
        let (mut clock, mut table) = (clock(), ResourceTable::new());
        let mut time = Time {
            clock: &mut clock,
            table: &mut table,
        };
        let pollables: Vec<_> = [900, 300, 300, 600]
            .into_iter()
            .map(|ms| monotonic_clock::Host::subscribe_duration(&mut time, ms * 1_000_000).unwrap())
            .collect();
        let borrow = |p: &Resource<DynPollable>| Resource::new_borrow(p.rep());
        let ready = poll::Host::poll(&mut time, pollables.iter().map(borrow).collect()).unwrap();
        assert_eq!(ready, [1, 2]);
        assert_eq!(time.clock.now(), SECOND + 300_000_000);
        let ready = poll::Host::poll(
            &mut time,
            vec![borrow(&pollables[0]), borrow(&pollables[3])],
        )
        .unwrap();
        assert_eq!(ready, [1]);
        assert_eq!(time.clock.now(), SECOND + 600_000_000);
    }

    #[test]
    fn an_instant_in_the_past_is_ready_without_moving_the_clock() {
        let (mut clock, mut table) = (clock(), ResourceTable::new());
        let mut time = Time {
            clock: &mut clock,
            table: &mut table,
        };
        let past = monotonic_clock::Host::subscribe_instant(&mut time, 5).unwrap();
        assert_eq!(poll::Host::poll(&mut time, vec![past]).unwrap(), [0]);
        assert_eq!(time.clock.now(), SECOND);
    }
}
