//! Keeps a bucket in an external storage service for each DataJob, and
//! deletes it before the DataJob goes: the finalizer's real purpose, a
//! resource garbage collection cannot reach.
//!
//! Params (camelCase): `service` (required: the storage API's base URL, an
//! origin the platform team granted, such as `https://storage.example.com`),
//! `bucket` (default `<namespace>-<name>`), `region` (default `eu`).
//!
//! # Reconcile
//!
//! `PUT <service>/buckets/<bucket>` with `{"region", "owner"}` (the owner is
//! the DataJob's uid) and the call's idempotency key: idempotent, so every
//! reconcile makes sure the bucket exists, also after someone deleted it
//! by hand. A 2xx answer gives phase `Running`, condition
//! `BucketReady=True` and outputs `{bucket, url}`; any other answer, a
//! refusal or a network error is the policy's `failed` error, which the
//! host retries with backoff. No children.
//!
//! # Cleanup
//!
//! `DELETE <service>/buckets/<bucket>`: 404 means gone, `done`. A 2xx means
//! the service took the deletion; `GET` then confirms it: 404 is `done`,
//! anything else `retry-after` 1000 ms. Every other answer, a refusal or a
//! network error is `failed`: the finalizer stays and the host retries.
//! So the DataJob is released only once the service says the bucket is gone.

use policyhost_sdk::http::{Request, Response};
use policyhost_sdk::{
    Child, Cleanup, Condition, Context, Job, Phase, Policy, PolicyError, Reconcile, Result, Status,
};
use serde::{Deserialize, Serialize};

/// How long cleanup waits after a deletion the service has not finished.
pub const CLEANUP_RETRY_MS: u64 = 1000;

/// The condition type reporting the bucket exists.
pub const BUCKET_READY: &str = "BucketReady";

/// The bucket policy.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bucket;

policyhost_sdk::export!(Bucket);

/// `spec.params`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Params {
    /// The storage API's base URL.
    pub service: String,
    /// The bucket's name (default `<namespace>-<name>`).
    #[serde(default)]
    pub bucket: Option<String>,
    /// Where the bucket lives.
    #[serde(default = "default_region")]
    pub region: String,
}

fn default_region() -> String {
    "eu".to_owned()
}

/// `status.outputs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outputs {
    /// The bucket's name.
    pub bucket: String,
    /// Its URL.
    pub url: String,
}

impl Params {
    fn url(&self, job: &Job) -> String {
        let name = self
            .bucket
            .clone()
            .unwrap_or_else(|| format!("{}-{}", job.namespace, job.name));
        format!("{}/buckets/{name}", self.service.trim_end_matches('/'))
    }
}

impl Policy for Bucket {
    type Params = Params;

    fn reconcile(job: &Job, params: Params, _: &[Child], ctx: &Context) -> Result<Reconcile> {
        let url = params.url(job);
        let body = serde_json::json!({ "region": params.region, "owner": job.uid }).to_string();
        let response = Request::put(&url)
            .header("content-type", "application/json")
            .header("idempotency-key", &ctx.idempotency_key)
            .body(body)
            .send()
            .map_err(|error| failed("PUT", &url, &error))?;
        if !response.is_success() {
            return Err(answered("PUT", &url, &response));
        }
        let bucket = url.rsplit('/').next().unwrap_or_default().to_owned();
        let status = Status::new(Phase::Running)
            .message(format!("bucket {bucket} exists"))
            .condition(Condition::new(
                BUCKET_READY,
                true,
                "Created",
                format!(
                    "the storage service answered {} to PUT {url}",
                    response.status
                ),
            ))
            .outputs(&Outputs { bucket, url })?;
        Ok(Reconcile::new(status))
    }

    fn cleanup(job: &Job, _: &[Child], ctx: &Context) -> Result<Cleanup> {
        let params: Params = job.params()?;
        let url = params.url(job);
        let deleted = Request::delete(&url)
            .header("idempotency-key", &ctx.idempotency_key)
            .send()
            .map_err(|error| failed("DELETE", &url, &error))?;
        match deleted.status {
            404 => return Ok(Cleanup::Done),
            status if (200..300).contains(&status) => {}
            _ => return Err(answered("DELETE", &url, &deleted)),
        }
        let confirmed = Request::get(&url)
            .send()
            .map_err(|error| failed("GET", &url, &error))?;
        Ok(if confirmed.status == 404 {
            Cleanup::Done
        } else {
            Cleanup::RetryAfter {
                ms: CLEANUP_RETRY_MS,
            }
        })
    }
}

fn failed(method: &str, url: &str, error: &policyhost_sdk::http::Error) -> PolicyError {
    PolicyError::failed_with(format!("{method} {url}: {error}"))
}

fn answered(method: &str, url: &str, response: &Response) -> PolicyError {
    PolicyError::failed_with(format!(
        "{method} {url} answered {}: {}",
        response.status,
        response.text().chars().take(200).collect::<String>()
    ))
}
