//! Taints and tolerations matching as the kube-scheduler applies them.
