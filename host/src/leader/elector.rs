//! The election loop: take the Lease, renew it, release it.

use std::future::Future;
use std::hash::{BuildHasher as _, BuildHasherDefault, DefaultHasher};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, Error as KubeError};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::{Config, Leadership, Result};
use crate::chain::Chain;

/// What one attempt to take or renew the Lease found.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// This replica holds the Lease; the attempt started then.
    Held(Instant),
    /// Another replica holds it and its lease has not run out.
    Taken(String),
    /// Somebody wrote the Lease between our read and our write.
    Conflict,
}

/// The Lease as last seen, and when its content last changed on our clock.
struct Observed {
    lease: Lease,
    at: Instant,
}

/// Campaigns for the Lease and keeps it while it can; see the
/// [module documentation](super) for the rules.
pub struct Elector {
    api: Api<Lease>,
    config: Config,
    leadership: Leadership,
    observed: Option<Observed>,
    attempts: u64,
}

impl Elector {
    /// An elector for `config`, deciding `leadership` (which should come
    /// from [`Leadership::elected`]).
    ///
    /// `client` should not be the fenced client: renewals are writes that
    /// must go out while the fence is closed, and must not queue behind a
    /// throttled reconcile storm.
    pub fn new(client: Client, config: Config, leadership: Leadership) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            leadership,
            observed: None,
            attempts: 0,
        })
    }

    /// Campaigns and leads until `stop` completes, then releases the Lease
    /// if it holds it. Complete `stop` only once the work that needs the
    /// Lease has stopped: until then the leader keeps renewing.
    pub async fn run(mut self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        info!(
            identity = %self.config.identity,
            lease = %self.config.lease_name,
            namespace = %self.config.namespace,
            "campaigning for the leader Lease"
        );
        loop {
            // Follow until the Lease is ours.
            let anchor = loop {
                // Bounded, so a hung API server does not stall the campaign;
                // a takeover whose answer was lost shows as ours next time.
                let attempt = tokio::select! {
                    biased;
                    () = &mut stop => return,
                    attempt = tokio::time::timeout(self.config.renew_deadline, self.try_acquire_or_renew()) => attempt,
                };
                match attempt {
                    // Taken too late to write under it: keep campaigning (renew).
                    Ok(Ok(Attempt::Held(anchor)))
                        if anchor + self.config.renew_deadline > Instant::now() =>
                    {
                        break anchor;
                    }
                    Ok(Ok(Attempt::Held(_))) => {}
                    Ok(Ok(Attempt::Taken(holder))) => self.leadership.follow(Some(holder)),
                    Ok(Ok(Attempt::Conflict)) => {}
                    Ok(Err(error)) => {
                        warn!(error = %Chain(&error), "cannot read or take the leader Lease")
                    }
                    Err(_) => warn!("no answer from the API server about the leader Lease"),
                }
                tokio::select! {
                    biased;
                    () = &mut stop => return,
                    () = tokio::time::sleep(self.jittered_retry()) => {}
                }
            };
            self.leadership
                .lead_until(anchor + self.config.renew_deadline, &self.config.identity);
            info!(identity = %self.config.identity, "leading: this replica reconciles");

            // Lead until a renewal fails for the renew deadline or another holder shows up.
            while let Some(valid_until) = self.leadership.valid_until() {
                let next = (Instant::now() + self.config.retry_period).min(valid_until);
                tokio::select! {
                    biased;
                    () = &mut stop => {
                        self.release().await;
                        return;
                    }
                    () = tokio::time::sleep_until(next) => {}
                }
                if Instant::now() >= valid_until {
                    warn!(
                        identity = %self.config.identity,
                        renew_deadline = ?self.config.renew_deadline,
                        "leadership lost: no successful renewal within the renew deadline; writes stopped"
                    );
                    self.leadership.follow(None);
                    break;
                }
                let renewed = tokio::select! {
                    biased;
                    () = &mut stop => {
                        self.release().await;
                        return;
                    }
                    renewed = tokio::time::timeout_at(valid_until, self.try_acquire_or_renew()) => renewed,
                };
                match renewed {
                    Ok(Ok(Attempt::Held(anchor))) => self
                        .leadership
                        .lead_until(anchor + self.config.renew_deadline, &self.config.identity),
                    Ok(Ok(Attempt::Taken(holder))) => {
                        warn!(identity = %self.config.identity, %holder, "leadership lost: another replica holds the Lease; writes stopped");
                        self.leadership.follow(Some(holder));
                        break;
                    }
                    Ok(Ok(Attempt::Conflict)) => {
                        debug!("the Lease changed under the renewal; reading it again");
                    }
                    Ok(Err(error)) => {
                        warn!(error = %Chain(&error), "cannot renew the leader Lease")
                    }
                    // The loop top sees the validity has passed.
                    Err(_) => {}
                }
            }
        }
    }

    /// Reads the Lease and takes or renews it if it is free, expired or ours.
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, KubeError> {
        self.attempts = self.attempts.wrapping_add(1);
        let started = Instant::now();
        let now = MicroTime(Timestamp::now());
        let name = self.config.lease_name.clone();
        let name = name.as_str();
        let Some(current) = self.api.get_opt(name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(self.config.lease_seconds()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(created);
                    Ok(Attempt::Held(started))
                }
                Err(KubeError::Api(status)) if status.code == 409 => Ok(Attempt::Conflict),
                Err(error) => Err(error),
            };
        };
        self.observe(current.clone());
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let mine = holder.as_deref() == Some(self.config.identity.as_str());
        if let Some(holder) = holder.as_ref().filter(|_| !mine) {
            let seconds = u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0);
            let seen = self.observed.as_ref().map_or(started, |o| o.at);
            if seen + Duration::from_secs(seconds) > Instant::now() {
                return Ok(Attempt::Taken(holder.clone()));
            }
            info!(%holder, "the leader Lease has expired; taking it");
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        let mut update = current;
        update.spec = Some(LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.config.lease_seconds()),
            acquire_time: if mine {
                spec.acquire_time.clone()
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if mine {
                transitions
            } else {
                transitions.saturating_add(1)
            }),
            ..spec
        });
        // The update carries the resourceVersion read above: a concurrent
        // writer makes it fail with 409 instead of being overwritten.
        match self
            .api
            .replace(name, &PostParams::default(), &update)
            .await
        {
            Ok(stored) => {
                self.observe(stored);
                Ok(Attempt::Held(started))
            }
            Err(KubeError::Api(status)) if status.code == 409 => Ok(Attempt::Conflict),
            Err(error) => Err(error),
        }
    }

    /// Remembers `lease`; its observation time moves only when its spec changed.
    fn observe(&mut self, lease: Lease) {
        match &mut self.observed {
            Some(observed) if observed.lease.spec == lease.spec => observed.lease = lease,
            _ => {
                self.observed = Some(Observed {
                    lease,
                    at: Instant::now(),
                });
            }
        }
    }

    /// Gives the Lease up (empty holder, one-second duration) so a follower
    /// takes it at its next attempt. Writes are fenced first.
    async fn release(&mut self) {
        self.leadership.follow(None);
        let Some(observed) = &self.observed else {
            return;
        };
        let mut lease = observed.lease.clone();
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        let now = MicroTime(Timestamp::now());
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            ..spec
        });
        match self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!(identity = %self.config.identity, "released the leader Lease"),
            Err(error) => {
                warn!(error = %Chain(&error), "cannot release the leader Lease; followers take it when it expires")
            }
        }
    }

    /// The retry period plus up to 20%, different per replica and attempt,
    /// so candidates do not knock on the Lease in step.
    fn jittered_retry(&self) -> Duration {
        let hash = BuildHasherDefault::<DefaultHasher>::default()
            .hash_one((self.config.identity.as_str(), self.attempts));
        #[allow(clippy::cast_precision_loss)] // a fraction needs no more precision
        let fraction = (hash % 1000) as f64 / 1000.0;
        self.config.retry_period.mul_f64(1.0 + 0.2 * fraction)
    }
}

#[cfg(test)]
mod tests {
    use devcluster::{Config as ClusterConfig, DevCluster};
    use k8s_openapi::api::core::v1::Namespace;

    use super::*;

    async fn cluster() -> (DevCluster, Client) {
        let cluster = DevCluster::start(ClusterConfig::default())
            .await
            .expect("devcluster");
        let client = cluster.client().expect("client");
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: ObjectMeta {
                        name: Some("ops".into()),
                        ..ObjectMeta::default()
                    },
                    ..Namespace::default()
                },
            )
            .await
            .expect("namespace");
        (cluster, client)
    }

    fn config(identity: &str) -> Config {
        Config {
            lease_duration: Duration::from_secs(2),
            renew_deadline: Duration::from_millis(1500),
            retry_period: Duration::from_millis(100),
            ..Config::new("lock", "ops", identity)
        }
    }

    fn elector(client: &Client, identity: &str) -> (Elector, Leadership) {
        let leadership = Leadership::elected();
        let elector =
            Elector::new(client.clone(), config(identity), leadership.clone()).expect("valid");
        (elector, leadership)
    }

    async fn holder(client: &Client) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(client.clone(), "ops");
        leases
            .get("lock")
            .await
            .ok()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
    }

    /// The Lease's holders, write by write, from the state `since` until `identity` holds it.
    async fn holders_until(
        leases: &Api<Lease>,
        since: &ObjectMeta,
        identity: &str,
    ) -> Vec<Option<String>> {
        use futures::StreamExt;
        let rv = since
            .resource_version
            .as_deref()
            .expect("a resourceVersion");
        let params = kube::api::WatchParams::default().fields("metadata.name=lock");
        let mut events = leases.watch(&params, rv).await.expect("watch").boxed();
        let mut holders = Vec::new();
        while let Some(event) = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("the Lease changes")
        {
            let lease = match event.expect("an event") {
                kube::api::WatchEvent::Added(l) | kube::api::WatchEvent::Modified(l) => l,
                _ => continue,
            };
            let holder = lease.spec.and_then(|s| s.holder_identity);
            let done = holder.as_deref() == Some(identity);
            holders.push(holder);
            if done {
                break;
            }
        }
        holders
    }

    #[tokio::test]
    async fn the_first_candidate_creates_the_lease_and_the_second_waits() {
        let (cluster, client) = cluster().await;
        let (mut a, _) = elector(&client, "a");
        let (mut b, _) = elector(&client, "b");
        assert!(matches!(
            a.try_acquire_or_renew().await.expect("a"),
            Attempt::Held(_)
        ));
        assert_eq!(
            b.try_acquire_or_renew().await.expect("b"),
            Attempt::Taken("a".into())
        );
        // Renewing keeps the holder and the transitions count.
        assert!(matches!(
            a.try_acquire_or_renew().await.expect("a renews"),
            Attempt::Held(_)
        ));
        let leases: Api<Lease> = Api::namespaced(client.clone(), "ops");
        let spec = leases.get("lock").await.expect("lease").spec.expect("spec");
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.lease_duration_seconds, Some(2));
        cluster.shutdown().await;
    }

    #[tokio::test]
    async fn a_candidate_takes_the_lease_only_after_the_duration_on_its_own_clock() {
        let (cluster, client) = cluster().await;
        let (mut a, _) = elector(&client, "a");
        let (mut b, _) = elector(&client, "b");
        assert!(matches!(
            a.try_acquire_or_renew().await.expect("a"),
            Attempt::Held(_)
        ));
        let first_seen = Instant::now();
        // `a` stops renewing. `b` keeps asking: refused until two seconds
        // after it first saw the record.
        let taken_at = loop {
            match b.try_acquire_or_renew().await.expect("b") {
                Attempt::Held(_) => break Instant::now(),
                Attempt::Taken(holder) => assert_eq!(holder, "a"),
                Attempt::Conflict => {}
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            taken_at.duration_since(first_seen) >= Duration::from_secs(2),
            "taken after {:?}",
            taken_at.duration_since(first_seen)
        );
        assert_eq!(holder(&client).await.as_deref(), Some("b"));
        let leases: Api<Lease> = Api::namespaced(client.clone(), "ops");
        let spec = leases.get("lock").await.expect("lease").spec.expect("spec");
        assert_eq!(spec.lease_transitions, Some(1));
        // The old holder's next attempt sees the new holder.
        assert_eq!(
            a.try_acquire_or_renew().await.expect("a"),
            Attempt::Taken("b".into())
        );
        cluster.shutdown().await;
    }

    #[tokio::test]
    async fn a_lease_update_with_a_stale_resource_version_conflicts() {
        let (cluster, client) = cluster().await;
        let (mut a, _) = elector(&client, "a");
        assert!(matches!(
            a.try_acquire_or_renew().await.expect("a"),
            Attempt::Held(_)
        ));
        // Another writer changes the Lease after `a` read it.
        let leases: Api<Lease> = Api::namespaced(client.clone(), "ops");
        let mut stale = a.observed.as_ref().expect("observed").lease.clone();
        let mut other = stale.clone();
        other.spec.as_mut().expect("spec").holder_identity = Some("intruder".into());
        leases
            .replace("lock", &PostParams::default(), &other)
            .await
            .expect("the intruder writes first");
        stale.spec.as_mut().expect("spec").renew_time = Some(MicroTime(Timestamp::now()));
        let refused = leases
            .replace("lock", &PostParams::default(), &stale)
            .await
            .expect_err("a write with the old resourceVersion");
        assert!(matches!(refused, KubeError::Api(s) if s.code == 409));
        cluster.shutdown().await;
    }

    #[tokio::test]
    async fn a_running_elector_leads_renews_and_releases_on_stop() {
        let (cluster, client) = cluster().await;
        let (a, leading) = elector(&client, "a");
        let (b, following) = elector(&client, "b");
        let (stop_a, stopped_a) = tokio::sync::oneshot::channel::<()>();
        let (stop_b, stopped_b) = tokio::sync::oneshot::channel::<()>();
        let task_a = tokio::spawn(a.run(async {
            let _ = stopped_a.await;
        }));
        let mut changes = leading.subscribe();
        tokio::time::timeout(Duration::from_secs(10), changes.wait_for(|l| *l))
            .await
            .expect("a leads")
            .expect("open");
        let task_b = tokio::spawn(b.run(async {
            let _ = stopped_b.await;
        }));
        // Well past the lease duration, `a` still leads: it renews.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(leading.permits_writes());
        assert!(!following.permits_writes());
        assert_eq!(
            following.role(),
            super::super::Role::Follower {
                leader: Some("a".into())
            }
        );
        // A graceful stop releases the Lease: `b` takes it at its next
        // attempt, without waiting for it to expire.
        let leases: Api<Lease> = Api::namespaced(client.clone(), "ops");
        let before = leases.get("lock").await.expect("the Lease").metadata;
        let _ = stop_a.send(());
        task_a.await.expect("a stops");
        assert!(!leading.permits_writes());
        let mut changes = following.subscribe();
        tokio::time::timeout(Duration::from_secs(10), changes.wait_for(|l| *l))
            .await
            .expect("b leads")
            .expect("open");
        let holders = holders_until(&leases, &before, "b").await;
        let released = holders.iter().position(Option::is_none);
        let taken = holders.iter().position(|h| h.as_deref() == Some("b"));
        assert!(
            released.is_some() && released < taken,
            "the Lease went from `a` to `b` unreleased: {holders:?}"
        );
        assert_eq!(holder(&client).await.as_deref(), Some("b"));
        let _ = stop_b.send(());
        task_b.await.expect("b stops");
        assert_eq!(holder(&client).await, None);
        cluster.shutdown().await;
    }

    #[tokio::test]
    async fn a_leader_that_cannot_renew_stops_writing_at_its_renew_deadline() {
        let (cluster, client) = cluster().await;
        let (a, leading) = elector(&client, "a");
        let task = tokio::spawn(a.run(std::future::pending()));
        let mut changes = leading.subscribe();
        tokio::time::timeout(Duration::from_secs(10), changes.wait_for(|l| *l))
            .await
            .expect("a leads")
            .expect("open");
        // Every Lease request fails from now on.
        cluster.faults().set(devcluster::Faults {
            errors: vec![devcluster::ErrorRule {
                verb: None,
                resource: Some("leases".into()),
                rate: 1.0,
                code: 500,
                retry_after_seconds: None,
            }],
            ..devcluster::Faults::default()
        });
        let cut = Instant::now();
        tokio::time::timeout(Duration::from_secs(10), changes.wait_for(|l| !*l))
            .await
            .expect("a stops leading")
            .expect("open");
        let after = cut.elapsed();
        assert!(!leading.permits_writes());
        assert!(
            after <= Duration::from_millis(1500) + Duration::from_millis(500),
            "stopped {after:?} after the API server went away (renew deadline 1.5 s)"
        );
        task.abort();
        cluster.shutdown().await;
    }
}
