//! The one rule that decides whom to serve next.

use std::collections::HashMap;
use std::sync::Arc;

use super::Tenant;

/// Virtual time one grant costs a tenant of share 1.
const GRANT_COST: u128 = 1 << 32;

/// What each tenant holds and has been granted, and the choice of the next.
///
/// The rule, for candidates that all want one more unit:
///
/// 1. the fewest units held per unit of share (`held / share`): under
///    contention, what is held converges to the shares;
/// 2. then the earliest virtual start (start-time fair queuing): each grant
///    moves a tenant's virtual time on by `1 / share`, and a tenant that
///    was idle starts at the current virtual time, so it neither banks
///    credit while idle nor is penalised for having been busy before;
/// 3. then whoever was served longest ago, and among tenants never served,
///    whoever came first.
///
/// The ledger is pure bookkeeping: callers hold it under their own lock.
/// Accounts of tenants that hold nothing are dropped with [`retire`](Self::retire),
/// so its size is bounded by the tenants active at once.
#[derive(Debug, Default)]
pub struct Ledger {
    accounts: HashMap<Arc<str>, Account>,
    /// The virtual start of the last grant.
    clock: u128,
    /// Grants so far, to order ties.
    grants: u64,
    /// Accounts opened so far, to order ties among tenants never served.
    opened: u64,
}

#[derive(Debug)]
struct Account {
    share: u32,
    held: usize,
    /// Virtual time at which this tenant's next grant starts (at the earliest).
    next_start: u128,
    /// When (in grants) it was last served.
    last_served: u64,
    /// When (in accounts) it came.
    opened: u64,
}

impl Ledger {
    /// An empty ledger.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes `tenant` known (or updates its share), so that it can be picked.
    pub fn enter(&mut self, tenant: &Tenant) {
        self.account(tenant.key()).share = tenant.share().get();
    }

    fn account(&mut self, name: &Arc<str>) -> &mut Account {
        let (clock, opened) = (self.clock, &mut self.opened);
        self.accounts.entry(Arc::clone(name)).or_insert_with(|| {
            *opened += 1;
            Account {
                share: 1,
                held: 0,
                next_start: clock,
                last_served: 0,
                opened: *opened,
            }
        })
    }

    /// The candidate to serve next, by the rule above; `None` when there is
    /// no candidate. Candidates not [`enter`](Self::enter)ed count as fresh
    /// tenants of share 1.
    pub fn pick<'a, I>(&self, candidates: I) -> Option<&'a Arc<str>>
    where
        I: IntoIterator<Item = &'a Arc<str>>,
    {
        candidates.into_iter().min_by_key(|name| self.order(name))
    }

    fn order(&self, name: &str) -> (u128, u128, u64, u64) {
        match self.accounts.get(name) {
            Some(account) => (
                account.held as u128 * GRANT_COST / u128::from(account.share),
                account.next_start.max(self.clock),
                account.last_served,
                account.opened,
            ),
            None => (0, self.clock, 0, u64::MAX),
        }
    }

    /// Records one unit granted to `name`.
    pub fn grant(&mut self, name: &Arc<str>) {
        self.grants += 1;
        let (clock, grants) = (self.clock, self.grants);
        let account = self.account(name);
        let start = account.next_start.max(clock);
        account.next_start = start + GRANT_COST / u128::from(account.share);
        account.held += 1;
        account.last_served = grants;
        self.clock = start;
    }

    /// Records one unit of `name` given back.
    pub fn release(&mut self, name: &str) {
        if let Some(account) = self.accounts.get_mut(name) {
            account.held = account.held.saturating_sub(1);
        }
    }

    /// Units `name` holds.
    #[must_use]
    pub fn held(&self, name: &str) -> usize {
        self.accounts.get(name).map_or(0, |a| a.held)
    }

    /// Forgets `name` if it holds nothing (the caller knows it waits for
    /// nothing either).
    pub fn retire(&mut self, name: &str) {
        if self.held(name) == 0 {
            self.accounts.remove(name);
        }
    }

    /// Tenants with an account.
    #[must_use]
    pub fn len(&self) -> usize {
        self.accounts.len()
    }

    /// True when no tenant has an account.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::super::Share;
    use super::*;

    fn tenant(name: &str, share: u32) -> Tenant {
        Tenant::new(name, Share::new(share).expect("non-zero"))
    }

    /// Grants `rounds` units one at a time to whichever of `tenants` the
    /// ledger picks, releasing each at once (a rate, not concurrency).
    fn serve(ledger: &mut Ledger, tenants: &[Tenant], rounds: usize) -> HashMap<String, usize> {
        let names: Vec<Arc<str>> = tenants.iter().map(|t| Arc::clone(t.key())).collect();
        let mut served = HashMap::new();
        for tenant in tenants {
            ledger.enter(tenant);
        }
        for _ in 0..rounds {
            let next = Arc::clone(ledger.pick(&names).expect("a candidate"));
            ledger.grant(&next);
            ledger.release(&next);
            *served.entry(next.to_string()).or_insert(0) += 1;
        }
        served
    }

    #[test]
    fn grants_one_at_a_time_follow_the_shares() {
        let mut ledger = Ledger::new();
        let served = serve(&mut ledger, &[tenant("a", 3), tenant("b", 1)], 400);
        assert_eq!((served["a"], served["b"]), (300, 100));
    }

    #[test]
    fn equal_shares_alternate() {
        let mut ledger = Ledger::new();
        let names: Vec<Arc<str>> = vec!["a".into(), "b".into()];
        let order: Vec<String> = (0..6)
            .map(|_| {
                let next = Arc::clone(ledger.pick(&names).expect("a candidate"));
                ledger.grant(&next);
                ledger.release(&next);
                next.to_string()
            })
            .collect();
        assert_eq!(order, ["a", "b", "a", "b", "a", "b"]);
    }

    #[test]
    fn the_tenant_holding_less_per_share_goes_first() {
        let mut ledger = Ledger::new();
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        ledger.enter(&tenant("a", 2));
        for _ in 0..3 {
            ledger.grant(&a);
        }
        ledger.grant(&b);
        // a holds 3 of share 2 (1.5 per share), b 1 of share 1.
        assert_eq!(ledger.pick([&a, &b]), Some(&b));
        ledger.release(&a);
        // a now holds 1 per share, like b: virtual time decides. a's next
        // start is 3 × 1/2 = 1.5; b started at 1.0 (the clock when it came)
        // and its next is 2.0.
        assert_eq!(ledger.pick([&a, &b]), Some(&a));
    }

    #[test]
    fn a_small_share_is_not_starved_beside_a_large_one() {
        let mut ledger = Ledger::new();
        let served = serve(
            &mut ledger,
            &[tenant("big", 1000), tenant("small", 1)],
            10_010,
        );
        assert_eq!(served["small"], 10);
    }

    #[test]
    fn a_tenant_back_from_idle_banks_no_credit() {
        let mut ledger = Ledger::new();
        serve(&mut ledger, &[tenant("busy", 1)], 1000);
        // `late` arrives now: it must not get 1000 grants in a row.
        let served = serve(&mut ledger, &[tenant("busy", 1), tenant("late", 1)], 10);
        assert_eq!((served["busy"], served["late"]), (5, 5));
    }

    #[test]
    fn retiring_drops_only_tenants_that_hold_nothing() {
        let mut ledger = Ledger::new();
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        ledger.grant(&a);
        ledger.grant(&b);
        ledger.release(&b);
        ledger.retire(&a);
        ledger.retire(&b);
        assert_eq!(ledger.len(), 1);
        assert_eq!(ledger.held("a"), 1);
    }
}
