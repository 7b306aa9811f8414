//! The controller's actors run for real against the Kubernetes API emulator over HTTP with
//! kube-rs, exactly as they would against EKS.

mod batching;
mod cloud_loops;
mod launching;
mod leader;
mod malformed;
mod state_sync;
mod support;
