//! Drives the Kubernetes API emulator with kube-rs 5 over HTTP, as the controller will.

mod crds;
mod crud;
mod faults;
mod kubectl;
mod lifecycle;
mod patching;
mod support;
mod watching;
mod workloads;
