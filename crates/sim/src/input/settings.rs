//! Karpenter's scheduling settings where a cluster sets them: its Helm values
//! (`settings.minValuesPolicy`, `controller.env` `SCHEDULER_CONFIG`) or the
//! `SCHEDULER_CONFIG` text itself. `plan` reads them from a rendered bundle's
//! `karpenter/values.yaml`, or from its flags.

use kk_model::yaml::{LoadLimits, load_documents_unlocated};
use serde_json::Value;

use crate::model::SpreadConstraint;
use crate::solver::MinValuesPolicy;

/// What Karpenter's values say about scheduling; `None`: the chart's default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KarpenterSettings {
    pub min_values_policy: Option<MinValuesPolicy>,
    pub default_spread: Option<Vec<SpreadConstraint>>,
}

/// `SCHEDULER_CONFIG`'s text (YAML or JSON) → the default constraints.
pub fn scheduler_config(text: &str) -> Result<Vec<SpreadConstraint>, String> {
    let docs = load_documents_unlocated(text, LoadLimits::default()).map_err(|e| e.message)?;
    match docs.into_iter().next() {
        None => Ok(Vec::new()),
        Some(doc) => super::default_constraints(&doc.value),
    }
}

/// Karpenter's Helm values → its scheduling settings. Errors name the values key.
pub fn from_values(values: &Value) -> Result<KarpenterSettings, String> {
    let min_values_policy = MinValuesPolicy::from_json(values.pointer("/settings/minValuesPolicy"))
        .map_err(|e| format!("settings.minValuesPolicy: {e}"))?;
    let config = values
        .pointer("/controller/env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|e| e.get("name").and_then(Value::as_str) == Some("SCHEDULER_CONFIG"))
        .and_then(|e| e.get("value").and_then(Value::as_str));
    let default_spread = config
        .map(|text| {
            scheduler_config(text).map_err(|e| format!("controller.env SCHEDULER_CONFIG: {e}"))
        })
        .transpose()?;
    Ok(KarpenterSettings {
        min_values_policy,
        default_spread,
    })
}
