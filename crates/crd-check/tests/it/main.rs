//! Integration tests of CRD schema and CEL validation: one test binary, one module per
//! concern.
//! Every test binary links the crate and all its dependencies again, so the tests live
//! in one binary rather than one per file; add a module here, not a file in `tests/`.

mod api;
mod fixtures;
mod no_panic;
