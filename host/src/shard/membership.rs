//! Membership on Leases, and the handover of buckets between members.
//!
//! Each replica holds a Lease of its own, `<prefix>-<identity>`, labelled
//! `policyhost.dev/shard-member=<instance>`, renewed every retry period,
//! its annotation `policyhost.dev/serving` naming the buckets it claims
//! (hex of the [`Share`]). Every replica lists the member Leases, counts
//! live those whose content changed within their lease duration *on its
//! own clock* (client-go's rule: no clock comparison across machines), and
//! computes the [`Ring`] of the live ones.
//!
//! A bucket changes hands in this order, so that no two replicas ever call
//! for one DataJob at once:
//!
//! 1. Its old owner, seeing the new ring, stops starting calls in it
//!    ([`Serving::withdraw`]; its queued and delayed keys are dropped when
//!    they come up), waits for the calls in flight to end, and only then
//!    writes its claim without it.
//! 2. Its new owner claims it only once no live member's claim holds it,
//!    writes the claim first, then widens its watches and serves the
//!    bucket once every watch stream has listed it.
//! 3. A replica that cannot renew stops writing at its renew deadline (the
//!    [`Leadership`] fence) and drops every claim; the others count it dead
//!    a lease duration after they last saw its Lease change, which is
//!    later, and take its buckets then.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Client, Error as KubeError};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use super::{Bucket, Replicas, Ring, Serving, Share};

/// The bucket whose owner publishes.
const FIRST: Bucket = Bucket::FIRST;
use crate::chain::Chain;
use crate::leader::{self, Leadership};
use crate::throttle::WriteThrottleLayer;

/// The label that marks a member Lease, valued with the operator instance.
pub const MEMBER_LABEL: &str = "policyhost.dev/shard-member";
/// The annotation of a member Lease that names the buckets it claims.
pub const SERVING_ANNOTATION: &str = "policyhost.dev/serving";

/// One replica's membership: its Lease, the others', and its buckets.
pub struct Membership {
    api: Api<Lease>,
    config: leader::Config,
    instance: String,
    leadership: Leadership,
    serving: Serving,
    ring: watch::Sender<Ring>,
    /// Each other member Lease as last seen, and when its spec or claim
    /// last changed on this replica's clock.
    observed: HashMap<String, Observed>,
    /// The buckets this replica's Lease claims.
    claimed: Share,
    /// Held while this replica owns the first bucket: what one replica
    /// writes for all (reports on policy ConfigMaps) is its to write.
    publishing: Option<Leadership>,
    /// The write budget the members share, and the count every other
    /// shared limit is divided by.
    budget: Option<(WriteThrottleLayer, Replicas)>,
}

struct Observed {
    renewed: Option<MicroTime>,
    claim: Option<String>,
    at: Instant,
}

/// Another member as this replica sees it.
struct Peer {
    identity: String,
    claim: Share,
}

impl Membership {
    /// A membership for `config` (its `lease_name` is the prefix of every
    /// member Lease), deciding `leadership` (from [`Leadership::elected`])
    /// and `serving` (from [`Serving::sharded`]).
    ///
    /// # Errors
    ///
    /// The settings are unusable.
    pub fn new(
        client: Client,
        config: leader::Config,
        instance: &str,
        leadership: Leadership,
        serving: Serving,
    ) -> Result<Self, leader::Error> {
        config.validate()?;
        Ok(Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            instance: instance.to_owned(),
            leadership,
            serving,
            ring: watch::Sender::new(Ring::new(Vec::<String>::new())),
            observed: HashMap::new(),
            claimed: Share::default(),
            publishing: None,
            budget: None,
        })
    }

    /// Also divides the shared limits among the live members: `budget`,
    /// so that together they write what one replica alone would, and the
    /// limits that take their share from `replicas`.
    #[must_use]
    pub fn dividing(mut self, budget: WriteThrottleLayer, replicas: Replicas) -> Self {
        self.budget = Some((budget, replicas));
        self
    }

    /// Also decides `publishing`: held by the owner of the first bucket.
    #[must_use]
    pub fn publishing(mut self, publishing: Leadership) -> Self {
        self.publishing = Some(publishing);
        self
    }

    /// The ring as this replica last computed it.
    #[must_use]
    pub fn ring(&self) -> watch::Receiver<Ring> {
        self.ring.subscribe()
    }

    /// This replica's member Lease: the prefix, then its identity.
    #[must_use]
    pub fn lease_name(&self) -> String {
        format!("{}-{}", self.config.lease_name, self.config.identity)
    }

    /// Renews, looks at the others and hands buckets over every retry
    /// period until `stop` completes; then deletes its Lease, so that the
    /// others take its buckets at once. Complete `stop` only once the
    /// controller has stopped.
    pub async fn run(mut self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        info!(identity = %self.config.identity, lease = %self.lease_name(), "joining the shards");
        loop {
            self.round().await;
            let next = Instant::now() + self.config.retry_period;
            let next = self
                .leadership
                .valid_until()
                .map_or(next, |valid| next.min(valid));
            tokio::select! {
                biased;
                () = &mut stop => break,
                () = tokio::time::sleep_until(next) => {}
            }
        }
        self.leave().await;
    }

    /// One round: renew (with the current claim), then act on the ring.
    async fn round(&mut self) {
        if !self.renew().await {
            return;
        }
        let peers = match self.peers().await {
            Ok(peers) => peers,
            Err(error) => {
                warn!(error = %Chain(&error), "cannot list the shard members");
                return;
            }
        };
        let ring = Ring::new(
            peers
                .iter()
                .map(|p| p.identity.as_str())
                .chain([self.config.identity.as_str()]),
        );
        let target = ring.share(&self.config.identity);
        if let Some((budget, replicas)) = &self.budget {
            budget.divide_among(ring.members().len());
            replicas.set(ring.members().len());
        }
        if let Some(publishing) = &self.publishing {
            let first = ring.owner(FIRST).map(str::to_owned);
            match self.leadership.valid_until() {
                Some(valid) if first.as_deref() == Some(self.config.identity.as_str()) => {
                    publishing.lead_until(valid, &self.config.identity);
                }
                _ => publishing.follow(first),
            }
        }
        let others = Share::from_buckets(peers.iter().flat_map(|p| p.claim.buckets()));
        self.ring.send_if_modified(|old| {
            let changed = *old != ring;
            if changed {
                info!(epoch = %ring.epoch(), members = ring.members().len(), buckets = target.len(), "the shard ring changed");
            }
            *old = ring;
            changed
        });
        self.yield_contested(others).await;
        self.release(target).await;
        // Claimed in an earlier round, so `others` was read after the claim
        // was written: a member that claimed it since saw ours and yields.
        // A bucket still draining on its way out is not served again.
        let pending = self.claimed.and(target).without(self.serving.served());
        if !pending.is_empty() && self.serving.is_listed(pending) {
            self.serving.grant(pending);
            info!(buckets = pending.len(), "serving new buckets");
        }
        self.acquire(target, others).await;
    }

    /// Drops the claims not served yet that another live member claims
    /// too: two replicas that claimed one bucket in the same moment both
    /// yield it, and claim it again a round later (their rounds drift
    /// apart with the jitter of the API server's answers).
    async fn yield_contested(&mut self, others: Share) {
        let unserved = self.claimed.without(self.serving.served());
        let contested = unserved.and(others);
        if contested.is_empty() {
            return;
        }
        self.claimed = self.claimed.without(contested);
        self.serving.watch(self.claimed);
        if self.renew().await {
            info!(
                buckets = contested.len(),
                "yielded buckets another shard claimed too"
            );
        }
    }

    /// Lets go of the claimed buckets the ring gives to others, once their
    /// calls in flight have ended (waiting at most a retry period a round,
    /// so renewals go on).
    async fn release(&mut self, target: Share) {
        let lost = self.claimed.without(target);
        if lost.is_empty() {
            return;
        }
        self.serving.withdraw(lost);
        let drained =
            tokio::time::timeout(self.config.retry_period, self.serving.drained(lost)).await;
        if drained.is_err() {
            return;
        }
        self.claimed = self.claimed.without(lost);
        self.serving.watch(self.claimed);
        if self.renew().await {
            info!(buckets = lost.len(), "released buckets to other shards");
        }
    }

    /// Claims the buckets of the ring's share that no live member claims,
    /// and widens the watches to them.
    async fn acquire(&mut self, target: Share, others: Share) {
        let free = target.without(self.claimed).without(others);
        if free.is_empty() {
            return;
        }
        let before = self.claimed;
        self.claimed = Share::from_buckets(before.buckets().chain(free.buckets()));
        if self.renew().await {
            self.serving.watch(self.claimed);
        } else {
            self.claimed = before;
        }
    }

    /// Writes this replica's Lease: holder, renew time, claim. On success
    /// the write fence stays open until the renew deadline from the
    /// attempt's start; past the deadline without one, every bucket is
    /// dropped.
    async fn renew(&mut self) -> bool {
        let started = Instant::now();
        let written = tokio::time::timeout(self.config.renew_deadline, self.write_lease()).await;
        match written {
            Ok(Ok(())) => {
                self.leadership
                    .lead_until(started + self.config.renew_deadline, &self.config.identity);
                return true;
            }
            Ok(Err(error)) => warn!(error = %Chain(&error), "cannot renew the member Lease"),
            Err(_) => warn!("no answer from the API server about the member Lease"),
        }
        if self
            .leadership
            .valid_until()
            .is_none_or(|valid| Instant::now() >= valid)
        {
            self.lapse();
        }
        false
    }

    /// The membership ran out: writes are fenced, and every bucket goes, to
    /// be claimed again through the ordinary path once renewals succeed.
    fn lapse(&mut self) {
        if !self.claimed.is_empty() || self.leadership.permits_writes() {
            warn!("the member Lease was not renewed in time: serving nothing until it is");
        }
        self.leadership.follow(None);
        if let Some(publishing) = &self.publishing {
            publishing.follow(None);
        }
        self.serving.withdraw(Share::ALL);
        self.claimed = Share::default();
        self.serving.watch(self.claimed);
    }

    async fn write_lease(&self) -> Result<(), KubeError> {
        let name = self.lease_name();
        let now = MicroTime(Timestamp::now());
        let spec = LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: i32::try_from(self.config.lease_duration.as_secs()).ok(),
            renew_time: Some(now),
            ..LeaseSpec::default()
        };
        let metadata = ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(self.config.namespace.clone()),
            labels: Some(BTreeMap::from([(
                MEMBER_LABEL.to_owned(),
                self.instance.clone(),
            )])),
            annotations: Some(BTreeMap::from([(
                SERVING_ANNOTATION.to_owned(),
                self.claimed.to_hex(),
            )])),
            ..ObjectMeta::default()
        };
        match self.api.get_opt(&name).await? {
            None => {
                let lease = Lease {
                    metadata,
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await?;
            }
            Some(current) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        resource_version: current.metadata.resource_version,
                        ..metadata
                    },
                    spec: Some(LeaseSpec {
                        acquire_time: current.spec.and_then(|s| s.acquire_time),
                        ..spec
                    }),
                };
                self.api
                    .replace(&name, &PostParams::default(), &lease)
                    .await?;
            }
        }
        Ok(())
    }

    /// The other live members and their claims.
    async fn peers(&mut self) -> Result<Vec<Peer>, KubeError> {
        let selector = format!("{MEMBER_LABEL}={}", self.instance);
        let leases = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await?;
        let now = Instant::now();
        let mine = self.lease_name();
        let mut seen = HashMap::new();
        let mut peers = Vec::new();
        for lease in leases {
            let Some(name) = lease.metadata.name.clone().filter(|n| *n != mine) else {
                continue;
            };
            let spec = lease.spec.unwrap_or_default();
            let claim = lease
                .metadata
                .annotations
                .and_then(|mut a| a.remove(SERVING_ANNOTATION));
            let at = match self.observed.remove(&name) {
                Some(o) if o.renewed == spec.renew_time && o.claim == claim => o.at,
                _ => now,
            };
            let duration = Duration::from_secs(
                u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
            );
            let live = now < at + duration;
            if let Some(identity) = spec.holder_identity.filter(|h| !h.is_empty() && live) {
                peers.push(Peer {
                    identity,
                    claim: claim
                        .as_deref()
                        .and_then(Share::from_hex)
                        .unwrap_or_default(),
                });
            }
            seen.insert(
                name,
                Observed {
                    renewed: spec.renew_time,
                    claim,
                    at,
                },
            );
        }
        self.observed = seen;
        Ok(peers)
    }

    /// Stops serving and deletes this replica's Lease.
    async fn leave(&mut self) {
        self.serving.withdraw(Share::ALL);
        self.leadership.follow(None);
        if let Some(publishing) = &self.publishing {
            publishing.follow(None);
        }
        match self
            .api
            .delete(&self.lease_name(), &DeleteParams::default())
            .await
        {
            Ok(_) => info!(identity = %self.config.identity, "left the shards"),
            Err(error) => {
                warn!(error = %Chain(&error), "cannot delete the member Lease; the others take its buckets when it expires")
            }
        }
    }
}

/// Who serves `bucket`, read from member Leases by a client outside the
/// shards (`policyhost status`): the holder of a Lease whose claim holds
/// it and whose renewal, by the wall clock, is within its duration.
#[must_use]
pub fn claimant(leases: &[Lease], bucket: Bucket, now: Timestamp) -> Option<String> {
    leases.iter().find_map(|lease| {
        let spec = lease.spec.as_ref()?;
        let claim = lease
            .metadata
            .annotations
            .as_ref()?
            .get(SERVING_ANNOTATION)?;
        let renewed = spec.renew_time.as_ref()?.0;
        let seconds = i64::from(spec.lease_duration_seconds.unwrap_or(0));
        let live = now.as_second() < renewed.as_second().saturating_add(seconds);
        Share::from_hex(claim)
            .filter(|share| live && share.contains(bucket))
            .and(spec.holder_identity.clone())
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use devcluster::{Config as ClusterConfig, DevCluster};
    use tokio::sync::oneshot;

    use super::*;

    fn config(identity: &str) -> leader::Config {
        leader::Config {
            lease_duration: Duration::from_secs(2),
            renew_deadline: Duration::from_millis(1500),
            retry_period: Duration::from_millis(100),
            ..leader::Config::new("shard", "default", identity)
        }
    }

    /// A member running until the sender is dropped; its buckets.
    fn member(client: &Client, identity: &str) -> (Serving, oneshot::Sender<()>) {
        let serving = Serving::sharded();
        let membership = Membership::new(
            client.clone(),
            config(identity),
            "policyhost",
            Leadership::elected(),
            serving.clone(),
        )
        .expect("valid settings");
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(membership.run(async {
            let _ = stopped.await;
        }));
        (serving, stop)
    }

    async fn until(what: &str, mut holds: impl FnMut() -> bool) {
        tokio::time::timeout(Duration::from_secs(20), async {
            while !holds() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_bucket_moves_only_once_its_call_ended_and_is_never_served_twice() {
        let cluster = DevCluster::start(ClusterConfig::default())
            .await
            .expect("devcluster");
        let client = cluster.client().expect("client");
        let (a, _stop_a) = member(&client, "a");
        until("a to serve every bucket", || a.served() == Share::ALL).await;
        let moving = Ring::new(["a", "b"]).share("b");
        let uid = (0..)
            .map(|i| format!("uid-{i:08x}-{}", i * 7919))
            .find(|uid| moving.owns_uid(uid))
            .expect("a uid in b's share");
        let call = a.begin(&uid).expect("a serves it");
        let (b, _stop_b) = member(&client, "b");
        until("a to withdraw b's share", || {
            a.served().and(moving).is_empty()
        })
        .await;
        // Many rounds while the call runs: neither serves the moving share.
        for _ in 0..50 {
            assert!(a.served().and(moving).is_empty(), "a serves it again");
            assert!(
                b.served().and(moving).is_empty(),
                "b serves it before the call ended"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(call);
        until("b to serve its share", || b.served() == moving).await;
        assert_eq!(a.served(), Share::ALL.without(moving));
    }
}
