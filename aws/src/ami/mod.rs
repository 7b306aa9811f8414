//! AMI resolution for an EC2NodeClass's `amiSelectorTerms`: an alias through the EKS SSM
//! parameters, or ids, `ssmParameter`s and name / owner / tag queries through DescribeImages.
//! Each image yields one AMI per requirement set (architecture from the image, accelerator
//! variant from the alias parameter); for each set the newest non-deprecated image wins, and
//! the result is ordered newest first, which is the order `status.amis` lists them in.

pub mod alias;

use crate::cache::TtlCache;
use crate::errors::ApiError;
use crate::selectors::{filter, tag_filters};
use crate::ssm::SsmProvider;
use alias::{Alias, AliasError, in_values};
use aws_sdk_ec2::types::Filter;
use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use kerf::labels;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use thiserror::Error;

const AMI_CACHE_TTL: Duration = Duration::from_secs(60);

/// One AMI selector term, the provider's view of the CRD's `amiSelectorTerms[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AmiTerm {
    pub alias: Option<String>,
    pub id: Option<String>,
    pub name: Option<String>,
    pub owner: Option<String>,
    pub ssm_parameter: Option<String>,
    pub tags: BTreeMap<String, String>,
}

/// A resolved AMI as `status.amis` lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedAmi {
    pub id: String,
    pub name: Option<String>,
    pub creation_date: Option<String>,
    pub deprecated: bool,
    pub requirements: Vec<NodeSelectorRequirement>,
}

/// Why AMIs could not be resolved.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum AmiError {
    #[error(transparent)]
    Alias(#[from] AliasError),
    #[error(
        "no AMI found for alias {alias}: none of the EKS SSM parameters exist ({}); check the \
         alias version and the cluster's Kubernetes version",
        .paths.join(", ")
    )]
    AliasNotResolved { alias: String, paths: Vec<String> },
    #[error("resolving ssmParameter {parameter:?}: {source}")]
    SsmParameter { parameter: String, source: ApiError },
    #[error("resolving AMIs: {0}")]
    DescribeImages(ApiError),
}

/// One DescribeImages query and the requirements known for the images it names.
#[derive(Clone, Debug, Default)]
pub struct ImageQuery {
    pub filters: Vec<Filter>,
    pub owners: Vec<String>,
    pub known_requirements: HashMap<String, Vec<Vec<NodeSelectorRequirement>>>,
}

/// Resolves AMI selector terms.
pub struct AmiProvider {
    ec2: aws_sdk_ec2::Client,
    ssm: Arc<SsmProvider>,
    cache: TtlCache<String, Vec<ResolvedAmi>>,
}

impl AmiProvider {
    pub fn new(ec2: aws_sdk_ec2::Client, ssm: Arc<SsmProvider>) -> Self {
        Self {
            ec2,
            ssm,
            cache: TtlCache::new(AMI_CACHE_TTL),
        }
    }

    /// The AMIs `terms` select on a cluster of `k8s_version`, newest first.
    pub async fn list(
        &self,
        terms: &[AmiTerm],
        k8s_version: &str,
    ) -> Result<Vec<ResolvedAmi>, AmiError> {
        let queries = self.queries(terms, k8s_version).await?;
        let key = format!("{k8s_version}/{terms:?}/{queries:?}");
        if let Some(hit) = self.cache.get(&key) {
            return Ok(hit);
        }
        let mut best: BTreeMap<String, ResolvedAmi> = BTreeMap::new();
        let now = SystemTime::now();
        for query in &queries {
            for image in self.describe(query).await? {
                for ami in amis_of_image(&image, query, now) {
                    let set = requirement_key(&ami.requirements);
                    let replace = best.get(&set).is_none_or(|current| better(&ami, current));
                    if replace {
                        best.insert(set, ami);
                    }
                }
            }
        }
        let mut amis: Vec<ResolvedAmi> = best.into_values().collect();
        amis.sort_by(|a, b| {
            b.creation_date
                .cmp(&a.creation_date)
                .then_with(|| a.id.cmp(&b.id))
        });
        self.cache.insert(key, amis.clone());
        Ok(amis)
    }

    /// The DescribeImages queries for `terms`.
    pub async fn queries(
        &self,
        terms: &[AmiTerm],
        k8s_version: &str,
    ) -> Result<Vec<ImageQuery>, AmiError> {
        if let Some(alias) = terms.iter().find_map(|t| t.alias.as_deref()) {
            return Ok(vec![
                self.alias_query(&Alias::parse(alias)?, k8s_version).await?,
            ]);
        }
        let mut ids = Vec::new();
        let mut queries = Vec::new();
        for term in terms {
            if let Some(id) = &term.id {
                ids.push(id.clone());
            } else if let Some(parameter) = &term.ssm_parameter {
                if let Some(id) = self.ssm_image_id(parameter).await? {
                    ids.push(id);
                }
            } else {
                queries.push(term_query(term));
            }
        }
        if !ids.is_empty() {
            queries.push(ImageQuery {
                filters: vec![filter("image-id", ids)],
                ..ImageQuery::default()
            });
        }
        Ok(queries)
    }

    async fn ssm_image_id(&self, parameter: &str) -> Result<Option<String>, AmiError> {
        let value =
            self.ssm
                .get(parameter, true)
                .await
                .map_err(|source| AmiError::SsmParameter {
                    parameter: parameter.to_owned(),
                    source,
                })?;
        match value {
            Some(v) if v.starts_with("ami-") => Ok(Some(v)),
            Some(v) => {
                tracing::warn!(
                    ssm_parameter = parameter,
                    value = v,
                    "parameter value is not an AMI id"
                );
                Ok(None)
            }
            None => {
                tracing::debug!(ssm_parameter = parameter, "parameter not found");
                Ok(None)
            }
        }
    }

    async fn alias_query(&self, alias: &Alias, k8s_version: &str) -> Result<ImageQuery, AmiError> {
        let parameters = alias.parameters(k8s_version)?;
        let mut known: HashMap<String, Vec<Vec<NodeSelectorRequirement>>> = HashMap::new();
        for parameter in &parameters {
            // Missing parameters are normal (not every variant exists in every region).
            let value = self.ssm.get(&parameter.path, alias.is_latest()).await;
            if let Ok(Some(id)) = value {
                known
                    .entry(id)
                    .or_default()
                    .extend(parameter.requirements.clone());
            }
        }
        if known.is_empty() {
            return Err(AmiError::AliasNotResolved {
                alias: alias.text(),
                paths: parameters.into_iter().map(|p| p.path).collect(),
            });
        }
        let mut ids: Vec<String> = known.keys().cloned().collect();
        ids.sort();
        Ok(ImageQuery {
            filters: vec![filter("image-id", ids)],
            owners: Vec::new(),
            known_requirements: known,
        })
    }

    async fn describe(
        &self,
        query: &ImageQuery,
    ) -> Result<Vec<aws_sdk_ec2::types::Image>, AmiError> {
        let mut filters = query.filters.clone();
        filters.push(filter("state", ["available".to_owned()]));
        let mut pages = self
            .ec2
            .describe_images()
            .set_filters(Some(filters))
            .set_owners((!query.owners.is_empty()).then(|| query.owners.clone()))
            .include_deprecated(true)
            .into_paginator()
            .send();
        let mut images = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page
                .map_err(|e| AmiError::DescribeImages(ApiError::from_sdk("DescribeImages", e)))?;
            images.extend(page.images().iter().cloned());
        }
        Ok(images)
    }

    pub fn invalidate(&self) {
        self.cache.clear();
    }
}

fn term_query(term: &AmiTerm) -> ImageQuery {
    let mut filters = Vec::new();
    let mut owners: Vec<String> = term.owner.iter().cloned().collect();
    if let Some(name) = &term.name {
        filters.push(filter("name", [name.clone()]));
        if owners.is_empty() {
            // A name alone could match anyone's public image; upstream limits it to the
            // account's own and Amazon's.
            owners = vec!["self".to_owned(), "amazon".to_owned()];
        }
    }
    filters.extend(tag_filters(&term.tags));
    ImageQuery {
        filters,
        owners,
        known_requirements: HashMap::new(),
    }
}

/// Kubernetes architecture name of an EC2 image architecture.
pub fn kube_arch(ec2_arch: &str) -> Option<&'static str> {
    match ec2_arch {
        "x86_64" => Some("amd64"),
        "arm64" => Some("arm64"),
        _ => None,
    }
}

fn amis_of_image(
    image: &aws_sdk_ec2::types::Image,
    query: &ImageQuery,
    now: SystemTime,
) -> Vec<ResolvedAmi> {
    let (Some(id), Some(arch)) = (
        image.image_id(),
        image.architecture().and_then(|a| kube_arch(a.as_str())),
    ) else {
        return Vec::new();
    };
    let arch_req = in_values(labels::ARCH, &[arch]);
    let sets = query
        .known_requirements
        .get(id)
        .cloned()
        .unwrap_or_else(|| vec![Vec::new()]);
    let deprecated = image
        .deprecation_time()
        .and_then(parse_rfc3339)
        .is_some_and(|t| t <= now);
    sets.into_iter()
        .map(|mut reqs| {
            reqs.push(arch_req.clone());
            reqs.sort_by(|a, b| a.key.cmp(&b.key));
            ResolvedAmi {
                id: id.to_owned(),
                name: image.name().map(str::to_owned),
                creation_date: image.creation_date().map(str::to_owned),
                deprecated,
                requirements: reqs,
            }
        })
        .collect()
}

fn requirement_key(reqs: &[NodeSelectorRequirement]) -> String {
    let mut parts: Vec<String> = reqs
        .iter()
        .map(|r| format!("{}|{}|{:?}", r.key, r.operator, r.values))
        .collect();
    parts.sort();
    parts.join(";")
}

/// Non-deprecated beats deprecated, then newer, then the larger name.
fn better(candidate: &ResolvedAmi, current: &ResolvedAmi) -> bool {
    if candidate.deprecated != current.deprecated {
        return !candidate.deprecated;
    }
    if candidate.creation_date != current.creation_date {
        return candidate.creation_date > current.creation_date;
    }
    candidate.name > current.name
}

/// Parses the RFC 3339 timestamps EC2 uses (`2024-01-02T03:04:05.000Z`).
fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    aws_sdk_ec2::primitives::DateTime::from_str(
        text,
        aws_sdk_ec2::primitives::DateTimeFormat::DateTime,
    )
    .ok()
    .and_then(|t| SystemTime::try_from(t).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ami(id: &str, date: &str, deprecated: bool) -> ResolvedAmi {
        ResolvedAmi {
            id: id.into(),
            name: Some(id.into()),
            creation_date: Some(date.into()),
            deprecated,
            requirements: Vec::new(),
        }
    }

    #[test]
    fn newest_non_deprecated_wins() {
        let old = ami("ami-old", "2024-01-01T00:00:00.000Z", false);
        let new = ami("ami-new", "2024-06-01T00:00:00.000Z", false);
        let newer_deprecated = ami("ami-dep", "2024-09-01T00:00:00.000Z", true);
        assert!(better(&new, &old));
        assert!(!better(&old, &new));
        assert!(better(&new, &newer_deprecated));
    }

    #[test]
    fn name_queries_default_to_own_and_amazon_images() {
        let q = term_query(&AmiTerm {
            name: Some("my-ami-*".into()),
            ..AmiTerm::default()
        });
        assert_eq!(q.owners, ["self", "amazon"]);
        let q = term_query(&AmiTerm {
            owner: Some("0123".into()),
            tags: BTreeMap::from([("team".into(), "*".into())]),
            ..AmiTerm::default()
        });
        assert_eq!(q.owners, ["0123"]);
        assert_eq!(q.filters[0].name(), Some("tag-key"));
    }

    #[test]
    fn parses_ec2_timestamps() {
        assert!(parse_rfc3339("2024-01-02T03:04:05.000Z").is_some());
        assert!(parse_rfc3339("yesterday").is_none());
    }
}
