//! Typed objects and YAML handling shared by every other crate.
//!
//! Pure: no I/O, no async. Reading files is the caller's business; this crate
//! turns text into values that remember where they came from.

pub mod karpenter;
pub mod kubean;
pub mod path;
pub mod quantity;
pub mod yaml;

pub use path::{FieldPath, PathSeg};
pub use yaml::{Document, LoadLimits, Pos, YamlError};
