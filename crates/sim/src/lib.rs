//! Simulations of two Karpenter v1.14 controllers for this project's NodePools, behind `plan`
//! and `plan --disrupt`:
//!
//! - the **provisioning scheduler**: given NodePools (rendered from a spec or written by
//!   hand), workloads and optionally existing nodes, which NodeClaims Karpenter would create
//!   (NodePool, instance-type options, the likely type, capacity type and zone, the pods on
//!   each, $/h) and which pods it would leave Pending, and why;
//! - the **disruption controller** ([`disrupt`]): given a running cluster's state, which nodes
//!   it would expire, delete as empty, replace for drift or consolidate, with what, and why it
//!   keeps the others.
//!
//! Owns both simulations. Must not restate Karpenter's requirement, toleration or label
//! semantics: those come from `kk-karpenter` (re-exported as [`req`] and [`labels`]).
//!
//! Pure and deterministic: no I/O, no threads; the same input gives the same plan, byte for byte.
//!
//! ```no_run
//! use kk_sim::{LoadOptions, SourceFile, load, solve};
//! let pools = [SourceFile::new("pools.yaml", std::fs::read_to_string("pools.yaml").unwrap())];
//! let work = [SourceFile::new("app.yaml", std::fs::read_to_string("app.yaml").unwrap())];
//! let input = load(&pools, &work, &[], &LoadOptions::default()).unwrap();
//! print!("{}", solve(&input).render_table());
//! ```
//!
//! Module map: [`req`] is the requirement algebra; [`topology`] the spread/affinity groups;
//! [`solver`] the queue, existing nodes, in-flight and new NodeClaims, limits and relaxation;
//! [`offerings`] which offerings a claim allows and the capacity reservations it holds;
//! [`plan`] the launch choice and the output (types and rendering); [`next_loop`] Karpenter's
//! next loop for pods that waited for a reservation; `solve.rs` the entry points ([`solve()`],
//! [`simulate`], [`explain`]), which run the solver and the next loop and build the plan (it
//! uses `plan` and `next_loop`; `next_loop` uses `plan`; `plan` uses neither); [`input`] reads
//! manifests; [`disrupt`] the disruption controller (its clock, state, methods and report);
//! [`scenario`] the oracle's formats (docs/internals/fidelity.md); [`fleet`] the live view `top` draws; [`budget`] spend budgets as NodePool limits; [`gosort`] Go's unstable sort, for Go's order of ties.

pub mod gosort;
/// Karpenter's label keys and domains, from `kk-karpenter` (one list for every crate).
pub use kk_karpenter::labels;
/// The requirement algebra, from `kk-karpenter`.
pub use kk_karpenter::req;
pub mod budget;
pub mod disrupt;
pub mod fleet;
pub mod input;
pub mod model;
pub mod next_loop;
pub mod offerings;
pub mod plan;
pub mod res;
pub mod scenario;
mod solve;
pub mod solver;
pub mod topology;

pub use input::{InputError, LoadOptions, SourceFile, load, load_with_catalog};
pub use plan::{Explanation, Plan};
pub use req::{Operator, Requirement, Requirements};
pub use solve::{explain, simulate, solve};
pub use solver::{Input, MinValuesPolicy, Options};
