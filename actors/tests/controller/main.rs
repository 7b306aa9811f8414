//! The controller's actors run for real against the Kubernetes API emulator over HTTP with
//! kube-rs, exactly as they would against EKS.

mod batching;
mod launching;
mod leader;
mod lifecycle;
mod malformed;
mod state_sync;
mod support;
