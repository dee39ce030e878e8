//! The `ElasticCluster` spec: types, defaults, loading with positions, validation.
//!
//! Pure: takes text, returns values or located errors. Reading the file and resolving
//! the CA bundle from disk happen in the CLI.

mod load;
pub mod types;
mod validate;

pub use load::{LoadedSpec, SpecError, parse_spec};
pub use types::*;
pub use validate::{node_class_name, restricted_label_domain, validate};

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
        assert_eq!(loaded.spec.spec.pools.len(), 3);
    }
}
