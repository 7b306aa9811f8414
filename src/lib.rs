//! kerf's pure core: the Karpenter v1 API types and their validation, the scheduling
//! requirements algebra, Kubernetes resource quantities, the embedded EC2 instance-type
//! catalog with allocatable computation, and the scheduler. Nothing in this crate holds a
//! client, touches the network or runs a runtime; its one edge to the file system is
//! [`manifest::files`], which reads manifest files for the CLI. The controller, the
//! simulated cluster and the CLI feed it data and act on what it returns, which keeps it
//! unit-testable and benchmarkable alone.

pub mod advice;
pub mod api;
pub mod buffer;
pub mod catalog;
pub mod cloudprovider;
pub mod cluster;
pub mod disruption;
pub mod explain;
pub mod feature_gates;
pub mod finalizers;
pub mod interruption;
pub mod labels;
pub mod launch_attempts;
pub mod manifest;
pub mod nodepool_hash;
pub mod overlay;
pub mod panics;
pub mod plan;
pub mod pods;
pub mod report;
pub mod requirements;
pub mod resources;
pub mod room;
pub mod scheduling;
pub mod static_pools;
pub mod taints;
pub mod troubleshooting;
pub mod validation;
pub mod wildcard;
