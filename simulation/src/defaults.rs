//! What `kerf simulate` applies when it is given nothing: one AL2023 EC2NodeClass, one
//! general-purpose NodePool (amd64, spot or on-demand, c/m/r generation 5+, every zone)
//! and a workload of six Deployments of mixed shapes — small web pods pinned to three zones
//! and spread evenly over them, medium
//! API pods, CPU-heavy and memory-heavy workers, and a cache whose replicas refuse to share
//! a host — sized to `--pods`. They are manifest text, read through the same parser and
//! checks as user files, so they are exactly what `kerf validate` and `kerf plan` accept.

/// The region the simulated EC2 sells (the embedded catalog's).
pub const REGION: &str = "us-east-1";

/// The zones the web tier is pinned to and spread over.
pub const WEB_ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

/// The cluster name the simulated EC2 tags instances with and the node class discovers by.
pub const CLUSTER_NAME: &str = "kerf-sim";

/// Pods in the default workload when `--pods` is not given.
pub const DEFAULT_PODS: usize = 500;

/// Source name of the default EC2NodeClass in messages.
pub const NODECLASS_SOURCE: &str = "<default EC2NodeClass>";
/// Source name of the default NodePool in messages.
pub const NODEPOOL_SOURCE: &str = "<default NodePool>";
/// Source name of the default workload in messages.
pub const WORKLOAD_SOURCE: &str = "<default workload>";

/// The default EC2NodeClass, `default`.
pub fn nodeclass() -> String {
    format!(
        "apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: KarpenterNodeRole-{CLUSTER_NAME}
  amiSelectorTerms:
    - alias: al2023@latest
  subnetSelectorTerms:
    - tags:
        karpenter.sh/discovery: {CLUSTER_NAME}
  securityGroupSelectorTerms:
    - tags:
        karpenter.sh/discovery: {CLUSTER_NAME}
"
    )
}

/// The default NodePool, `default`, on the default EC2NodeClass.
const NODEPOOL: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - key: kubernetes.io/arch
          operator: In
          values: [\"amd64\"]
        - key: kubernetes.io/os
          operator: In
          values: [\"linux\"]
        - key: karpenter.sh/capacity-type
          operator: In
          values: [\"spot\", \"on-demand\"]
        - key: karpenter.k8s.aws/instance-category
          operator: In
          values: [\"c\", \"m\", \"r\"]
        - key: karpenter.k8s.aws/instance-generation
          operator: Gt
          values: [\"4\"]
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
      expireAfter: 720h
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 1m
";

/// The default NodePool.
pub fn nodepool() -> String {
    NODEPOOL.to_owned()
}

/// One Deployment of the default workload.
struct Shape {
    name: &'static str,
    /// Share of the workload's pods, in percent.
    percent: usize,
    cpu: &'static str,
    memory: &'static str,
    placement: Placement,
}

enum Placement {
    Anywhere,
    /// Required node affinity to [`WEB_ZONES`] and `topologySpreadConstraints` over them,
    /// `maxSkew: 1`, `DoNotSchedule`.
    SpreadOverZones,
    /// Required pod anti-affinity on the hostname: one replica per node.
    OnePerNode,
}

const SHAPES: [Shape; 6] = [
    Shape {
        name: "web",
        percent: 40,
        cpu: "250m",
        memory: "256Mi",
        placement: Placement::SpreadOverZones,
    },
    Shape {
        name: "api",
        percent: 25,
        cpu: "500m",
        memory: "1Gi",
        placement: Placement::Anywhere,
    },
    Shape {
        name: "worker",
        percent: 15,
        cpu: "1",
        memory: "2Gi",
        placement: Placement::Anywhere,
    },
    Shape {
        name: "analytics",
        percent: 10,
        cpu: "1",
        memory: "8Gi",
        placement: Placement::Anywhere,
    },
    Shape {
        name: "encoder",
        percent: 5,
        cpu: "3",
        memory: "2Gi",
        placement: Placement::Anywhere,
    },
    Shape {
        name: "cache",
        percent: 5,
        cpu: "500m",
        memory: "2Gi",
        placement: Placement::OnePerNode,
    },
];

/// Replicas per shape for `total` pods: each its share, rounded by largest remainder so
/// they add up to `total` exactly.
fn replicas(total: usize) -> [usize; SHAPES.len()] {
    let mut counts = SHAPES.map(|s| total * s.percent / 100);
    let assigned: usize = counts.iter().sum();
    let mut by_remainder: Vec<usize> = (0..SHAPES.len()).collect();
    by_remainder.sort_by_key(|&i| std::cmp::Reverse((total * SHAPES[i].percent) % 100));
    for &i in by_remainder.iter().cycle().take(total - assigned) {
        counts[i] += 1;
    }
    counts
}

/// The default workload: `total` pods over the six Deployments (those with no replicas are
/// left out).
pub fn workload(total: usize) -> String {
    SHAPES
        .iter()
        .zip(replicas(total))
        .filter(|(_, count)| *count > 0)
        .map(|(shape, count)| deployment(shape, count))
        .collect::<Vec<_>>()
        .join("---\n")
}

fn deployment(shape: &Shape, replicas: usize) -> String {
    let name = shape.name;
    let placement = match shape.placement {
        Placement::Anywhere => String::new(),
        Placement::SpreadOverZones => format!(
            "      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions:
                  - key: topology.kubernetes.io/zone
                    operator: In
                    values: [{zones}]
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: topology.kubernetes.io/zone
          whenUnsatisfiable: DoNotSchedule
          labelSelector:
            matchLabels:
              app: {name}
",
            zones = WEB_ZONES.join(", ")
        ),
        Placement::OnePerNode => format!(
            "      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - topologyKey: kubernetes.io/hostname
              labelSelector:
                matchLabels:
                  app: {name}
"
        ),
    };
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: default
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
    spec:
{placement}      containers:
        - name: {name}
          image: public.ecr.aws/docker/library/busybox:stable
          resources:
            requests:
              cpu: \"{cpu}\"
              memory: {memory}
",
        cpu = shape.cpu,
        memory = shape.memory,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf::cluster::inventory::inventory;
    use kerf::manifest;

    #[test]
    fn replicas_add_up_to_the_total() {
        for total in [0, 1, 7, 40, 499, 500, 10_000] {
            assert_eq!(replicas(total).iter().sum::<usize>(), total, "{total}");
        }
        assert_eq!(replicas(500), [200, 125, 75, 50, 25, 25]);
    }

    #[test]
    fn the_defaults_pass_the_api_servers_checks() {
        let mut objects = Vec::new();
        for (text, source) in [
            (nodeclass(), NODECLASS_SOURCE),
            (nodepool(), NODEPOOL_SOURCE),
            (workload(DEFAULT_PODS), WORKLOAD_SOURCE),
        ] {
            objects.extend(manifest::parse_all(&text, source).expect("default parses"));
        }
        let inventory = inventory(&objects).expect("defaults are valid");
        assert_eq!(inventory.node_pools.len(), 1);
        assert_eq!(inventory.node_classes.len(), 1);
        assert_eq!(inventory.pods.len(), DEFAULT_PODS);
        assert!(inventory.warnings.is_empty(), "{:?}", inventory.warnings);
    }

    #[test]
    fn the_workload_has_a_zone_spread_and_a_one_per_node_deployment() {
        let objects = manifest::parse_all(&workload(40), WORKLOAD_SOURCE).expect("parses");
        let text = serde_json::to_string(&objects.iter().map(|o| &o.value).collect::<Vec<_>>())
            .expect("json");
        assert!(text.contains("topologySpreadConstraints"));
        assert!(text.contains("podAntiAffinity"));
        assert_eq!(objects.len(), 6);
    }
}
