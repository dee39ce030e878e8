//! The `ElasticCluster` spec: types, defaults, loading with positions, validation.
//!
//! Owns the ElasticCluster document: its types, defaults and located validation, and
//! [`adopt`]: what a running cluster holds, as spec values with their sources; and the facts
//! derived from a spec that several crates use, each written once ([`names`], [`arn`], the
//! [`join_store`] kind, the [`network`] facts, [`time`]'s durations, the [`spend`] budgets). Must not read
//! files, render artifacts, or restate Karpenter's label rules (it asks `kk-karpenter`).
//!
//! Pure: takes text, returns values or located errors. Reading the file and resolving
//! the CA bundle from disk happen in the CLI.

pub mod adopt;
pub mod arn;
pub mod ca;
pub mod feature_gates;
pub mod iam;
pub mod images;
pub mod interruption;
pub mod join_store;
pub mod kubean_support;
pub mod kubernetes_support;
pub mod kubespray_images;
mod load;
pub mod names;
pub mod network;
pub mod pin;
pub mod spend;
pub mod time;
pub mod types;
mod validate;
pub mod versions;
pub mod vpc_endpoints;

pub use kk_karpenter::labels::reserved_domain as restricted_label_domain;
pub use load::{LoadedSpec, SpecError, parse_spec, spec_from_documents};
pub use spend::{BudgetEnforcement, OnControllerDown, SpendBudget};
pub use types::*;
pub use validate::{node_class_name, validate, warnings};

/// The commented example that `init` prints and `render --example` renders.
pub const EXAMPLE: &str = include_str!("example.yaml");

/// The file name errors in the built-in example point at.
pub const EXAMPLE_FILE: &str = "<built-in example>";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_is_valid() {
        let loaded = parse_spec(EXAMPLE, EXAMPLE_FILE).unwrap_or_else(|errors| {
            panic!(
                "{}",
                errors
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        });
        assert_eq!(loaded.spec.spec.pools.len(), 4);
    }

    fn errors_with_image(image: &str) -> Vec<String> {
        let text = EXAMPLE.replace("ghcr.io/kubean-io/spray-job:v0.37.0", image);
        assert_ne!(text, EXAMPLE, "the example's spray-job image changed");
        match parse_spec(&text, "x.yaml") {
            Ok(_) => Vec::new(),
            Err(errors) => errors
                .iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect(),
        }
    }

    #[test]
    fn the_kubean_release_must_be_named_and_known() {
        assert_eq!(
            errors_with_image("ghcr.io/kubean-io/spray-job"),
            [
                "spec.kubean.sprayJobImage: name the Kubean release in the image tag (e.g. ghcr.io/kubean-io/spray-job:v0.37.0): the Kubernetes versions it installs are checked against it"
            ]
        );
        assert_eq!(
            errors_with_image("ghcr.io/kubean-io/spray-job:v9.9.9"),
            [
                "spec.kubean.sprayJobImage: Kubean v9.9.9 is not in the support matrix (v0.20.0–v0.37.0): pin a listed release, whose Kubernetes range is known"
            ]
        );
        // A digest-pinned image keeps its tag.
        assert!(errors_with_image("ghcr.io/kubean-io/spray-job:v0.37.0@sha256:0123").is_empty());
    }
}
