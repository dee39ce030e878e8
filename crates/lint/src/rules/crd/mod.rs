//! Validation against the Karpenter and Kubean CRDs (schema and CEL rules).

pub mod crd_schema;
