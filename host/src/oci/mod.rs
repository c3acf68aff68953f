//! Policies as OCI artifacts: a policy ConfigMap may name, instead of the
//! component's bytes, a reference `REGISTRY/REPOSITORY@sha256:DIGEST`.
//!
//! The host pulls it as the policy's grant allows ([`pull::PullGrant`]:
//! repository prefixes and a pull secret, both the platform team's), with
//! its own small registry client ([`client`]: capped bodies, redirects only
//! to allowed registries), checks the artifact's layout ([`artifact`]),
//! and keeps what it pulled on disk by digest ([`cache`]). A host given
//! the platform team's keys pulls only what one of them signed, in
//! cosign's keyed format ([`signature`]). `policy push --oci [--sign-key]`
//! writes the same layout and signature ([`push`]).

pub mod artifact;
pub mod cache;
pub mod client;
pub mod credentials;
pub mod pull;
pub mod push;
pub mod reference;
pub mod signature;

pub use self::cache::BlobCache;
pub use self::client::{Client, ClientConfig};
pub use self::credentials::{Basic, Credentials};
pub use self::pull::{PullError, PullGrant, Pulled, Puller};
pub use self::reference::{Prefix, Reference};

/// Text a registry sent (a media type, a parse error quoting it, a
/// challenge), as an error shows it: at most 120 characters, so that a
/// hostile registry cannot fill the annotations and Events it ends up in.
pub(crate) fn shown(text: &str) -> String {
    text.chars().take(120).collect()
}
