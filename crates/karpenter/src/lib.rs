//! Karpenter's scheduling semantics, written once for every crate that reasons about where a pod
//! can land: the requirement algebra ([`req`]: In/NotIn/Exists/DoesNotExist/Gt/Lt/Gte/Lte and
//! minValues, Karpenter's `Compatible`/`Intersects`), taints and tolerations ([`taint`]: every
//! operator and effect, Kubernetes' `ToleratesTaint`), and the label keys and domains Karpenter
//! treats specially ([`labels`]: well-known labels, deprecated aliases, restricted domains),
//! NodePool durations ([`duration`]: Go's syntax, and the narrower form the CRD admits), the
//! checks on default topology spread constraints ([`default_spread`]), and
//! what drift covers ([`drift`]: the reasons, the fields Karpenter's static-drift hashes cover),
//! and node repair ([`repair`]: the conditions it acts on, tolerations, reboot or replace, the
//! 20 % breaker).
//!
//! It owns the *rules*, not the inputs: it must not read files, parse manifests, know about
//! NodePool objects or format diagnostics, and it depends on nothing. `kk-sim` (checked against
//! Karpenter's own scheduler by its differential test), `kk-lint` and `kk-spec` build on it; a
//! fix to a semantic goes here, so that lint and plan cannot disagree.

pub mod ami;
pub mod budget;
pub mod default_spread;
pub mod drift;
pub mod duration;
pub mod error;
pub mod labels;
pub mod repair;
pub mod req;
pub mod taint;

pub use error::ParseError;
pub use req::{Conflict, Operator, Requirement, Requirements};
pub use taint::{Effect, Taint, Toleration, TolerationOp, untolerated};
