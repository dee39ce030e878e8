//! The end-to-end tests on the lab (`testbed/lab up`): a test binary apart from `it`, because
//! its tests share the labs and two must never overlap on one. `harness::Lab::require` hands a
//! test a lab of `KK_LAB_ENV` no other test holds and keeps it for the whole test, so with one
//! lab a plain `cargo test` runs them one after another, with two (CI) two at a time; other
//! test binaries never touch the lab.

mod harness;
mod lab_adopt;
mod lab_apply_killed;
mod lab_budget;
mod lab_doctor;
mod lab_drift;
mod lab_e2e;
mod lab_faults;
mod lab_gpu_sharing;
mod lab_iam;
mod lab_interruption;
mod lab_join_storm;
mod lab_leader_killed;
mod lab_node_repair;
mod lab_orphans;
mod lab_reservations;
mod lab_top;
mod lab_verify;
