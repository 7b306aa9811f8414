//! What a Helm install gives `kerf controller` that a bare process lacks, given to the
//! simulated controller too, so a simulation makes the requests a real install makes and is
//! refused what a real install would refuse. The chart's RBAC, as `helm template` renders it
//! for release `karpenter` in namespace `karpenter` (`deploy/chart-rbac.json`, kept equal to
//! the chart by `cli/tests/chart.rs`), is stored in the emulator and enforced; the controller
//! authenticates as the chart's ServiceAccount. The rest of the simulated cluster (kubelets,
//! scheduler, kubectl through `--kubeconfig-out`) sends no token and stays an administrator.
//! Like `kerf controller`, the simulated controller
//! first reads the facts new nodes need ([`StartupReads`](crate::world::StartupReads)), from
//! Services shaped like EKS's; the simulated EC2 does not use them, but the reads are the
//! start-up's. At the end, [`usage`] names the requests RBAC refused and the granted rules no
//! request needed.

use std::collections::HashMap;

use kerf_loadtest::apiserver::rbac::{self, MASTERS, User};
use kerf_loadtest::apiserver::{Cluster, RunningServer};
use serde::Serialize;
use serde_json::{Value, json};

/// The chart's RBAC objects (ClusterRoles, Roles and their bindings) for release
/// `karpenter` in [`NAMESPACE`].
pub const CHART_RBAC: &str = include_str!("../../deploy/chart-rbac.json");

/// The namespace the chart is installed in: the controller's Lease lives there.
pub const NAMESPACE: &str = "karpenter";

/// The chart's ServiceAccount (named after the release).
const SERVICE_ACCOUNT: &str = "karpenter";

/// The ServiceAccount token the controller's requests carry.
const CONTROLLER_TOKEN: &str = "kerf-simulate-controller";

/// The Services EKS creates: the `kubernetes` Service at the first address of the default
/// service range, and cluster DNS at its tenth.
const CLUSTER_SERVICES: [(&str, &str, &str); 2] = [
    ("default", "kubernetes", "10.100.0.1"),
    ("kube-system", "kube-dns", "10.100.0.10"),
];

/// Why the chart's RBAC was not installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("deploy/chart-rbac.json (embedded) is not a JSON list of RBAC objects: {0}")]
    Rendered(#[from] serde_json::Error),
    #[error("deploy/chart-rbac.json (embedded) holds a {0:?}, not an RBAC object")]
    Kind(String),
    #[error("creating {what}: {error}")]
    Create {
        what: String,
        error: Box<kerf_loadtest::apiserver::ApiError>,
    },
}

/// The user the chart's ServiceAccount authenticates as.
pub fn controller_user() -> User {
    User::service_account(NAMESPACE, SERVICE_ACCOUNT)
}

/// Stores the chart's namespace, RBAC and the cluster's Services, then turns enforcement
/// on: the controller's token is the chart's ServiceAccount, a request without a token an
/// administrator.
pub fn install(server: &RunningServer) -> Result<(), InstallError> {
    let cluster = server.cluster();
    create(
        &cluster,
        "v1",
        "namespaces",
        json!({"metadata": {"name": NAMESPACE}}),
    )?;
    for (namespace, name, ip) in CLUSTER_SERVICES {
        let service = json!({
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterIP": ip, "ports": [{"port": 443}]},
        });
        create(&cluster, "v1", "services", service)?;
    }
    let rendered: Vec<Value> = serde_json::from_str(CHART_RBAC)?;
    for object in rendered {
        let kind = object["kind"].as_str().unwrap_or("");
        let plural = rbac::plural(kind).ok_or_else(|| InstallError::Kind(kind.to_owned()))?;
        create(&cluster, "rbac.authorization.k8s.io/v1", plural, object)?;
    }
    let access = server.access();
    access.enforce(HashMap::from([(
        CONTROLLER_TOKEN.to_owned(),
        controller_user(),
    )]));
    access.admit_anonymous(User {
        name: "system:anonymous".to_owned(),
        groups: vec!["system:unauthenticated".to_owned(), MASTERS.to_owned()],
    });
    Ok(())
}

fn create(
    cluster: &Cluster,
    api_version: &str,
    plural: &str,
    object: Value,
) -> Result<(), InstallError> {
    let what = format!(
        "{plural} {}/{}",
        object["metadata"]["namespace"].as_str().unwrap_or(""),
        object["metadata"]["name"].as_str().unwrap_or("")
    );
    cluster
        .create(api_version, plural, object)
        .map(drop)
        .map_err(|error| InstallError::Create {
            what,
            error: Box::new(error),
        })
}

/// Makes `config`'s requests the chart's ServiceAccount's.
pub fn authenticate(config: &mut kube::Config) -> Result<(), http::header::InvalidHeaderValue> {
    let bearer = http::HeaderValue::from_str(&format!("Bearer {CONTROLLER_TOKEN}"))?;
    config.headers.push((http::header::AUTHORIZATION, bearer));
    Ok(())
}

/// What the chart's RBAC did to the controller's requests over the run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RbacUsage {
    /// Requests it refused (`get services "x" in API group "" in the namespace "y"`): the
    /// chart lacks a rule the controller needs.
    pub refused: Vec<String>,
    /// Granted rules no request used (`Role karpenter/karpenter: create leases in API group
    /// "coordination.k8s.io"`), one per verb, resource and group.
    pub unused: Vec<String>,
}

/// The controller's refused requests and unused grants so far.
pub fn usage(server: &RunningServer) -> RbacUsage {
    let user = controller_user();
    RbacUsage {
        refused: server
            .access()
            .denied_to(&user.name)
            .iter()
            .map(ToString::to_string)
            .collect(),
        unused: server
            .unused_grants(&user)
            .iter()
            .map(ToString::to_string)
            .collect(),
    }
}
