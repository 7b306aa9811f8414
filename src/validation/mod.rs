//! Validation of Karpenter objects as the API server enforces it from the CRD schemas.
