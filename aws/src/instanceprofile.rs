//! The IAM instance profile nodes of an EC2NodeClass launch with. With `spec.instanceProfile`
//! the named profile must exist; with `spec.role` kerf manages a profile of its own, named
//! `<cluster>_<hash of region and node class>` as upstream, creates it on first use, attaches
//! the role (replacing another one), and deletes it with the EC2NodeClass.

use crate::errors::ApiError;
use crate::launchtemplate::fnv1a64;
use crate::tags;
use std::collections::BTreeMap;
use thiserror::Error;

/// Why the instance profile could not be made ready.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum InstanceProfileError {
    #[error("instance profile {0:?} (spec.instanceProfile) does not exist")]
    NotFound(String),
    #[error(
        "role {role:?} (spec.role) could not be attached to instance profile {profile:?}: {source}"
    )]
    AttachRole {
        role: String,
        profile: String,
        source: ApiError,
    },
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// Manages instance profiles through IAM.
pub struct InstanceProfileProvider {
    iam: aws_sdk_iam::Client,
    cluster_name: String,
    region: String,
}

impl InstanceProfileProvider {
    pub fn new(iam: aws_sdk_iam::Client, cluster_name: &str, region: &str) -> Self {
        Self {
            iam,
            cluster_name: cluster_name.to_owned(),
            region: region.to_owned(),
        }
    }

    /// The name of the profile kerf manages for `node_class`.
    pub fn managed_name(&self, node_class: &str) -> String {
        let hash = fnv1a64(format!("{}{}", self.region, node_class).as_bytes());
        format!("{}_{hash}", self.cluster_name)
    }

    /// Checks a user-named profile exists.
    pub async fn check_exists(&self, name: &str) -> Result<(), InstanceProfileError> {
        match self
            .iam
            .get_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                let err = ApiError::from_sdk("GetInstanceProfile", e);
                if err.is_not_found() {
                    Err(InstanceProfileError::NotFound(name.to_owned()))
                } else {
                    Err(err.into())
                }
            }
        }
    }

    /// Creates (if needed) the managed profile for `node_class` with `role` attached;
    /// returns its name.
    pub async fn ensure(
        &self,
        node_class: &str,
        role: &str,
    ) -> Result<String, InstanceProfileError> {
        let name = self.managed_name(node_class);
        let current_roles = match self
            .iam
            .get_instance_profile()
            .instance_profile_name(&name)
            .send()
            .await
        {
            Ok(out) => out
                .instance_profile()
                .map(|p| p.roles().iter().map(|r| r.role_name().to_owned()).collect())
                .unwrap_or_default(),
            Err(e) => {
                let err = ApiError::from_sdk("GetInstanceProfile", e);
                if !err.is_not_found() {
                    return Err(err.into());
                }
                self.create(&name, node_class).await?;
                Vec::new()
            }
        };
        // A role given as a path (`path/name`) is attached by its name.
        let role_name = role.rsplit('/').next().unwrap_or(role);
        if current_roles.iter().any(|r| r == role_name) {
            return Ok(name);
        }
        for old in &current_roles {
            self.iam
                .remove_role_from_instance_profile()
                .instance_profile_name(&name)
                .role_name(old)
                .send()
                .await
                .map_err(|e| ApiError::from_sdk("RemoveRoleFromInstanceProfile", e))?;
        }
        self.iam
            .add_role_to_instance_profile()
            .instance_profile_name(&name)
            .role_name(role_name)
            .send()
            .await
            .map_err(|e| InstanceProfileError::AttachRole {
                role: role.to_owned(),
                profile: name.clone(),
                source: ApiError::from_sdk("AddRoleToInstanceProfile", e),
            })?;
        Ok(name)
    }

    async fn create(&self, name: &str, node_class: &str) -> Result<(), ApiError> {
        let profile_tags: BTreeMap<String, String> = BTreeMap::from([
            (
                tags::cluster_ownership_key(&self.cluster_name),
                "owned".to_owned(),
            ),
            (tags::EKS_CLUSTER_NAME.to_owned(), self.cluster_name.clone()),
            (tags::EC2NODECLASS.to_owned(), node_class.to_owned()),
            (kerf::labels::REGION.to_owned(), self.region.clone()),
        ]);
        let iam_tags = profile_tags
            .iter()
            .filter_map(|(k, v)| {
                aws_sdk_iam::types::Tag::builder()
                    .key(k)
                    .value(v)
                    .build()
                    .ok()
            })
            .collect();
        match self
            .iam
            .create_instance_profile()
            .instance_profile_name(name)
            .path(format!("/karpenter/{}/{}/", self.region, self.cluster_name))
            .set_tags(Some(iam_tags))
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                let err = ApiError::from_sdk("CreateInstanceProfile", e);
                if err.is_already_exists() {
                    Ok(())
                } else {
                    Err(err)
                }
            }
        }
    }

    /// Deletes the managed profile of `node_class` (detaching its role first).
    pub async fn delete(&self, node_class: &str) -> Result<(), ApiError> {
        let name = self.managed_name(node_class);
        let roles: Vec<String> = match self
            .iam
            .get_instance_profile()
            .instance_profile_name(&name)
            .send()
            .await
        {
            Ok(out) => out
                .instance_profile()
                .map(|p| p.roles().iter().map(|r| r.role_name().to_owned()).collect())
                .unwrap_or_default(),
            Err(e) => {
                let err = ApiError::from_sdk("GetInstanceProfile", e);
                return if err.is_not_found() { Ok(()) } else { Err(err) };
            }
        };
        for role in roles {
            self.iam
                .remove_role_from_instance_profile()
                .instance_profile_name(&name)
                .role_name(role)
                .send()
                .await
                .map_err(|e| ApiError::from_sdk("RemoveRoleFromInstanceProfile", e))?;
        }
        self.iam
            .delete_instance_profile()
            .instance_profile_name(&name)
            .send()
            .await
            .map_err(|e| ApiError::from_sdk("DeleteInstanceProfile", e))?;
        Ok(())
    }
}
