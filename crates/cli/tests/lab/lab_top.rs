//! `kubean-karpenter top` on the lab, used by the CPU seed story (lab_e2e): `top --once -o
//! json` against what the API says at the same moment, and the live screen under tmux, whose
//! pane must follow the story (no node, then the launched node, then none again) without a
//! key pressed.

use crate::harness as lab;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use lab::Lab;
use serde_json::Value;

/// One `top --once -o json`.
pub fn snapshot(lab: &Lab) -> Value {
    let out = lab.cli(&["top", "--once", "-o", "json"]);
    serde_json::from_slice(&out.stdout).expect("top -o json prints JSON")
}

fn unbound_pending(lab: &Lab) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    // Where the lab's pods are: the workloads', kube-system, Karpenter's and our controllers'.
    // (An earlier test's bundle may have left the budget controller's or the health agent's.)
    use kk_spec::names::{BUDGET, CSR_APPROVER, HEALTH_AGENT, ROTATOR, controller_namespace};
    let ours = [ROTATOR, CSR_APPROVER, BUDGET, HEALTH_AGENT].map(controller_namespace);
    for ns in ["default", "kube-system", "karpenter"]
        .into_iter()
        .chain(ours)
    {
        for p in lab.pods(ns) {
            let unbound = p.spec.as_ref().is_none_or(|s| s.node_name.is_none());
            // Not bound, phase Pending or no status yet.
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            let pending = matches!(phase, None | Some("Pending"));
            if unbound && pending && p.metadata.deletion_timestamp.is_none() {
                out.insert(key(&p));
            }
        }
    }
    out
}

fn key(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or(""),
        p.metadata.name.as_deref().unwrap_or("")
    )
}

/// `top --once -o json` agrees with the API: the same Nodes, each Karpenter node's pool, type,
/// capacity type and zone as its labels say, its price the catalog's, the same NodeClaims in
/// flight, and every pod Pending before and after the snapshot listed with a reason.
pub fn agrees_with_the_api(lab: &Lab) -> Value {
    // Nodes may join while the snapshot is taken (the bundle's GPU smoke pod launches one):
    // top must show every node there before and after it, and none that was never there.
    let node_names = |lab: &Lab| -> BTreeSet<String> {
        lab.nodes()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect()
    };
    let (nodes_before, before) = (node_names(lab), unbound_pending(lab));
    let v = snapshot(lab);
    let (nodes_after, after) = (node_names(lab), unbound_pending(lab));

    let rows = v["nodes"].as_array().unwrap();
    let top_nodes: BTreeSet<String> = rows
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_owned())
        .collect();
    for n in nodes_before.intersection(&nodes_after) {
        assert!(
            top_nodes.contains(n),
            "{n} was there throughout; top shows {top_nodes:?}"
        );
    }
    for n in &top_nodes {
        assert!(
            nodes_before.contains(n) || nodes_after.contains(n),
            "top shows {n}; the API never did"
        );
    }
    let catalog = kk_catalog::catalog();
    for node in lab.nodes() {
        if !top_nodes.contains(node.metadata.name.as_deref().unwrap_or("")) {
            continue;
        }
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let Some(pool) = labels.get("karpenter.sh/nodepool") else {
            continue;
        };
        let name = node.metadata.name.clone().unwrap();
        let row = rows.iter().find(|r| r["name"] == name.as_str()).unwrap();
        let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
        assert_eq!(row["nodePool"], pool.as_str(), "{row}");
        assert_eq!(
            row["instanceType"],
            label("node.kubernetes.io/instance-type").as_str(),
            "{row}"
        );
        assert_eq!(
            row["capacityType"],
            label("karpenter.sh/capacity-type").as_str(),
            "{row}"
        );
        assert_eq!(
            row["zone"],
            label("topology.kubernetes.io/zone").as_str(),
            "{row}"
        );
        let want = kk_sim::fleet::offering_price(
            catalog,
            &label("node.kubernetes.io/instance-type"),
            &label("topology.kubernetes.io/zone"),
            &label("karpenter.sh/capacity-type"),
        );
        let got = row["pricePerHour"].as_f64();
        assert!(
            matches!((want, got), (Some(w), Some(g)) if (w - g).abs() < 1e-6),
            "price of {name}: catalog {want:?}, top {got:?}"
        );
        let cpu = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get("cpu"))
            .unwrap();
        let millis: i64 = match cpu.0.strip_suffix('m') {
            Some(m) => m.parse().unwrap(),
            None => cpu.0.parse::<i64>().unwrap() * 1000,
        };
        assert_eq!(row["cpu"]["allocatable"], millis, "{row}");
    }

    let listed: BTreeSet<String> = v["pending"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| {
            g["pods"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_owned())
        })
        .collect();
    for pod in before.intersection(&after) {
        assert!(
            listed.contains(pod),
            "{pod} was Pending throughout, top lists {listed:?}"
        );
    }
    for pod in &listed {
        assert!(
            before.contains(pod) || after.contains(pod),
            "top lists {pod} as Pending; the API never did"
        );
    }
    v
}

/// `top` running live in a detached tmux session of its own server.
pub struct Screen {
    socket: String,
}

fn tmux(socket: &str, args: &[&str]) -> std::process::Output {
    Command::new("tmux")
        .arg("-L")
        .arg(socket)
        .args(args)
        .output()
        .expect("tmux runs")
}

impl Screen {
    /// Starts `top` in a `cols`×`rows` pane with the lab's kubeconfig.
    pub fn start(lab: &Lab, cols: u16, rows: u16) -> Screen {
        let socket = format!("kk-top-{}", std::process::id());
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_kubean-karpenter"));
        let command = format!(
            "KUBECONFIG={} NO_COLOR=1 {} top; sleep 30",
            lab.var("KUBECONFIG"),
            bin.display()
        );
        let out = tmux(
            &socket,
            &[
                "new-session",
                "-d",
                "-s",
                "top",
                "-x",
                &cols.to_string(),
                "-y",
                &rows.to_string(),
                &command,
            ],
        );
        assert!(
            out.status.success(),
            "tmux new-session: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Screen { socket }
    }

    /// The pane's text now.
    pub fn pane(&self) -> String {
        let out = tmux(&self.socket, &["capture-pane", "-p", "-t", "top"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until `check` holds on the pane; panics with the last pane after `limit`.
    pub fn wait_for(&self, what: &str, limit: Duration, check: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let pane = self.pane();
            if check(&pane) {
                lab::live(&format!("  top's pane: {what} ({:.0?})", start.elapsed()));
                return pane;
            }
            assert!(
                start.elapsed() < limit,
                "top's pane never showed {what}:\n{pane}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Presses `q`; `top` must leave the screen as it found it and end.
    pub fn quit(&self) {
        tmux(&self.socket, &["send-keys", "-t", "top", "q"]);
        self.wait_for("top ended on q", Duration::from_secs(10), |p| {
            !p.contains("NODE ") && !p.contains("q quit")
        });
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        tmux(&self.socket, &["kill-server"]);
    }
}
