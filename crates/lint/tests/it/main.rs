//! Integration tests of the lint rules and their framework: one test binary, one module
//! per concern.
//! Every test binary links the crate and all its dependencies again, so the tests live
//! in one binary rather than one per file; add a module here, not a file in `tests/`.

mod agrees_with_plan;
mod arbitrary_input;
mod bundles;
mod docs;
mod fixtures;
mod framework;
mod hostile;
