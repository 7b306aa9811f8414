//! The scheduler: pending pods onto existing nodes and new NodeClaims.
