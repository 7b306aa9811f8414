//! SSM parameter resolution for AMI selection: the EKS-published AMI parameters behind
//! aliases and users' own `ssmParameter` terms. Values of immutable parameters (pinned
//! versions) are cached for a day; mutable ones (`latest`, users' parameters) for 30 minutes,
//! so a newly published AMI is picked up and drift follows without hammering SSM.

use crate::cache::TtlCache;
use crate::errors::ApiError;
use std::time::Duration;

const IMMUTABLE_TTL: Duration = Duration::from_secs(24 * 3600);
const MUTABLE_TTL: Duration = Duration::from_secs(30 * 60);

/// Reads SSM parameters with caching.
pub struct SsmProvider {
    ssm: aws_sdk_ssm::Client,
    immutable: TtlCache<String, String>,
    mutable: TtlCache<String, String>,
}

impl SsmProvider {
    pub fn new(ssm: aws_sdk_ssm::Client) -> Self {
        Self {
            ssm,
            immutable: TtlCache::new(IMMUTABLE_TTL),
            mutable: TtlCache::new(MUTABLE_TTL),
        }
    }

    /// The parameter's value, or `None` when it does not exist.
    pub async fn get(&self, name: &str, mutable: bool) -> Result<Option<String>, ApiError> {
        let cache = if mutable {
            &self.mutable
        } else {
            &self.immutable
        };
        let key = name.to_owned();
        if let Some(value) = cache.get(&key) {
            return Ok(Some(value));
        }
        let out = match self.ssm.get_parameter().name(name).send().await {
            Ok(out) => out,
            Err(e) => {
                let err = ApiError::from_sdk("GetParameter", e);
                return if err.is_not_found() {
                    Ok(None)
                } else {
                    Err(err)
                };
            }
        };
        let Some(value) = out.parameter().and_then(|p| p.value()) else {
            return Ok(None);
        };
        cache.insert(key, value.to_owned());
        Ok(Some(value.to_owned()))
    }

    /// Drops every cached value (e.g. after a resolved AMI turned out deprecated).
    pub fn invalidate_mutable(&self) {
        self.mutable.clear();
    }
}
