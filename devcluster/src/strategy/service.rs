//! Services: spec defaults and an allocated cluster IP.

use serde_json::Value;

use super::Strategy;
use crate::rand::Rng;
use crate::resource::ResourceType;
use crate::status::Result;

/// The Service strategy.
#[derive(Debug)]
pub(crate) struct Services;

impl Strategy for Services {
    fn prepare_for_create(&self, _rt: &ResourceType, body: &mut Value, rng: &Rng) -> Result<()> {
        crate::defaults::service(body, rng);
        Ok(())
    }
}
