//! Which AWS service holds a cluster's join configuration, and its default name: what apply
//! writes to, the rotator refreshes and doctor reads.

use std::fmt;

/// Which AWS service holds the join configuration (the spec's `join.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Ssm,
    SecretsManager,
}

impl StoreKind {
    /// The default store name for a cluster, as `crate::names::join_store` spells it.
    pub fn default_name(self, cluster: &str) -> String {
        let mode = match self {
            StoreKind::Ssm => crate::JoinMode::Ssm,
            StoreKind::SecretsManager => crate::JoinMode::SecretsManager,
        };
        crate::names::default_join_store(mode, cluster)
    }

    pub fn from_join_mode(mode: crate::JoinMode) -> Option<Self> {
        match mode {
            crate::JoinMode::Static => None,
            crate::JoinMode::Ssm => Some(StoreKind::Ssm),
            crate::JoinMode::SecretsManager => Some(StoreKind::SecretsManager),
        }
    }
}

/// A store kind other than `ssm` and `secrets-manager`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown store {0:?} (expected ssm or secrets-manager)")]
pub struct UnknownStoreKind(pub String);

impl std::str::FromStr for StoreKind {
    type Err = UnknownStoreKind;
    fn from_str(s: &str) -> Result<Self, UnknownStoreKind> {
        match s {
            "ssm" => Ok(StoreKind::Ssm),
            "secrets-manager" => Ok(StoreKind::SecretsManager),
            other => Err(UnknownStoreKind(other.to_owned())),
        }
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoreKind::Ssm => "ssm",
            StoreKind::SecretsManager => "secrets-manager",
        })
    }
}
