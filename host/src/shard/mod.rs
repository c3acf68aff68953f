//! Shards: the DataJobs split over replicas by the hash of their uid, the
//! way kube-apiserver's `shardSelector` (KEP-5866) splits lists and watches.
//!
//! The hash space of 64-bit FNV-1a is cut into [`BUCKETS`] equal buckets
//! (the top bits of the hash), so a bucket is one `shardRange` and a run of
//! neighbouring buckets is one too. A [`Ring`] (the live members and the
//! epoch their set defines) gives every bucket one owner, the same on every
//! replica that sees the same members: each bucket goes to the member that
//! ranks it highest (rendezvous hashing), capped at an even load, so a
//! member joining or leaving moves about 1/N of the buckets and every
//! member holds ⌊B/N⌋ or ⌈B/N⌉. A member's [`Share`] names its buckets as a
//! shard selector for the API server and checks each object itself: a
//! watch event carries no `shardInfo`, and a server without the feature
//! gate ignores the selector and sends everything
//! ([`probe::server_filters`] tells which).

mod hash;
pub mod labels;
mod membership;
pub mod probe;
mod replicas;
mod ring;
mod serving;
mod share;

pub use hash::{BUCKETS, Bucket, fnv1a_64};
pub use membership::{MEMBER_LABEL, Membership, SERVING_ANNOTATION, claimant};
pub use replicas::Replicas;
pub use ring::{Epoch, Ring};
pub use serving::{InFlight, Serving};
pub use share::Share;
