//! Well-known label keys: Karpenter's one list, from `kk-karpenter` (the generated catalog data
//! names its keys by these constants).

pub use kk_karpenter::labels::*;
