//! monitoring/'s alert rules, read by Prometheus itself: `promtool check rules` on the rendered
//! groups, and `promtool test rules` with series that make each alert fire and series that
//! must not (the spec: fixtures/specs/secrets-manager-arm.yaml, which turns monitoring on).
//!
//! Needs promtool (Debian's `prometheus` package, .ci/setup-tools). Missing: fails when
//! CI=true, otherwise skips with one loud SKIP line.
//!
//! The dashboard is type-checked against Grafana's published schema, npm `@grafana/schema`
//! (its TypeScript `Dashboard` type, with `satisfies`: unknown fields and wrong types fail),
//! by TypeScript's `tsc`; both are installed with npm into a cache outside the repository
//! (`$KK_TOOLS_CACHE`, default `~/.cache/kubean-karpenter/tools`). Without node/npm: fails when
//! CI=true, otherwise skips.

use std::path::Path;
use std::process::Command;

use kk_render::monitoring;
use kk_spec::{ElasticCluster, parse_spec};
use serde_json::{Value, json};
use tempfile::TempDir;

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

fn promtool_or_skip() -> bool {
    let present = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if present {
        return true;
    }
    let why = "promtool not installed (apt-get install prometheus); run .ci/setup-tools";
    if in_ci() {
        panic!("{why}");
    }
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIP: {why}");
    });
    false
}

fn cluster() -> ElasticCluster {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/specs/secrets-manager-arm.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    parse_spec(&text, "secrets-manager-arm").unwrap().spec
}

fn groups(cluster: &ElasticCluster) -> Value {
    let monitoring = monitoring::enabled(cluster).expect("the fixture turns monitoring on");
    monitoring::rule_groups(cluster, monitoring)
}

/// Runs promtool with `args` in `dir`: (success, stdout + stderr).
fn promtool(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn write_rules(dir: &Path, groups: &Value) {
    let text = serde_json::to_string_pretty(&json!({ "groups": groups })).unwrap();
    std::fs::write(dir.join("rules.yaml"), text).unwrap();
}

/// The rule called `name`.
fn rule<'a>(groups: &'a Value, name: &str) -> &'a Value {
    groups[0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["alert"] == name)
        .unwrap_or_else(|| panic!("no alert {name}"))
}

/// The alert `name` firing with the series labels `labels`: its rule's labels added, its
/// annotations with `{{ $labels.x }}` filled in (what Prometheus sends).
fn firing(groups: &Value, name: &str, labels: Value) -> Value {
    let rule = rule(groups, name);
    let mut all = labels.as_object().unwrap().clone();
    for (key, value) in rule["labels"].as_object().unwrap() {
        all.insert(key.clone(), value.clone());
    }
    let mut annotations = serde_json::Map::new();
    for (key, value) in rule["annotations"].as_object().unwrap() {
        let mut text = value.as_str().unwrap().to_owned();
        for (label, value) in labels.as_object().unwrap() {
            text = text.replace(
                &format!("{{{{ $labels.{label} }}}}"),
                value.as_str().unwrap(),
            );
        }
        annotations.insert(key.clone(), text.into());
    }
    json!({ "exp_labels": all, "exp_annotations": annotations })
}

fn series(name: &str, values: &str) -> Value {
    json!({ "series": name, "values": values })
}

fn check(alert: &str, at: &str, expected: Vec<Value>) -> Value {
    json!({ "eval_time": at, "alertname": alert, "exp_alerts": expected })
}

/// One promtool test case per alert: series, then when it must and must not fire.
fn cases(groups: &Value) -> Vec<Value> {
    let gpu = "KubeanKarpenterGpuNodeNotInitialized";
    let registered = "KubeanKarpenterNodeClaimNotRegistered";
    let token = "KubeanKarpenterJoinTokenNearExpiry";
    let backlog = "KubeanKarpenterInterruptionQueueBacklog";
    let limit = "KubeanKarpenterPoolAtLimitWithPendingPods";
    let denials = "KubeanKarpenterNodeCsrDenialsSpiking";
    let forged = "KubeanKarpenterNodeCsrForged";
    let unhealthy = "KubeanKarpenterNodeUnhealthy";
    let blocked = "KubeanKarpenterNodeRepairBlocked";
    let health = "kubean_karpenter_node_health_condition";
    let status = "operator_nodeclaim_status_condition_current_status_seconds";
    let bucket = "karpenter_interruption_message_queue_duration_seconds_bucket";
    let decisions = "kubean_karpenter_csr_decisions_total";
    let denied = "kubean_karpenter_csr_denied_total";
    vec![
        json!({
            "interval": "1m",
            "input_series": [
                // Pool shared-a10g, five nodes: one GPU falls off the bus at minute 5, a second
                // at minute 10 (2 of 5 is over the 20 % breaker). Pool graviton: one node of
                // five sick (within the breaker).
                series(&format!("{health}{{node=\"a\",nodepool=\"shared-a10g\",condition=\"AcceleratedHardwareReady\",reason=\"NvidiaGPUIsReady\"}}"), "1x4 _x25"),
                series(&format!("{health}{{node=\"a\",nodepool=\"shared-a10g\",condition=\"AcceleratedHardwareReady\",reason=\"NvidiaXID79Error\"}}"), "_x4 0x25"),
                series(&format!("{health}{{node=\"b\",nodepool=\"shared-a10g\",condition=\"AcceleratedHardwareReady\",reason=\"NvidiaGPUIsReady\"}}"), "1x9 _x20"),
                series(&format!("{health}{{node=\"b\",nodepool=\"shared-a10g\",condition=\"AcceleratedHardwareReady\",reason=\"NvidiaXID48Error\"}}"), "_x9 0x20"),
                series(&format!("{health}{{node=\"c\",nodepool=\"shared-a10g\",condition=\"AcceleratedHardwareReady\",reason=\"NvidiaGPUIsReady\"}}"), "1x30"),
                series(&format!("{health}{{node=\"d\",nodepool=\"shared-a10g\",condition=\"AcceleratedHardwareReady\",reason=\"NvidiaGPUIsReady\"}}"), "1x30"),
                series(&format!("{health}{{node=\"e\",nodepool=\"shared-a10g\",condition=\"AcceleratedHardwareReady\",reason=\"NvidiaGPUIsReady\"}}"), "1x30"),
                series(&format!("{health}{{node=\"v\",nodepool=\"graviton\",condition=\"StorageReady\",reason=\"ReadonlyFilesystem\"}}"), "0x30"),
                series(&format!("{health}{{node=\"w\",nodepool=\"graviton\",condition=\"StorageReady\",reason=\"StorageIsReady\"}}"), "1x30"),
                series(&format!("{health}{{node=\"x\",nodepool=\"graviton\",condition=\"StorageReady\",reason=\"StorageIsReady\"}}"), "1x30"),
                series(&format!("{health}{{node=\"y\",nodepool=\"graviton\",condition=\"StorageReady\",reason=\"StorageIsReady\"}}"), "1x30"),
                series(&format!("{health}{{node=\"z\",nodepool=\"graviton\",condition=\"StorageReady\",reason=\"StorageIsReady\"}}"), "1x30"),
            ],
            "alert_rule_test": [
                check(unhealthy, "2m", vec![firing(groups, unhealthy, json!({ "node": "v", "nodepool": "graviton", "condition": "StorageReady", "reason": "ReadonlyFilesystem" }))]),
                check(unhealthy, "6m", vec![
                    firing(groups, unhealthy, json!({ "node": "a", "nodepool": "shared-a10g", "condition": "AcceleratedHardwareReady", "reason": "NvidiaXID79Error" })),
                    firing(groups, unhealthy, json!({ "node": "v", "nodepool": "graviton", "condition": "StorageReady", "reason": "ReadonlyFilesystem" })),
                ]),
                check(blocked, "9m", vec![]),
                check(blocked, "13m", vec![]),
                check(blocked, "20m", vec![firing(groups, blocked, json!({ "nodepool": "shared-a10g" }))]),
            ],
        }),
        json!({
            "interval": "1m",
            "input_series": [
                // Uninitialized for 10 min at the start: over 15 min from minute 6.
                series(&format!("{status}{{type=\"Initialized\",status=\"Unknown\",name=\"gpu-stuck\",karpenter_sh_nodepool=\"shared-a10g\"}}"), "600+60x30"),
                // A young one (12 min at minute 12) and a CPU pool's old one: never.
                series(&format!("{status}{{type=\"Initialized\",status=\"Unknown\",name=\"gpu-young\",karpenter_sh_nodepool=\"shared-a10g\"}}"), "0+60x30"),
                series(&format!("{status}{{type=\"Initialized\",status=\"Unknown\",name=\"cpu-slow\",karpenter_sh_nodepool=\"graviton\"}}"), "5000+60x30"),
                series(&format!("{status}{{type=\"Initialized\",status=\"True\",name=\"gpu-fine\",karpenter_sh_nodepool=\"shared-a10g\"}}"), "5000+60x30"),
                // Not registered after 10 min from minute 11; a registered one never.
                series(&format!("{status}{{type=\"Registered\",status=\"False\",name=\"nc-stuck\",karpenter_sh_nodepool=\"graviton\"}}"), "0+60x30"),
                series(&format!("{status}{{type=\"Registered\",status=\"True\",name=\"nc-fine\",karpenter_sh_nodepool=\"graviton\"}}"), "5000+60x30"),
            ],
            "alert_rule_test": [
                check(gpu, "3m", vec![]),
                check(gpu, "12m", vec![firing(groups, gpu, json!({ "name": "gpu-stuck", "karpenter_sh_nodepool": "shared-a10g" }))]),
                check(registered, "5m", vec![]),
                check(registered, "20m", vec![firing(groups, registered, json!({ "name": "nc-stuck", "karpenter_sh_nodepool": "graviton" }))]),
            ],
        }),
        json!({
            "interval": "1m",
            "input_series": [
                // The rotator's token runs down (rotation fails); the approver has no store (NaN).
                series("kubean_karpenter_join_token_expiry_seconds{pod=\"rotator\"}", "3600-60x60"),
                series("kubean_karpenter_join_token_expiry_seconds{pod=\"approver\"}", &["NaN"; 61].join(" ")),
            ],
            "alert_rule_test": [
                check(token, "20m", vec![]),
                check(token, "40m", vec![firing(groups, token, json!({}))]),
            ],
        }),
        json!({
            "interval": "1m",
            "input_series": [
                // A rotating token: back to two hours at each rotation, never under an hour.
                series("kubean_karpenter_join_token_expiry_seconds{pod=\"rotator\"}", "7200-60x60 7200-60x60"),
                // Messages read within 10 s.
                series(&format!("{bucket}{{le=\"10\"}}"), "0+10x30"),
                series(&format!("{bucket}{{le=\"60\"}}"), "0+10x30"),
                series(&format!("{bucket}{{le=\"120\"}}"), "0+10x30"),
                series(&format!("{bucket}{{le=\"+Inf\"}}"), "0+10x30"),
                // A pool below its limit with pods pending; one at its limit with none.
                series("karpenter_nodepools_usage{nodepool=\"shared-a10g\",resource_type=\"nvidia.com/gpu\"}", "4x30"),
                series("karpenter_nodepools_limit{nodepool=\"shared-a10g\",resource_type=\"nvidia.com/gpu\"}", "8x30"),
                series("karpenter_scheduler_unschedulable_pods_count{controller=\"provisioner\"}", "2x30"),
                // One denial in the window; approvals in plenty.
                series(&format!("{decisions}{{condition=\"Denied\",reason=\"KubeanKarpenterRefused\"}}"), "0x10 1x20"),
                series(&format!("{decisions}{{condition=\"Approved\",reason=\"KubeanKarpenterNodeClaim\"}}"), "0+10x30"),
                // Denials a kubelet can get (no NodeClaim yet, a broken request): never forged.
                series(&format!("{denied}{{reason=\"no_claim\"}}"), "0+1x30"),
                series(&format!("{denied}{{reason=\"malformed_request\"}}"), "0+1x30"),
                series(&format!("{denied}{{reason=\"invalid_name\"}}"), "0x30"),
            ],
            "alert_rule_test": [
                check(token, "100m", vec![]),
                check(backlog, "20m", vec![]),
                check(limit, "20m", vec![]),
                check(denials, "20m", vec![]),
                check(forged, "20m", vec![]),
            ],
        }),
        json!({
            "interval": "1m",
            "input_series": [
                // Messages wait 60–120 s.
                series(&format!("{bucket}{{le=\"10\"}}"), "0x30"),
                series(&format!("{bucket}{{le=\"60\"}}"), "0x30"),
                series(&format!("{bucket}{{le=\"120\"}}"), "0+10x30"),
                series(&format!("{bucket}{{le=\"+Inf\"}}"), "0+10x30"),
                // The GPU pool at its GPU limit, the CPU pool well below, pods pending.
                series("karpenter_nodepools_usage{nodepool=\"shared-a10g\",resource_type=\"nvidia.com/gpu\"}", "8x30"),
                series("karpenter_nodepools_limit{nodepool=\"shared-a10g\",resource_type=\"nvidia.com/gpu\"}", "8x30"),
                series("karpenter_nodepools_usage{nodepool=\"graviton\",resource_type=\"cpu\"}", "10x30"),
                series("karpenter_nodepools_limit{nodepool=\"graviton\",resource_type=\"cpu\"}", "100x30"),
                series("karpenter_scheduler_unschedulable_pods_count{controller=\"provisioner\"}", "2x30"),
                // A denial a minute; contested ones stay at 0.
                series(&format!("{decisions}{{condition=\"Denied\",reason=\"KubeanKarpenterRefused\"}}"), "0+1x30"),
                series(&format!("{decisions}{{condition=\"Denied\",reason=\"KubeanKarpenterContested\"}}"), "0x30"),
                // One CSR for a name that is no instance ID at minute 6: the alert fires at once.
                series(&format!("{denied}{{reason=\"invalid_name\"}}"), "0x5 1x25"),
                series(&format!("{denied}{{reason=\"approved_before\"}}"), "0x30"),
            ],
            "alert_rule_test": [
                check(backlog, "3m", vec![]),
                check(backlog, "15m", vec![firing(groups, backlog, json!({}))]),
                check(limit, "5m", vec![]),
                check(limit, "15m", vec![firing(groups, limit, json!({ "nodepool": "shared-a10g" }))]),
                check(denials, "2m", vec![]),
                check(denials, "20m", vec![firing(groups, denials, json!({ "reason": "KubeanKarpenterRefused" }))]),
                check(forged, "3m", vec![]),
                check(forged, "10m", vec![firing(groups, forged, json!({ "reason": "invalid_name" }))]),
            ],
        }),
    ]
}

fn write_tests(dir: &Path, groups: &Value) {
    let tests = json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": cases(groups),
    });
    std::fs::write(
        dir.join("tests.yaml"),
        serde_json::to_string_pretty(&tests).unwrap(),
    )
    .unwrap();
}

#[test]
fn every_alert_is_valid_promql_and_has_a_runbook_naming_a_doctor_check() {
    let groups = groups(&cluster());
    let rules = groups[0]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 9, "every alert applies to this fixture");
    for rule in rules {
        let runbook = rule["annotations"]["runbook"].as_str().unwrap();
        assert!(
            runbook.starts_with("kubean-karpenter doctor SPEC: check `"),
            "{runbook}"
        );
    }
    if !promtool_or_skip() {
        return;
    }
    let dir = TempDir::new().unwrap();
    write_rules(dir.path(), &groups);
    let (ok, out) = promtool(dir.path(), &["check", "rules", "rules.yaml"]);
    assert!(ok, "{out}");
    assert!(out.contains("SUCCESS: 9 rules found"), "{out}");
}

#[test]
fn a_broken_expression_fails_promtool_check() {
    if !promtool_or_skip() {
        return;
    }
    let mut groups = groups(&cluster());
    groups[0]["rules"][0]["expr"] =
        json!("max by (name (operator_nodeclaim_status_condition_current_status_seconds)");
    let dir = TempDir::new().unwrap();
    write_rules(dir.path(), &groups);
    let (ok, out) = promtool(dir.path(), &["check", "rules", "rules.yaml"]);
    assert!(!ok, "{out}");
}

#[test]
fn each_alert_fires_on_its_trouble_and_stays_quiet_otherwise() {
    if !promtool_or_skip() {
        return;
    }
    let groups = groups(&cluster());
    let dir = TempDir::new().unwrap();
    write_rules(dir.path(), &groups);
    write_tests(dir.path(), &groups);
    let (ok, out) = promtool(dir.path(), &["test", "rules", "tests.yaml"]);
    assert!(ok, "{out}");
}

#[test]
fn the_unit_tests_can_fail() {
    // The same tests against rules whose GPU threshold is an hour: the firing case must fail.
    if !promtool_or_skip() {
        return;
    }
    let groups = groups(&cluster());
    let mut lax = groups.clone();
    let expr = lax[0]["rules"][0]["expr"]
        .as_str()
        .unwrap()
        .replace("> 900", "> 3600");
    lax[0]["rules"][0]["expr"] = json!(expr);
    let dir = TempDir::new().unwrap();
    write_rules(dir.path(), &lax);
    write_tests(dir.path(), &groups);
    let (ok, out) = promtool(dir.path(), &["test", "rules", "tests.yaml"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("KubeanKarpenterGpuNodeNotInitialized"),
        "{out}"
    );
}

#[test]
fn the_forged_csr_alert_test_can_fail() {
    // The same tests against a forged-CSR alert that waits for a second denial: its firing
    // case (one `invalid_name` denial) must fail.
    if !promtool_or_skip() {
        return;
    }
    let groups = groups(&cluster());
    let mut lax = groups.clone();
    let rules = lax[0]["rules"].as_array_mut().unwrap();
    let forged = rules
        .iter_mut()
        .find(|r| r["alert"] == "KubeanKarpenterNodeCsrForged")
        .unwrap();
    let expr = forged["expr"].as_str().unwrap().replace("> 0", "> 1");
    forged["expr"] = json!(expr);
    let dir = TempDir::new().unwrap();
    write_rules(dir.path(), &lax);
    write_tests(dir.path(), &groups);
    let (ok, out) = promtool(dir.path(), &["test", "rules", "tests.yaml"]);
    assert!(!ok, "{out}");
    assert!(out.contains("KubeanKarpenterNodeCsrForged"), "{out}");
}

/// Every (expr) of the dashboard's panels.
fn dashboard_queries(cluster: &ElasticCluster) -> Vec<String> {
    let dashboard = kk_render::dashboard::dashboard(cluster);
    dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().clone())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_dashboard_is_a_labelled_configmap_of_non_overlapping_panels() {
    let cluster = cluster();
    let monitoring = monitoring::enabled(&cluster).unwrap();
    let map = kk_render::dashboard::config_map(&cluster, monitoring, kk_render::monitoring::NAME)
        .unwrap();
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(
        map["metadata"]["labels"]["release"], "kube-prometheus-stack",
        "the spec's labels, for the sidecar's and Prometheus' selectors"
    );
    let text = map["data"][kk_render::dashboard::FILE].as_str().unwrap();
    let dashboard: Value = serde_json::from_str(text).unwrap();
    assert_eq!(dashboard["uid"], kk_render::dashboard::UID);
    let panels = dashboard["panels"].as_array().unwrap();
    assert_eq!(panels.len(), 6);
    let mut cells = std::collections::BTreeSet::new();
    for panel in panels {
        let g = &panel["gridPos"];
        let (x, y, w, h) = (
            g["x"].as_u64().unwrap(),
            g["y"].as_u64().unwrap(),
            g["w"].as_u64().unwrap(),
            g["h"].as_u64().unwrap(),
        );
        assert!(x + w <= 24, "{panel}");
        for cx in x..x + w {
            for cy in y..y + h {
                assert!(cells.insert((cx, cy)), "panels overlap at {cx},{cy}");
            }
        }
    }
}

#[test]
fn every_dashboard_query_is_valid_promql() {
    if !promtool_or_skip() {
        return;
    }
    let queries = dashboard_queries(&cluster());
    // promtool checks PromQL inside rule files: one recording rule per query.
    let rules: Vec<Value> = queries
        .iter()
        .enumerate()
        .map(|(i, expr)| json!({ "record": format!("dashboard:query{i}"), "expr": expr }))
        .collect();
    let dir = TempDir::new().unwrap();
    write_rules(
        dir.path(),
        &json!([{ "name": "dashboard", "rules": rules }]),
    );
    let (ok, out) = promtool(dir.path(), &["check", "rules", "rules.yaml"]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", queries.len())),
        "{out}"
    );
}

/// Grafana's schema package and the TypeScript compiler that checks against it, pinned.
const GRAFANA_SCHEMA: &str = "@grafana/schema@13.2.3";
const TYPESCRIPT: &str = "typescript@5.9.3";

fn skip(why: &str) -> Option<std::path::PathBuf> {
    if in_ci() {
        panic!("{why}");
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIP: {why}");
    None
}

/// The cached npm prefix holding both packages, installed on first use.
fn grafana_schema_or_skip() -> Option<std::path::PathBuf> {
    let cache = std::env::var_os("KK_TOOLS_CACHE")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| std::path::PathBuf::from(h).join(".cache/kubean-karpenter/tools"))
        })?;
    let dir = cache.join(format!("{GRAFANA_SCHEMA}-{TYPESCRIPT}").replace(['@', '/'], "_"));
    let ready = dir.join("node_modules/.bin/tsc").exists()
        && dir
            .join("node_modules/@grafana/schema/package.json")
            .exists();
    if !ready {
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
            .arg(&dir)
            .args([GRAFANA_SCHEMA, TYPESCRIPT])
            .output();
        match out {
            Ok(out) if out.status.success() => {}
            other => {
                return skip(&format!(
                    "npm install {GRAFANA_SCHEMA} {TYPESCRIPT} failed: {other:?}"
                ));
            }
        }
    }
    Some(dir)
}

/// `tsc` on a module that declares `dashboard` to satisfy Grafana's `Dashboard` type.
fn type_check(prefix: &Path, dashboard: &Value) -> (bool, String) {
    let source = format!(
        "import type {{ Dashboard }} from \"@grafana/schema\";\nconst dashboard = {} satisfies Dashboard;\nexport default dashboard;\n",
        serde_json::to_string_pretty(dashboard).unwrap()
    );
    let file = prefix.join("kubean-karpenter-dashboard-check.ts");
    std::fs::write(&file, source).unwrap();
    let out = Command::new(prefix.join("node_modules/.bin/tsc"))
        .args([
            "--noEmit",
            "--strict",
            "--module",
            "esnext",
            "--moduleResolution",
            "bundler",
            "--target",
            "es2020",
        ])
        .arg(&file)
        .current_dir(prefix)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_dashboard_satisfies_grafanas_published_schema_and_a_wrong_one_does_not() {
    let Some(prefix) = grafana_schema_or_skip() else {
        return;
    };
    let dashboard = kk_render::dashboard::dashboard(&cluster());
    let (ok, out) = type_check(&prefix, &dashboard);
    assert!(ok, "{out}");
    // A wrong type, and a field Grafana's model does not have, are each refused.
    let mut wrong_type = dashboard.clone();
    wrong_type["panels"][0]["gridPos"]["h"] = json!("8");
    let (ok, out) = type_check(&prefix, &wrong_type);
    assert!(
        !ok && out.contains("not assignable to type 'number'"),
        "{out}"
    );
    let mut unknown = dashboard.clone();
    unknown["refreshEvery"] = json!("1m");
    let (ok, out) = type_check(&prefix, &unknown);
    assert!(!ok && out.contains("refreshEvery"), "{out}");
}

fn budgets_cluster() -> ElasticCluster {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/specs/budgets.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    parse_spec(&text, "budgets").unwrap().spec
}

/// The three budget alerts on series the budget controller exports: pool a at 90 % of its
/// budget (warning share 80 %) and at its budget from minute 10; pool b quiet; the heartbeat
/// stops at minute 10 (staleAfter 2m).
fn budget_cases(groups: &Value) -> Vec<Value> {
    let near = "KubeanKarpenterSpendNearBudget";
    let exhausted = "KubeanKarpenterBudgetExhausted";
    let down = "KubeanKarpenterBudgetControllerDown";
    vec![json!({
        "interval": "1m",
        "input_series": [
            series("kubean_karpenter_spend_per_hour{pool=\"a\"}", "0.18x30"),
            series("kubean_karpenter_budget_warn_per_hour{pool=\"a\"}", "0.16x30"),
            series("kubean_karpenter_spend_per_hour{pool=\"b\"}", "1x30"),
            series("kubean_karpenter_budget_warn_per_hour{pool=\"b\"}", "16x30"),
            series("kubean_karpenter_budget_exhausted{pool=\"a\"}", "0x9 1x20"),
            series("kubean_karpenter_budget_exhausted{pool=\"b\"}", "0x30"),
            series("kubean_karpenter_budget_heartbeat_timestamp_seconds", "0+60x10 _x20"),
        ],
        "alert_rule_test": [
            check(near, "5m", vec![]),
            check(near, "12m", vec![firing(groups, near, json!({ "pool": "a" }))]),
            check(exhausted, "12m", vec![]),
            check(exhausted, "16m", vec![firing(groups, exhausted, json!({ "pool": "a" }))]),
            check(down, "8m", vec![]),
            check(down, "22m", vec![firing(groups, down, json!({}))]),
        ],
    })]
}

#[test]
fn the_budget_alerts_fire_on_their_trouble_and_stay_quiet_otherwise() {
    let budgeted = groups(&budgets_cluster());
    let names: Vec<&str> = budgeted[0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["alert"].as_str())
        .filter(|n| n.contains("Budget"))
        .collect();
    assert_eq!(
        names,
        [
            "KubeanKarpenterSpendNearBudget",
            "KubeanKarpenterBudgetExhausted",
            "KubeanKarpenterBudgetControllerDown"
        ]
    );
    assert!(
        !groups(&self::cluster()).to_string().contains("Budget"),
        "no budget alert without a budget"
    );
    if !promtool_or_skip() {
        return;
    }
    let dir = TempDir::new().unwrap();
    write_rules(dir.path(), &budgeted);
    let tests = json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": budget_cases(&budgeted),
    });
    std::fs::write(dir.path().join("tests.yaml"), tests.to_string()).unwrap();
    let (ok, out) = promtool(dir.path(), &["test", "rules", "tests.yaml"]);
    assert!(ok, "{out}");
}
