//! Integration tests of the network edge against the testbed (a real kube-apiserver, moto):
//! one test binary, one module per concern.
//! Every test binary links the crate and all its dependencies again, so the tests live
//! in one binary rather than one per file; add a module here, not a file in `tests/`.

mod budget;
mod common;
mod controller_namespaces;
mod csr_approver;
mod health_agent;
mod join_tokens;
mod listener_flood;
mod node_identity;
mod node_registration;
mod rotator;
mod rotator_pod_security;
mod rotator_rbac;
mod testbed;
