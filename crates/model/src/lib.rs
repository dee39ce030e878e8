//! Typed objects and YAML handling shared by every other crate.
//!
//! Owns the typed Karpenter v1 and Kubean objects, field paths, quantities, calendar dates and
//! the position-keeping YAML loader, and [`spend`]: money as micro-dollars and the annotations
//! that carry a spend budget on a NodePool. Must not do I/O, know the ElasticCluster spec, or encode scheduling semantics
//! (those are `kk-karpenter`'s).
//!
//! Pure: no I/O, no async. Reading files is the caller's business; this crate
//! turns text into values that remember where they came from.

pub mod civil_date;
pub mod error;
pub mod image;
pub mod karpenter;
pub mod kubean;
pub mod path;
pub mod quantity;
pub mod spend;
pub mod visible;
pub mod yaml;

pub use error::LocatedError;
pub use path::{FieldPath, PathSeg};
pub use visible::visible;
pub use yaml::{Document, LoadLimits, Pos, YamlError};
