//! Integration tests of the ElasticCluster spec: one test binary, one module per concern.
//! Every test binary links the crate and all its dependencies again, so the tests live
//! in one binary rather than one per file; add a module here, not a file in `tests/`.

mod invalid_specs;
