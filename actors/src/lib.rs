//! The kerf controller: actors over bounded mailboxes that watch the cluster and provision
//! capacity, as upstream Karpenter's controllers do. One module per actor (`pod_watcher`,
//! `batcher`, `provisioner`, `node_pool_scheduler`, `offering_cache`, `nodeclaim_creator`,
//! `lifecycle`, `leader`, `launch_template_cache` for EC2NodeClass status, `tagging`,
//! `interruption` for the SQS interruption queue) and loops (`garbage_collection`,
//! `node_repair` behind the `NodeRepair` gate), the
//! cluster state they share (`state`), the daemon that wires them
//! (`daemon`), each on its own thread under a supervisor (`supervisor`), and stops them
//! gracefully (`shutdown`), and the operational surface: settings, the
//! rate-limited Kubernetes client (`client`), Kubernetes Events (`events`), JSON logs, metrics
//! (`metrics`, `cluster_metrics`, `cloud_metrics`) and the HTTP endpoints. Decisions come from
//! the pure core crate `kerf`; this crate does the I/O.

pub mod batcher;
pub mod capacity_buffer;
pub mod capacity_type;
pub mod client;
pub mod cloud_metrics;
pub mod cluster_metrics;
pub mod created_claims;
pub mod daemon;
pub mod disruption;
pub mod divergences;
pub mod events;
pub mod expiration;
pub mod garbage_collection;
pub mod instance_health;
pub mod instance_types;
pub mod interruption;
pub mod launch_template_cache;
pub mod leader;
pub mod lifecycle;
pub mod logging;
pub mod mailbox;
pub mod metrics;
pub mod node_overlay;
pub mod node_pool_scheduler;
pub mod node_repair;
pub mod nodeclaim_creator;
pub mod nodeclaim_disruption;
pub mod nodepool_status;
pub mod offering_cache;
pub mod orchestrator;
pub mod periodic;
pub mod pod_watcher;
pub mod provisioner;
pub mod requeue;
pub mod retired;
pub mod server;
pub mod settings;
pub mod shutdown;
pub mod state;
pub mod static_capacity;
pub mod storage_advice;
pub mod supervisor;
pub mod tagging;
pub mod termination;
#[cfg(test)]
pub(crate) mod testing;
pub mod workqueue;

pub use daemon::{Cloud, Daemon, DisruptionHandle, Environment, StartError, Timings};
pub use settings::{Settings, ValidSettings};
