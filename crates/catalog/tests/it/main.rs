//! Integration tests of the embedded EC2 catalog: one test binary, one module per concern.
//! Every test binary links the crate and all its dependencies again, so the tests live
//! in one binary rather than one per file; add a module here, not a file in `tests/`.

mod allocatable;
mod catalog;
mod labels;
mod source_data;
