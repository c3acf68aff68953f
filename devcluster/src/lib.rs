//! devcluster: a Kubernetes-compatible API server for development and tests.
//!
//! It speaks the Kubernetes REST protocol over HTTP, so kube-rs and `kubectl` drive it
//! unchanged: resourceVersions, watches with bookmarks and 410 Gone, conflicts,
//! finalizers, ownerReference garbage collection, status subresources, CRDs with printer
//! columns. It also simulates Pod phases and injects faults for reliability tests.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = devcluster::DevCluster::start(devcluster::Config::default()).await?;
//! cluster.write_kubeconfig("/tmp/devcluster.kubeconfig")?;
//! let client = cluster.client()?;
//! # drop(client);
//! assert_eq!(cluster.counters().count("list", "pods"), 0);
//! cluster.shutdown().await;
//! # Ok(()) }
//! ```

pub mod apply;
pub mod cli;
mod clock;
mod cluster;
mod convert;
pub mod counters;
mod discovery;
pub mod faults;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
mod gc;
mod gotypes;
mod http;
pub mod kinds;
pub mod kubeconfig;
mod object;
mod ops;
mod pagination;
pub mod patch;
pub mod pods;
mod proto;
mod rand;
mod resource;
pub mod schema;
mod selector;
mod sharding;
mod status;
mod store;
mod table;

pub use cluster::{Config, DevCluster, Error, Features, Result};
pub use counters::Counters;
pub use faults::{ErrorRule, FaultControls, Faults};
pub use pods::PodSimulation;
