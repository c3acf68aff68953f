//! A fixed number of slots shared fairly between tenants.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use super::{Ledger, Tenant};

/// `slots` units of something (guest-call threads, the write bucket) that
/// tenants take one at a time and give back by dropping their [`Slot`].
///
/// # Guarantees
/// - At most `slots` are held at once.
/// - A caller never waits while a slot is free (work conserving).
/// - When a slot frees up and several tenants wait, it goes to the one the
///   [`Ledger`] picks (fewest held per share, then virtual time); within a
///   tenant, callers are served in arrival order.
/// - A caller that stops waiting (its future dropped) takes nothing, even
///   if a slot was handed to it in the meantime: it is passed on.
pub struct Gate {
    state: Mutex<State>,
}

struct State {
    free: usize,
    /// Slots held through [`Gate::try_spare`], and the most it hands out.
    spares: (usize, usize),
    ledger: Ledger,
    /// Waiting callers by tenant; a tenant with no waiter has no entry.
    waiting: HashMap<Arc<str>, VecDeque<Waiter>>,
    next_id: u64,
}

struct Waiter {
    id: u64,
    tenant: Tenant,
    grant: oneshot::Sender<()>,
}

/// A slot taken from a [`Gate`]; dropping it gives it back.
#[must_use = "the slot is given back when dropped"]
pub struct Slot {
    gate: Arc<Gate>,
    tenant: Arc<str>,
    /// Taken through [`Gate::try_spare`].
    spare: bool,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("tenant", &self.tenant)
            .finish()
    }
}

impl Gate {
    /// A gate of `slots` slots (at least one).
    #[must_use]
    pub fn new(slots: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                free: slots.max(1),
                spares: (0, (slots / 4).max(1)),
                ledger: Ledger::new(),
                waiting: HashMap::new(),
                next_id: 0,
            }),
        })
    }

    /// Waits for a slot for `tenant`.
    pub async fn acquire(self: &Arc<Self>, tenant: &Tenant) -> Slot {
        let (id, granted) = {
            let mut state = self.lock();
            state.ledger.enter(tenant);
            if state.free > 0 {
                state.free -= 1;
                state.ledger.grant(tenant.key());
                return self.slot(tenant.key());
            }
            let (grant, granted) = oneshot::channel();
            let id = state.next_id;
            state.next_id += 1;
            state
                .waiting
                .entry(Arc::clone(tenant.key()))
                .or_default()
                .push_back(Waiter {
                    id,
                    tenant: tenant.clone(),
                    grant,
                });
            (id, granted)
        };
        let mut wait = Wait {
            gate: self,
            tenant: tenant.key(),
            id,
            granted,
            done: false,
        };
        // The sender lives in the queue until it is granted, and the gate
        // outlives this borrow of it: the channel cannot close unanswered.
        let _ = (&mut wait.granted).await;
        wait.done = true;
        self.slot(tenant.key())
    }

    /// Takes a slot for `tenant` without waiting, and only when taking it
    /// delays no one now: nobody waits, and another slot stays free for the
    /// next caller. For work below every caller of [`acquire`](Self::acquire):
    /// such work holds at most a quarter of the slots (at least one), so
    /// what a later caller may wait behind is bounded.
    #[must_use]
    pub fn try_spare(self: &Arc<Self>, tenant: &Tenant) -> Option<Slot> {
        let mut state = self.lock();
        let (held, most) = state.spares;
        if state.free < 2 || !state.waiting.is_empty() || held >= most {
            return None;
        }
        state.ledger.enter(tenant);
        state.free -= 1;
        state.spares.0 += 1;
        state.ledger.grant(tenant.key());
        Some(Slot {
            gate: Arc::clone(self),
            tenant: Arc::clone(tenant.key()),
            spare: true,
        })
    }

    /// Slots held now.
    #[must_use]
    pub fn held(&self, tenant: &str) -> usize {
        self.lock().ledger.held(tenant)
    }

    /// Callers waiting now.
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.lock().waiting.values().map(VecDeque::len).sum()
    }

    fn slot(self: &Arc<Self>, tenant: &Arc<str>) -> Slot {
        Slot {
            gate: Arc::clone(self),
            tenant: Arc::clone(tenant),
            spare: false,
        }
    }

    fn release(&self, tenant: &str, spare: bool) {
        let mut state = self.lock();
        state.ledger.release(tenant);
        state.free += 1;
        if spare {
            state.spares.0 -= 1;
        }
        state.dispatch();
        if !state.waiting.contains_key(tenant) {
            state.ledger.retire(tenant);
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the state consistent before it can panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// Hands free slots to waiting callers, by the ledger's choice.
    fn dispatch(&mut self) {
        while self.free > 0 {
            let Some(tenant) = self.ledger.pick(self.waiting.keys()).map(Arc::clone) else {
                return;
            };
            let Some(queue) = self.waiting.get_mut(&tenant) else {
                return;
            };
            let waiter = queue.pop_front();
            if queue.is_empty() {
                self.waiting.remove(&tenant);
            }
            let Some(waiter) = waiter else {
                continue;
            };
            self.ledger.enter(&waiter.tenant);
            self.ledger.grant(&tenant);
            self.free -= 1;
            if waiter.grant.send(()).is_err() {
                // Gone meanwhile (its `Wait` removes itself under this lock,
                // so this is only a receiver dropped without a drop guard).
                self.ledger.release(&tenant);
                self.free += 1;
            }
        }
    }
}

/// A caller waiting in the queue; if dropped before it has its slot, it
/// leaves the queue, and a slot granted meanwhile is passed on.
struct Wait<'a> {
    gate: &'a Arc<Gate>,
    tenant: &'a Arc<str>,
    id: u64,
    granted: oneshot::Receiver<()>,
    done: bool,
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = self.gate.lock();
        if let Some(queue) = state.waiting.get_mut(self.tenant)
            && let Some(at) = queue.iter().position(|w| w.id == self.id)
        {
            queue.remove(at);
            if queue.is_empty() {
                state.waiting.remove(self.tenant);
                state.ledger.retire(self.tenant);
            }
            return;
        }
        // Not queued any more: it was granted a slot it will not use.
        drop(state);
        self.granted.close();
        if self.granted.try_recv().is_ok() {
            self.gate.release(self.tenant, false);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.gate.release(&self.tenant, self.spare);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::task::JoinSet;
    use tokio::time::Instant;

    use super::super::Share;
    use super::*;

    fn tenant(name: &str, share: u32) -> Tenant {
        Tenant::new(name, Share::new(share).expect("non-zero"))
    }

    /// Submits `n` jobs of `tenant`, each holding a slot for `hold`; returns
    /// when each finished, in completion order.
    fn submit(
        gate: &Arc<Gate>,
        jobs: &mut JoinSet<(String, Instant)>,
        tenant: &Tenant,
        n: usize,
        hold: Duration,
    ) {
        for _ in 0..n {
            let (gate, tenant) = (Arc::clone(gate), tenant.clone());
            jobs.spawn(async move {
                let _slot = gate.acquire(&tenant).await;
                tokio::time::sleep(hold).await;
                (tenant.name().to_owned(), Instant::now())
            });
        }
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[test]
    fn spare_slots_are_at_most_a_quarter_of_the_slots_and_at_least_one() {
        let shadow = tenant("etl (candidate)", 1);
        let gate = Gate::new(8);
        let taken: Vec<Slot> = std::iter::from_fn(|| gate.try_spare(&shadow)).collect();
        assert_eq!(taken.len(), 2, "6 of 8 slots still free");
        drop(taken);
        assert!(gate.try_spare(&shadow).is_some(), "given back");
        let small = Gate::new(2);
        let one = small.try_spare(&shadow);
        assert!(one.is_some() && small.try_spare(&shadow).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_spare_slot_is_taken_only_when_it_delays_no_one() {
        let gate = Gate::new(3);
        let (serving, shadow) = (tenant("etl", 1), tenant("etl (candidate)", 1));
        let spare = gate.try_spare(&shadow).expect("three free: one is spare");
        let held = gate.acquire(&serving).await;
        assert!(
            gate.try_spare(&shadow).is_none(),
            "the last free slot is kept"
        );
        drop(spare);
        let second = gate.try_spare(&shadow).expect("two free again");
        drop(held);
        // Every slot taken and a caller waiting: nothing is spare once a
        // slot frees up, and the freed slot goes to the caller.
        let full = (gate.acquire(&serving).await, gate.acquire(&serving).await);
        let mut waiter = tokio::spawn({
            let (gate, serving) = (Arc::clone(&gate), serving.clone());
            async move { gate.acquire(&serving).await }
        });
        settle().await;
        assert_eq!(gate.waiting(), 1);
        drop(second);
        assert!(gate.try_spare(&shadow).is_none());
        let granted = (&mut waiter).await.unwrap();
        assert_eq!(gate.waiting(), 0);
        drop((full, granted));
        assert!(gate.try_spare(&shadow).is_some(), "all free again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_tenant_uses_every_slot() {
        let gate = Gate::new(4);
        let mut jobs = JoinSet::new();
        let start = Instant::now();
        submit(&gate, &mut jobs, &tenant("a", 1), 8, Duration::from_secs(1));
        let finished = jobs.join_all().await;
        assert_eq!(finished.len(), 8);
        // Four at a time: two rounds of one second.
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_newcomer_gets_the_first_free_slot_not_the_end_of_the_line() {
        let gate = Gate::new(2);
        let mut jobs = JoinSet::new();
        let start = Instant::now();
        submit(
            &gate,
            &mut jobs,
            &tenant("noisy", 1),
            100,
            Duration::from_secs(1),
        );
        settle().await;
        submit(
            &gate,
            &mut jobs,
            &tenant("quiet", 1),
            1,
            Duration::from_millis(10),
        );
        let finished = jobs.join_all().await;
        let quiet = finished
            .iter()
            .find(|(name, _)| name == "quiet")
            .expect("quiet ran");
        // The noisy tenant holds both slots for a second; then quiet is next.
        assert_eq!(quiet.1 - start, Duration::from_millis(1010));
    }

    #[tokio::test(start_paused = true)]
    async fn while_both_wait_slots_are_held_in_proportion_to_shares() {
        let gate = Gate::new(4);
        let mut jobs = JoinSet::new();
        submit(
            &gate,
            &mut jobs,
            &tenant("three", 3),
            200,
            Duration::from_secs(1),
        );
        submit(
            &gate,
            &mut jobs,
            &tenant("one", 1),
            200,
            Duration::from_secs(1),
        );
        // After the first round, the slots settle at 3 : 1.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        for _ in 0..5 {
            assert_eq!((gate.held("three"), gate.held("one")), (3, 1));
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        jobs.abort_all();
    }

    #[tokio::test(start_paused = true)]
    async fn a_share_of_one_beside_a_thousand_is_still_served() {
        let gate = Gate::new(1);
        let mut jobs = JoinSet::new();
        let start = Instant::now();
        submit(
            &gate,
            &mut jobs,
            &tenant("big", 1000),
            5000,
            Duration::from_millis(1),
        );
        settle().await;
        submit(
            &gate,
            &mut jobs,
            &tenant("small", 1),
            2,
            Duration::from_millis(1),
        );
        let mut small_done = Vec::new();
        while let Some(job) = jobs.join_next().await {
            let (name, at) = job.expect("job");
            if name == "small" {
                small_done.push(at - start);
                if small_done.len() == 2 {
                    break;
                }
            }
        }
        jobs.abort_all();
        // One grant for small per thousand for big (plus the first grant).
        assert!(
            small_done[1] <= Duration::from_millis(1010),
            "{small_done:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_that_stops_waiting_takes_no_slot() {
        let gate = Gate::new(1);
        let a = tenant("a", 1);
        let held = gate.acquire(&a).await;
        let given_up = tokio::time::timeout(Duration::from_millis(10), gate.acquire(&a)).await;
        assert!(given_up.is_err());
        assert_eq!(gate.waiting(), 0, "the abandoned caller left the queue");
        drop(held);
        let again = tokio::time::timeout(Duration::from_millis(10), gate.acquire(&a)).await;
        assert!(again.is_ok(), "the slot was given back, not leaked");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_granted_to_a_caller_that_is_then_dropped_is_passed_on() {
        let gate = Gate::new(1);
        let a = tenant("a", 1);
        let held = gate.acquire(&a).await;
        let mut first = Box::pin(gate.acquire(&a));
        assert!(futures_poll_once(first.as_mut()).await.is_none());
        let second = tokio::spawn({
            let (gate, a) = (Arc::clone(&gate), a.clone());
            async move { gate.acquire(&a).await }
        });
        settle().await;
        // The slot goes to `first`, which is dropped before it looks.
        drop(held);
        drop(first);
        let slot = tokio::time::timeout(Duration::from_millis(10), second).await;
        assert!(slot.is_ok(), "the slot reached the next caller");
    }

    /// Polls `future` once.
    async fn futures_poll_once<F: std::future::Future + Unpin>(future: F) -> Option<F::Output> {
        let mut future = future;
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut future).poll(cx) {
                std::task::Poll::Ready(out) => Some(out),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
