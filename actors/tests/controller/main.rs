//! The controller's actors run for real against the Kubernetes API emulator over HTTP with
//! kube-rs, exactly as they would against EKS.

mod batching;
mod cloud_loops;
mod disruption;
mod drift;
mod drift_support;
mod events;
mod expiration;
mod failover;
mod fallback;
mod fencing;
mod ice;
mod inflight;
mod interruption;
mod interruption_instance_status;
mod launch_failures;
mod launch_step;
mod launching;
mod leader;
mod lifecycle;
mod limits;
mod malformed;
mod mixed;
mod node_repair;
mod nodepool_status;
mod policies;
mod restart;
mod schedulers;
mod scrape;
mod shutdown;
mod stack;
mod state_sync;
mod supervision;
mod support;
mod termination;
mod weights;
