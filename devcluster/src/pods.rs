//! Pod simulation, the kubelet's part: Pods are bound to a node, start, and finish after
//! configurable delays, with status conditions and containerStatuses shaped like real ones.
//!
//! Annotations on a Pod change its run:
//! - `devcluster.policyhost.dev/run-seconds`: how long it runs before it exits
//!   (a negative value runs forever);
//! - `devcluster.policyhost.dev/exit-code`: its containers' exit code (non-zero fails it).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::clock;
use crate::object::GroupResource;
use crate::object::ObjectKey;
use crate::ops::{Part, Target, Writer};
use crate::rand::Rng;
use crate::resource::Registry;
use crate::store::{EventKind, ListQuery, Store};

/// The annotation that sets a Pod's run time in seconds.
pub const RUN_SECONDS_ANNOTATION: &str = "devcluster.policyhost.dev/run-seconds";
/// The annotation that sets a Pod's exit code.
pub const EXIT_CODE_ANNOTATION: &str = "devcluster.policyhost.dev/exit-code";
/// The simulated node's name.
pub const NODE_NAME: &str = "devcluster-node";

/// Delays of the simulated kubelet.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSimulation {
    /// From creation to being bound to the node (`PodScheduled`).
    pub schedule_delay: Duration,
    /// From binding to `Running`.
    pub start_delay: Duration,
    /// From `Running` to `Succeeded`, unless the Pod's annotation says otherwise;
    /// `None` keeps Pods running.
    pub run_time: Option<Duration>,
    /// From a graceful delete of a Pod on the node to the kubelet removing it.
    pub stop_delay: Duration,
}

impl Default for PodSimulation {
    fn default() -> Self {
        Self {
            schedule_delay: Duration::from_millis(20),
            start_delay: Duration::from_millis(100),
            run_time: Some(Duration::from_secs(2)),
            stop_delay: Duration::from_millis(100),
        }
    }
}

struct Sim {
    store: Arc<Store>,
    registry: Arc<Registry>,
    rng: Arc<Rng>,
    cfg: PodSimulation,
}

fn pods() -> GroupResource {
    GroupResource::new("", "pods")
}

/// Runs the simulation until the store's pod events stop.
pub(crate) async fn run(
    store: Arc<Store>,
    registry: Arc<Registry>,
    rng: Arc<Rng>,
    cfg: PodSimulation,
) {
    let sim = Arc::new(Sim {
        store,
        registry,
        rng,
        cfg,
    });
    let (existing, mut rx) = {
        let mut txn = sim.store.lock();
        let page = txn.list(&ListQuery::everything(&pods()));
        let rv = txn.rv();
        match (page, txn.watch_from(&pods(), rv)) {
            (Ok(p), Ok((_, rx))) => (p.items, rx),
            _ => return,
        }
    };
    for p in existing {
        if p.meta.field("spec.nodeName").is_none() {
            tokio::spawn(lifecycle(sim.clone(), p.meta.key(), p.meta.uid.clone()));
        }
    }
    loop {
        match rx.recv().await {
            Ok(e) if e.kind == EventKind::Added && e.obj.meta.field("spec.nodeName").is_none() => {
                tokio::spawn(lifecycle(
                    sim.clone(),
                    e.obj.meta.key(),
                    e.obj.meta.uid.clone(),
                ));
            }
            // A graceful delete started: the kubelet stops the containers, then removes it.
            Ok(e)
                if e.kind == EventKind::Modified
                    && e.obj.meta.deleting
                    && !e.prev.as_ref().is_some_and(|p| p.meta.deleting)
                    && e.obj.meta.field("spec.nodeName").is_some() =>
            {
                tokio::spawn(terminate(
                    sim.clone(),
                    e.obj.meta.key(),
                    e.obj.meta.uid.clone(),
                ));
            }
            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

impl Sim {
    /// Changes the Pod if it is still the same one; `false` when it is gone or deleting.
    fn change(
        &self,
        key: &ObjectKey,
        uid: &str,
        part: Part,
        f: impl FnOnce(&mut Value),
    ) -> Option<Value> {
        let rt = self.registry.get(&pods())?;
        let w = Writer {
            registry: &self.registry,
            rng: &self.rng,
            strict: false,
            manager: Some("kubelet"),
        };
        let mut txn = self.store.lock();
        let cur = txn.get(&pods(), key)?;
        if cur.meta.uid != uid || cur.meta.deleting {
            return None;
        }
        let target = Target::of(&rt, &key.namespace, &key.name).through(part);
        let result = w.patch(&mut txn, &target, |mut v| {
            f(&mut v);
            Ok(v)
        });
        match result {
            Ok(s) => s.value().ok(),
            Err(error) => {
                tracing::debug!(pod = %key.name, %error, "pod simulation step failed");
                None
            }
        }
    }
}

/// Stops a terminating Pod's containers and deletes it with a zero grace period.
async fn terminate(sim: Arc<Sim>, key: ObjectKey, uid: String) {
    tokio::time::sleep(sim.cfg.stop_delay).await;
    let Some(rt) = sim.registry.get(&pods()) else {
        return;
    };
    let w = Writer {
        registry: &sim.registry,
        rng: &sim.rng,
        strict: false,
        manager: Some("kubelet"),
    };
    let mut txn = sim.store.lock();
    match txn.get(&pods(), &key) {
        Some(cur) if cur.meta.uid == uid => {}
        _ => return,
    }
    let finished = clock::now_rfc3339();
    let target = Target::of(&rt, &key.namespace, &key.name);
    let stopped = w.patch(&mut txn, &target.through(Part::Status), |mut v| {
        if let Some(statuses) = v["status"]["containerStatuses"].as_array_mut() {
            for s in statuses.iter_mut().filter(|s| s.is_object()) {
                if s["state"]["running"].is_object() {
                    let started = s["state"]["running"]["startedAt"].clone();
                    let id = s["containerID"].clone();
                    s["state"] = json!({"terminated": {
                        "exitCode": 0, "reason": "Completed", "startedAt": started,
                        "finishedAt": finished, "containerID": id,
                    }});
                    s["ready"] = json!(false);
                    s["started"] = json!(false);
                }
            }
        }
        Ok(v)
    });
    if let Err(error) = stopped {
        tracing::debug!(pod = %key.name, %error, "stopping a terminating pod failed");
    }
    let now = crate::ops::DeleteOptions {
        grace_period: Some(0),
        ..crate::ops::DeleteOptions::default()
    };
    if let Err(error) = w.delete(&mut txn, &target, &now) {
        tracing::debug!(pod = %key.name, %error, "removing a terminated pod failed");
    }
}

fn condition(kind: &str, status: bool, now: &str, reason: Option<&str>) -> Value {
    let mut c = json!({"type": kind, "status": if status { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": now});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    c
}

fn containers(v: &Value) -> Vec<(String, String)> {
    v["spec"]["containers"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap_or("main").to_owned(),
                        c["image"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn lifecycle(sim: Arc<Sim>, key: ObjectKey, uid: String) {
    tokio::time::sleep(sim.cfg.schedule_delay).await;
    let Some(_) = sim.change(&key, &uid, Part::Main, |v| {
        crate::object::set_at(v, &["spec", "nodeName"], json!(NODE_NAME));
    }) else {
        return;
    };
    let now = clock::now_rfc3339();
    let Some(pod) = sim.change(&key, &uid, Part::Status, |v| {
        crate::object::set_at(
            v,
            &["status", "conditions"],
            json!([condition("PodScheduled", true, &now, None)]),
        );
    }) else {
        return;
    };
    tokio::time::sleep(sim.cfg.start_delay).await;
    let started = clock::now_rfc3339();
    let ip = format!(
        "10.244.{}.{}",
        (sim.rng.next_u64() % 250) + 1,
        (sim.rng.next_u64() % 250) + 2
    );
    let cs = containers(&pod);
    let Some(pod) = sim.change(&key, &uid, Part::Status, |v| {
        let statuses: Vec<Value> = cs
            .iter()
            .map(|(name, image)| {
                json!({
                    "name": name, "image": image, "imageID": format!("docker.io/library/{image}@sha256:0"),
                    "containerID": format!("containerd://{:016x}", sim.rng.next_u64()),
                    "ready": true, "started": true, "restartCount": 0,
                    "state": {"running": {"startedAt": started}},
                })
            })
            .collect();
        v["status"] = json!({
            "phase": "Running",
            "qosClass": "BestEffort",
            "hostIP": "10.0.0.10",
            "hostIPs": [{"ip": "10.0.0.10"}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": started,
            "conditions": [
                condition("PodReadyToStartContainers", true, &started, None),
                condition("Initialized", true, &started, None),
                condition("Ready", true, &started, None),
                condition("ContainersReady", true, &started, None),
                condition("PodScheduled", true, &started, None),
            ],
            "containerStatuses": statuses,
        });
    }) else {
        return;
    };
    let annotations = &pod["metadata"]["annotations"];
    let exit_code: i64 = annotations[EXIT_CODE_ANNOTATION]
        .as_str()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let run = match annotations[RUN_SECONDS_ANNOTATION]
        .as_str()
        .and_then(|s| s.trim().parse::<f64>().ok())
    {
        Some(s) if s < 0.0 => None,
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => sim
            .cfg
            .run_time
            .or((exit_code != 0).then_some(Duration::from_secs(1))),
    };
    let Some(run) = run else { return };
    tokio::time::sleep(run).await;
    let finished = clock::now_rfc3339();
    let (phase, reason) = if exit_code == 0 {
        ("Succeeded", "Completed")
    } else {
        ("Failed", "Error")
    };
    sim.change(&key, &uid, Part::Status, |v| {
        crate::object::set_at(v, &["status", "phase"], json!(phase));
        let st = &mut v["status"];
        if let Some(conds) = st["conditions"].as_array_mut() {
            for c in conds.iter_mut().filter(|c| c.is_object()) {
                if matches!(
                    c["type"].as_str(),
                    Some("Ready" | "ContainersReady" | "PodReadyToStartContainers")
                ) {
                    c["status"] = json!("False");
                    c["lastTransitionTime"] = json!(finished);
                    if c["type"] != "PodReadyToStartContainers" {
                        c["reason"] = json!("PodCompleted");
                    }
                }
            }
        }
        if let Some(statuses) = st["containerStatuses"].as_array_mut() {
            for s in statuses.iter_mut().filter(|s| s.is_object()) {
                let container_id = s["containerID"].clone();
                s["ready"] = json!(false);
                s["started"] = json!(false);
                s["state"] = json!({"terminated": {
                    "exitCode": exit_code, "reason": reason, "startedAt": started,
                    "finishedAt": finished, "containerID": container_id,
                }});
            }
        }
    });
}
