//! `plan --disrupt --reclaim`: capacity taken back and unavailable. Each test reclaims part of
//! fixtures/disrupt/cluster.yaml and checks where the displaced pods go.

use kk_sim::LoadOptions;
use kk_sim::SourceFile;
use kk_sim::disrupt::{self, Options, Report, Selector};
use serde_json::{Value, json};

use crate::disrupt::{docs, named, text, whole_run};

fn reclaim(docs: &[Value], selector: &str) -> Report {
    reclaim_in(docs, selector, &[])
}

fn reclaim_in(docs: &[Value], selector: &str, zones: &[&str]) -> Report {
    let files = [SourceFile::new("cluster.yaml", text(docs))];
    let load = LoadOptions {
        zones: zones.iter().map(|z| z.to_string()).collect(),
        ..LoadOptions::default()
    };
    let state = disrupt::load(&files, &load, None).expect("state loads");
    let opts = Options {
        reclaim: Some(Selector::parse(selector).unwrap()),
        ..whole_run(state.latest.unwrap())
    };
    disrupt::run(&state, &opts).unwrap()
}

/// gpu-a becomes a spot g5.xlarge running one GPU pod; the GPU pool allows spot and on-demand.
fn spot_gpu_docs() -> Vec<Value> {
    let mut d = docs();
    named(&mut d, "NodePool", "gpu")["spec"]["template"]["spec"]["requirements"][1]["values"] =
        json!(["spot", "on-demand"]);
    named(&mut d, "Node", "gpu-a")["metadata"]["labels"]["karpenter.sh/capacity-type"] =
        json!("spot");
    d.push(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "infer-0", "namespace": "default",
            "creationTimestamp": "2026-11-30T00:00:00Z",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "infer-rs", "uid": "u-infer", "controller": true}],
        },
        "spec": {
            "nodeName": "gpu-a",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "x", "resources": {
                "requests": {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": "1"},
                "limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running", "startTime": "2026-11-30T00:00:00Z"},
    }));
    d
}

#[test]
fn a_spot_reclaim_removes_only_spot_nodes_and_the_pod_moves_to_an_idle_gpu_node() {
    let r = reclaim(&spot_gpu_docs(), "spot");
    assert_eq!(r.commands.len(), 1, "{r:#?}");
    let c = &r.commands[0];
    assert_eq!(
        (c.round, c.method.as_str(), c.reason.as_str()),
        (0, "Interruption", "Reclaimed")
    );
    assert_eq!(
        c.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
        ["gpu-a"]
    );
    // gpu-b and gpu-c run only their DaemonSet pods: the GPU pod fits there, nothing new.
    assert!(c.replacements.is_empty(), "{r:#?}");
    assert_eq!(c.moved_to_existing.len(), 1, "{r:#?}");
    assert_eq!(c.moved_to_existing[0].pod, "default/infer-0");
    assert!(["gpu-b", "gpu-c"].contains(&c.moved_to_existing[0].node.as_str()));
    assert!(r.pending.is_empty() && r.kept.is_empty(), "{r:#?}");
    let reclaim = r.reclaim.as_ref().unwrap();
    assert_eq!(reclaim.selector, "spot");
    assert!(reclaim.unavailable_offerings > 0);
    let table = r.render_table();
    assert!(
        table.starts_with("Reclaim of spot at 2026-12-01T00:00:00Z"),
        "{table}"
    );
    assert!(table.contains("default/infer-0 -> gpu-"), "{table}");
}

#[test]
fn with_no_gpu_room_left_the_replacement_avoids_the_reclaimed_offering() {
    // Fill gpu-b and gpu-c, so the displaced pod needs a new node, and allow only g5.xlarge:
    // spot would be the cheapest, but it is unavailable, so on-demand it is.
    let mut d = spot_gpu_docs();
    named(&mut d, "NodePool", "gpu")["spec"]["template"]["spec"]["requirements"][0]["values"] =
        json!(["g5.xlarge"]);
    for node in ["gpu-b", "gpu-c"] {
        let mut busy = d
            .iter()
            .find(|x| x["metadata"]["name"] == "infer-0")
            .unwrap()
            .clone();
        busy["metadata"]["name"] = json!(format!("busy-{node}"));
        busy["spec"]["nodeName"] = json!(node);
        d.push(busy);
    }
    let r = reclaim(&d, "spot:g5.xlarge");
    let c = &r.commands[0];
    assert_eq!(c.replacements.len(), 1, "{r:#?}");
    let new = &c.replacements[0];
    assert_eq!(
        (new.instance_type.as_str(), new.capacity_type.as_str()),
        ("g5.xlarge", "on-demand"),
        "{new:#?}"
    );
    assert_eq!(new.pods, ["default/infer-0"]);
    assert!(new.price_per_hour > 0.0);
    assert!(r.render_table().contains("(new: "), "{}", r.render_table());
}

#[test]
fn what_cannot_go_anywhere_stays_pending_with_the_schedulers_reason() {
    // Only g5.xlarge allowed and every g5.xlarge offering reclaimed: no place for the pod.
    let mut d = spot_gpu_docs();
    named(&mut d, "NodePool", "gpu")["spec"]["template"]["spec"]["requirements"][0]["values"] =
        json!(["g5.xlarge"]);
    for node in ["gpu-b", "gpu-c"] {
        named(&mut d, "Node", node)["metadata"]["labels"]["karpenter.sh/capacity-type"] =
            json!("spot");
    }
    let r = reclaim(&d, "type:g5.xlarge");
    assert_eq!(r.commands[0].nodes.len(), 3, "{r:#?}");
    let pending: Vec<&str> = r.pending.iter().map(|p| p.pod.as_str()).collect();
    assert!(pending.contains(&"default/infer-0"), "{r:#?}");
    let reason = &r
        .pending
        .iter()
        .find(|p| p.pod == "default/infer-0")
        .unwrap()
        .reason;
    assert!(!reason.is_empty(), "{r:#?}");
    assert!(r.render_table().contains("Pending after the reclaim:"));
}

#[test]
fn a_selector_that_matches_no_node_moves_nothing() {
    let r = reclaim(&docs(), "spot");
    assert!(r.commands.is_empty(), "{r:#?}");
    assert_eq!(r.totals.nodes_before, r.totals.nodes_after);
    assert!(r.render_table().contains("No node runs on that capacity"));
}

#[test]
fn a_zone_reclaim_takes_every_node_there_including_unmanaged_ones() {
    // The offering zones default to the nodes' (all us-east-1a): nothing can replace them.
    let alone = reclaim(&docs(), "zone:us-east-1a");
    assert!(!alone.pending.is_empty(), "{alone:#?}");
    assert!(
        alone
            .warnings
            .iter()
            .any(|w| w.contains("only zone offered")),
        "{alone:#?}"
    );
    // With a second zone offered, the pods move there.
    let zones = ["us-east-1a", "us-east-1b"];
    let r = reclaim_in(&docs(), "zone:us-east-1a", &zones);
    let names: Vec<&str> = r.commands[0]
        .nodes
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    assert!(
        names.contains(&"cp-1") && names.contains(&"cpu-1"),
        "{names:?}"
    );
    assert!(!r.commands[0].replacements.is_empty(), "{r:#?}");
    for repl in &r.commands[0].replacements {
        assert_eq!(repl.zone, "us-east-1b", "{repl:#?}");
    }
    assert!(r.pending.is_empty(), "{r:#?}");
    assert_eq!(
        reclaim_in(&docs(), "zone:us-east-1a", &zones).to_json(),
        r.to_json(),
        "same input, same bytes"
    );
}
