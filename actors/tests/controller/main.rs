//! The controller's actors run for real against the Kubernetes API emulator over HTTP with
//! kube-rs, exactly as they would against EKS.

mod batching;
mod events;
mod ice;
mod launching;
mod leader;
mod malformed;
mod schedulers;
mod scrape;
mod shutdown;
mod state_sync;
mod support;
