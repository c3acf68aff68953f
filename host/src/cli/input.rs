//! Reading a DataJob and its children from files into a call's input.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use policyhost::projection;
use policyhost::runtime::{Context, Input};

/// Builds the call input from a DataJob file and an optional children file.
pub(crate) fn load(
    job: &Path,
    children: Option<&Path>,
    now_unix_ms: Option<u64>,
    attempt: u32,
) -> anyhow::Result<Input> {
    let text =
        std::fs::read_to_string(job).with_context(|| format!("cannot read {}", job.display()))?;
    let job =
        projection::data_job_from_yaml(&text).with_context(|| format!("in {}", job.display()))?;
    let children = match children {
        None => Vec::new(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let objects = projection::objects_from_yaml(&text)
                .with_context(|| format!("in {}", path.display()))?;
            projection::children(&objects).with_context(|| format!("in {}", path.display()))?
        }
    };
    let now = now_unix_ms.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    });
    Ok(Input {
        job: projection::data_job(&job),
        children,
        ctx: Context {
            now_unix_ms: now,
            attempt,
            policy_digest: String::new(),
        },
    })
}
