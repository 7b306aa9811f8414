//! The simulated cluster kerf runs against without AWS or a real cluster: a Kubernetes API
//! emulator speaking the real REST + watch protocol, simulated kubelets and kube-scheduler,
//! and a simulated EC2. `kerf simulate`, the load harness and the controller's integration
//! tests all use it; the controller reaches it over HTTP exactly as it reaches EKS.

pub mod apiserver;
