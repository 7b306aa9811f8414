//! Kubernetes resource quantities and resource lists with exact arithmetic.
