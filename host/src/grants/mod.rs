//! The grant ConfigMap of a policy, whole: the platform team's word on what
//! a policy may reach (the network half, [`network`]) and where its
//! artifacts may be pulled from (the registries half, [`pull`]), kept per
//! policy with the Secrets it names read ([`Grants`]) and watched
//! ([`GrantWatch`]). The clients below take typed terms from here
//! ([`crate::outbound::Grant`], [`crate::oci::PullGrant`]) and know
//! nothing of the ConfigMap.
//!
//! The grant is the platform team's, not the policy's team's: it lives in
//! its own ConfigMap, `grant-<policy>`, beside the policy ConfigMap, so the
//! Role that lets a team push `policy-<policy>` lets it change nothing here.
//!
//! ```yaml
//! apiVersion: v1
//! kind: ConfigMap
//! metadata:
//!   name: grant-bucket                 # grant-<policy>
//!   namespace: policyhost-system       # the host's --policy-namespace
//!   labels:
//!     policyhost.dev/grant: bucket     # the policy it grants
//! data:
//!   origins: https://storage.example.com, https://*.storage.example.com:8443
//!   requestsPerCall: "8"               # requests one call may make (default 8)
//!   requestBodyBytes: 64Ki             # bytes of one request body (default 64Ki)
//!   responseBodyBytes: 1Mi             # bytes of one response body (default 1Mi)
//!   networkShare: 50%                  # of the call's deadline, waiting on the network (default 50%)
//!   concurrency: "4"                   # requests in flight across the policy's calls (default 4)
//!   credentials: |                     # ORIGIN HEADER SECRET/KEY, one per line
//!     https://storage.example.com authorization storage-token/token
//! ```
//!
//! A credential's Secret is in the host's own namespace, and its value is
//! the whole header value (`Bearer …`): the host adds the header to every
//! request to that origin, over whatever the policy set; the policy's
//! request never shows it the value, and what a server sends back of it is
//! redacted from all the policy publishes ([`crate::outbound::redact`]).

pub mod network;
pub mod pull;
mod store;
mod watch;

pub use store::{Applied, Grants, Misnamed, PullSecretProblem, Refused};
pub use watch::GrantWatch;

/// The name of the ConfigMap that grants `policy`.
#[must_use]
pub fn grant_name(policy: &str) -> String {
    format!("grant-{policy}")
}

/// `data` keys of a grant ConfigMap.
pub mod keys {
    /// Origin patterns, comma or newline separated (required).
    pub const ORIGINS: &str = "origins";
    /// Requests one call may make: a positive integer.
    pub const REQUESTS_PER_CALL: &str = "requestsPerCall";
    /// Bytes of one request body: a byte quantity.
    pub const REQUEST_BODY_BYTES: &str = "requestBodyBytes";
    /// Bytes of one response body: a byte quantity.
    pub const RESPONSE_BODY_BYTES: &str = "responseBodyBytes";
    /// The share of a call's deadline it may spend waiting on the network:
    /// a percentage, 1 to 100.
    pub const NETWORK_SHARE: &str = "networkShare";
    /// Requests in flight at once across all of the policy's calls.
    pub const CONCURRENCY: &str = "concurrency";
    /// `ORIGIN HEADER SECRET/KEY` lines.
    pub const CREDENTIALS: &str = "credentials";
    /// Free text for people.
    pub const DESCRIPTION: &str = "description";
    /// Repository prefixes the policy's artifacts may be pulled from
    /// ([`crate::grants::pull`]).
    pub const REGISTRIES: &str = "registries";
    /// The `kubernetes.io/dockerconfigjson` Secret to pull them with.
    pub const PULL_SECRET: &str = "pullSecret";

    /// Every key the host reads, the network half's first.
    pub const ALL: &[&str] = &[
        ORIGINS,
        REQUESTS_PER_CALL,
        REQUEST_BODY_BYTES,
        RESPONSE_BODY_BYTES,
        NETWORK_SHARE,
        CONCURRENCY,
        CREDENTIALS,
        DESCRIPTION,
        REGISTRIES,
        PULL_SECRET,
    ];

    /// The keys of the network half of a grant (the first seven of
    /// [`ALL`]): present, the grant must name its origins.
    pub const NETWORK: &[&str] = ALL.split_at(7).0;
}

#[cfg(test)]
mod tests {
    use super::keys;

    #[test]
    fn the_network_half_is_every_key_but_the_registries_and_the_description() {
        let others: Vec<&str> = keys::ALL
            .iter()
            .copied()
            .filter(|key| !keys::NETWORK.contains(key))
            .collect();
        assert_eq!(
            others,
            [keys::DESCRIPTION, keys::REGISTRIES, keys::PULL_SECRET]
        );
        assert!(keys::NETWORK.contains(&keys::CREDENTIALS));
    }
}
