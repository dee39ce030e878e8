//! Integration tests of the rendered bundle: one test binary, one module per concern.
//! Every test binary links the crate and all its dependencies again, so the tests live
//! in one binary rather than one per file; add a module here, not a file in `tests/`.

mod bundle_types;
mod bundles;
mod day_two;
mod iam;
mod iam_eval;
mod iam_join;
mod iam_join_policy;
mod interruption;
mod inventory;
mod monitoring;
mod userdata_sandbox;
mod validates_input;
