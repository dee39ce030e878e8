//! Set-up steps several lab tests share (the lab harness is `crates/cli/tests/lab/harness.rs`).

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// What a hand-edited plugin manifest does: the bundle's device plugin DaemonSet
/// (`kube-system/nvidia-device-plugin`) tolerates only the upstream default taint
/// (`nvidia.com/gpu`), not the GPU pool's, so it never runs on the pool's nodes.
pub async fn device_plugin_tolerates_only_the_upstream_taint(client: &Client) {
    let ds: Api<DaemonSet> = Api::namespaced(client.clone(), "kube-system");
    let patch = json!({"spec": {"template": {"spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}}});
    ds.patch(
        "nvidia-device-plugin",
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .unwrap();
}
