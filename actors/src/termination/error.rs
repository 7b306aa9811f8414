//! Why one termination reconcile failed; it is retried with backoff. Each variant names the
//! operation and the object, so a warning in the log says what to look at.

use kerf::cloudprovider::CloudProviderError;

#[derive(Debug, thiserror::Error)]
pub enum TerminationError {
    #[error("patching node {node}: {source}")]
    PatchNode {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("patching nodeclaim {nodeclaim}: {source}")]
    PatchNodeClaim {
        nodeclaim: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing the status of nodeclaim {nodeclaim}: {source}")]
    PatchNodeClaimStatus {
        nodeclaim: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting nodeclaim {nodeclaim}: {source}")]
    DeleteNodeClaim {
        nodeclaim: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting node {node}: {source}")]
    DeleteNode {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting pod {namespace}/{pod} at its node's termination time: {source}")]
    DeletePod {
        namespace: String,
        pod: String,
        #[source]
        source: kube::Error,
    },
    #[error("listing the volume attachments of node {node}: {source}")]
    ListVolumeAttachments {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("nodeclaim {nodeclaim}: annotation {annotation}: {value:?} is not an RFC 3339 time")]
    TerminationTimestamp {
        nodeclaim: String,
        annotation: &'static str,
        value: String,
    },
    #[error("terminating the instance of nodeclaim {nodeclaim}: {source}")]
    TerminateInstance {
        nodeclaim: String,
        #[source]
        source: CloudProviderError,
    },
    #[error("looking up the instance of nodeclaim {nodeclaim}: {source}")]
    FindInstance {
        nodeclaim: String,
        #[source]
        source: CloudProviderError,
    },
    #[error("looking up the instance of node {node}: {source}")]
    GetInstance {
        node: String,
        #[source]
        source: CloudProviderError,
    },
}

impl crate::workqueue::Conflict for TerminationError {
    fn is_conflict(&self) -> bool {
        TerminationError::is_conflict(self)
    }
}

impl TerminationError {
    /// A write refused because the object changed since it was read: routine, retried.
    pub fn is_conflict(&self) -> bool {
        match self {
            Self::PatchNode { source, .. }
            | Self::PatchNodeClaim { source, .. }
            | Self::PatchNodeClaimStatus { source, .. }
            | Self::DeleteNodeClaim { source, .. }
            | Self::DeleteNode { source, .. } => is_status(source, 409),
            _ => false,
        }
    }
}

pub fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}
