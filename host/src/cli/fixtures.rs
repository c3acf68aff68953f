//! HTTP fixtures for `policy run --http-fixtures` and `policy test`: the
//! component's requests answered from canned exchanges, under a grant of
//! exactly their origins, so a run needs no network and replays the same.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use policyhost::outbound::{Fixtures, Outbound, grant_for};
use policyhost_sdk::http::Exchange;

/// Reads a JSON list of exchanges (the format of the SDK's
/// `policyhost_sdk::http::Exchange`).
pub(super) fn read(path: &Path) -> anyhow::Result<Vec<Exchange>> {
    let text = super::read(path)?;
    serde_json::from_slice(&text)
        .with_context(|| format!("{} is not a JSON list of HTTP exchanges", path.display()))
}

/// A grant of the exchanges' origins whose requests are answered from the
/// returned fixtures.
pub(super) fn replaying(exchanges: &[Exchange]) -> anyhow::Result<(Arc<Outbound>, Fixtures)> {
    let grant = grant_for(exchanges).context("the HTTP fixtures name an invalid origin")?;
    let (outbound, fixtures) = Outbound::replaying(grant);
    Ok((Arc::new(outbound), fixtures))
}
