//! The controller's actors run for real against the Kubernetes API emulator over HTTP with
//! kube-rs, exactly as they would against EKS.

mod batching;
mod cloud_loops;
mod disruption;
mod events;
mod failover;
mod ice;
mod inflight;
mod launch_step;
mod launching;
mod leader;
mod lifecycle;
mod limits;
mod malformed;
mod mixed;
mod restart;
mod schedulers;
mod scrape;
mod shutdown;
mod state_sync;
mod support;
mod weights;
