//! The API emulator as `kerf controller` finds it installed: Karpenter's CRDs (the chart's
//! own, from `deploy/crds`) and the chart's namespace.

use std::path::PathBuf;

use kerf_loadtest::apiserver::Cluster;
use serde_json::json;

/// Applies the NodePool, NodeClaim and EC2NodeClass CRDs and creates the `karpenter`
/// namespace.
pub fn install_karpenter(cluster: &Cluster) {
    let crds = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
    for file in [
        "karpenter.sh_nodepools.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.k8s.aws_ec2nodeclasses.yaml",
    ] {
        let yaml = std::fs::read_to_string(crds.join(file)).unwrap();
        cluster.apply_crd_yaml(&yaml).unwrap();
    }
    cluster
        .create(
            "v1",
            "namespaces",
            json!({"metadata": {"name": "karpenter"}}),
        )
        .unwrap();
}
