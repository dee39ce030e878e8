//! The disruption oracle's scenarios (testbed/karpenter-oracle `disrupt-generate`, docs/internals/fidelity.md
//! "The disruption oracle") as a cluster state: the provisioning scenario format plus `pdbs` and
//! `disruption: {now, spotToSpot}`. Pure: a JSON value in, state and options out.

use kk_model::yaml::Document;
use serde_json::{Value, json};

use super::clock::parse_time;
use super::engine::Options;
use super::state::{ClusterState, load_parsed};
use crate::input::{LoadOptions, ParsedFile};
use crate::scenario::ScenarioError;

fn with_kind(v: &Value, kind: &str) -> Value {
    let api = match kind {
        "NodePool" | "NodeClaim" => "karpenter.sh/v1",
        "DaemonSet" => "apps/v1",
        "PodDisruptionBudget" => "policy/v1",
        _ => "v1",
    };
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.entry("apiVersion").or_insert_with(|| json!(api));
        m.entry("kind").or_insert_with(|| json!(kind));
    }
    v
}

/// A disruption scenario → (state, options for one pass with its candidates recorded).
pub fn read(v: &Value) -> Result<(ClusterState, Options), ScenarioError> {
    let catalog = crate::scenario::catalog(v)?;
    let arr = |k: &str| {
        v.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let mut items = Vec::new();
    for p in arr("nodePools") {
        items.push(with_kind(&p, "NodePool"));
    }
    for d in arr("daemonSets") {
        items.push(with_kind(&d, "DaemonSet"));
    }
    for p in arr("pods") {
        items.push(with_kind(&p, "Pod"));
    }
    for p in arr("pdbs") {
        items.push(with_kind(&p, "PodDisruptionBudget"));
    }
    for e in arr("existingNodes") {
        let Some(node) = e.get("node") else { continue };
        let name = node.pointer("/metadata/name").cloned().unwrap_or(json!(""));
        items.push(with_kind(node, "Node"));
        if let Some(nc) = e.get("nodeClaim") {
            let mut nc = with_kind(nc, "NodeClaim");
            if let Some(status) = nc.get_mut("status").and_then(Value::as_object_mut) {
                status.entry("nodeName").or_insert(name.clone());
            }
            items.push(nc);
        }
        for p in e
            .get("pods")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let mut p = with_kind(p, "Pod");
            if let Some(spec) = p.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("nodeName".into(), name.clone());
            }
            items.push(p);
        }
    }
    // The scenario is JSON already parsed: one List, without a text to parse again.
    // (`json!` would serialize `items` into a copy of itself.)
    let mut list = json!({"apiVersion": "v1", "kind": "List"});
    list["items"] = Value::Array(items);
    let file = ParsedFile {
        name: "scenario.json".into(),
        docs: vec![Document::parsed(list)],
    };
    let min_values_policy = crate::solver::MinValuesPolicy::from_json(v.get("minValuesPolicy"))
        .map_err(|e| ScenarioError::Invalid(format!("minValuesPolicy: {e}")))?
        .unwrap_or_default();
    let load = LoadOptions {
        options: crate::solver::Options {
            min_values_policy,
            ..crate::solver::Options::default()
        },
        ..LoadOptions::default()
    };
    let state =
        load_parsed(&[file], Vec::new(), &load, Some(catalog)).map_err(ScenarioError::Load)?;
    let d = v
        .get("disruption")
        .ok_or_else(|| ScenarioError::Invalid("scenario has no \"disruption\" section".into()))?;
    let now = parse_time(d.get("now").and_then(Value::as_str).unwrap_or_default())
        .map_err(|e| ScenarioError::Invalid(format!("disruption.now: {e}")))?;
    let opts = Options {
        now,
        spot_to_spot: d
            .get("spotToSpot")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        explain: None,
        max_rounds: 1,
        first_pass_candidates: true,
        watch: None,
        reclaim: None,
        reboot_for_repair: false,
    };
    Ok((state, opts))
}
