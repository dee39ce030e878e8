//! The end-to-end tests on the lab (`testbed/lab up`): a test binary apart from `it`, because
//! its tests share one lab and must never overlap. `harness::Lab::require` holds a
//! process-wide lock for the whole of a test, so a plain `cargo test` (several test threads)
//! runs them one after another; other test binaries never touch the lab.

mod harness;
mod lab_adopt;
mod lab_apply_killed;
mod lab_doctor;
mod lab_drift;
mod lab_e2e;
mod lab_faults;
mod lab_gpu_sharing;
mod lab_iam;
mod lab_interruption;
mod lab_join_storm;
mod lab_leader_killed;
mod lab_orphans;
mod lab_reservations;
mod lab_top;
mod lab_verify;
