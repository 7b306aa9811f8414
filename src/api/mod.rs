//! Karpenter v1 API types: karpenter.sh NodePool and NodeClaim, karpenter.k8s.aws EC2NodeClass.
