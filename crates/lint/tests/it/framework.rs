//! The framework around the rules: config, inline suppressions, ordering, positions inside
//! embedded documents, and the cross-object cases fixtures (one file each) do not cover.

use kk_lint::output::{self, Format};
use kk_lint::{Config, Input, Report};

const GPU_POOL: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: gpu
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [g6]}
  limits:
    nvidia.com/gpu: \"4\"
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 10m
    budgets:
      - nodes: \"1\"
";

fn lint(files: &[(&str, &str)], config: &Config) -> Report {
    let inputs: Vec<Input> = files.iter().map(|(n, t)| Input::new(*n, *t)).collect();
    kk_lint::lint(&inputs, config).unwrap()
}

fn codes(report: &Report) -> Vec<String> {
    report
        .diagnostics
        .iter()
        .map(|d| format!("{} {}:{}", d.code, d.file, d.pos))
        .collect()
}

#[test]
fn config_disables_a_rule() {
    let report = lint(&[("a.yaml", GPU_POOL)], &Config::default());
    assert_eq!(codes(&report), ["KK002 a.yaml:7:5"]);
    let config = Config::parse("disable: [gpu-pool-untainted]\n", "c").unwrap();
    let report = lint(&[("a.yaml", GPU_POOL)], &config);
    assert!(report.diagnostics.is_empty());
    // A disabled rule does not run, so nothing counts as suppressed.
    assert_eq!(report.suppressed, 0);
}

#[test]
fn inline_suppressions() {
    let before_object = format!("# kubean-karpenter-lint: disable=KK002\n{GPU_POOL}");
    let same_line = GPU_POOL.replace(
        "    spec:\n      nodeClassRef",
        "    spec: # kubean-karpenter-lint: disable=KK002\n      nodeClassRef",
    );
    let line_before = GPU_POOL.replace(
        "    spec:\n      nodeClassRef",
        "    # kubean-karpenter-lint: disable=all\n    spec:\n      nodeClassRef",
    );
    let file_level = format!("# kubean-karpenter-lint: disable-file=KK002\n---\n{GPU_POOL}");
    for text in [&before_object, &same_line, &line_before, &file_level] {
        let report = lint(&[("a.yaml", text)], &Config::default());
        assert!(
            report.diagnostics.is_empty(),
            "{text}\n{:?}",
            codes(&report)
        );
        assert_eq!(report.suppressed, 1);
    }
    // Another code, or a disable-file below the header, leaves the finding.
    let other = format!("# kubean-karpenter-lint: disable=KK007\n{GPU_POOL}");
    let late = format!("{GPU_POOL}# kubean-karpenter-lint: disable-file=KK002\n");
    for text in [&other, &late] {
        let report = lint(&[("a.yaml", text)], &Config::default());
        assert_eq!(report.diagnostics.len(), 1, "{text}");
    }
}

#[test]
fn output_is_sorted_and_deterministic() {
    let files = [("b.yaml", GPU_POOL), ("a.yaml", GPU_POOL)];
    let report = lint(&files, &Config::default());
    assert_eq!(codes(&report), ["KK002 a.yaml:7:5", "KK002 b.yaml:7:5"]);
    let reversed = lint(&[files[1], files[0]], &Config::default());
    for format in [Format::Human, Format::Json, Format::Sarif] {
        assert_eq!(
            output::render(&report, format),
            output::render(&reversed, format)
        );
    }
    let human = output::render(&report, Format::Human);
    assert!(human.contains("\n7 |     spec:\n  |     ^\n"), "{human}");
    assert!(human.ends_with("found 2 problems: 2 warnings (2 objects in 2 files)\n"));
}

#[test]
fn crd_violations_inside_flow_and_block_values_point_at_the_field() {
    let text = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: gpu
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: Maybe, values: [g6]}
      taints:
        - {key: nvidia.com/gpu, effect: NoSchedule}
";
    let report = lint(&[("a.yaml", text)], &Config::default());
    let kk000: Vec<_> = report
        .diagnostics
        .iter()
        .filter(|d| d.code == "KK000" && d.message.contains("operator"))
        .collect();
    assert!(!kk000.is_empty(), "{:?}", codes(&report));
    assert_eq!(kk000[0].pos.line, 10, "{:?}", kk000[0]);
    assert_eq!(kk000[0].pos.col, 62, "{:?}", kk000[0]);
}

#[test]
fn several_device_plugins_none_fitting_reports_on_the_pool() {
    let plugin = |name: &str, selector: &str| {
        format!(
            "apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: {name}, namespace: kube-system}}
spec:
  selector: {{matchLabels: {{name: {name}}}}}
  template:
    metadata: {{labels: {{name: {name}}}}}
    spec:
      nodeSelector: {{{selector}}}
      tolerations: [{{operator: Exists}}]
      containers:
        - {{name: p, image: nvcr.io/nvidia/k8s-device-plugin:v0.17.0}}
"
        )
    };
    let pool = GPU_POOL.replace(
        "      requirements:",
        "      taints: [{key: gpu, effect: NoSchedule}]\n      requirements:",
    );
    let a = plugin("plugin-a", "accelerator: a");
    let b = plugin("plugin-b", "accelerator: b");
    let report = lint(
        &[("pool.yaml", &pool), ("a.yaml", &a), ("b.yaml", &b)],
        &Config::default(),
    );
    let kk003: Vec<_> = report
        .diagnostics
        .iter()
        .filter(|d| d.code == "KK003")
        .collect();
    assert_eq!(kk003.len(), 1, "{:?}", codes(&report));
    assert_eq!(kk003[0].object, "NodePool/gpu");
    assert!(kk003[0].message.contains("DaemonSet/plugin-a:"));
    assert!(kk003[0].message.contains("DaemonSet/plugin-b:"));

    // One of them fitting is enough.
    let c = plugin("plugin-c", "karpenter.sh/nodepool: gpu");
    let report = lint(
        &[("pool.yaml", &pool), ("a.yaml", &a), ("c.yaml", &c)],
        &Config::default(),
    );
    assert!(report.diagnostics.iter().all(|d| d.code != "KK003"));
}

#[test]
fn userdata_findings_point_into_the_script() {
    let text = "apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: cpu
spec:
  amiFamily: Custom
  amiSelectorTerms: [{id: ami-0123456789abcdef0}]
  role: r
  subnetSelectorTerms: [{tags: {a: b}}]
  securityGroupSelectorTerms: [{tags: {a: b}}]
  userData: |

    #!/bin/bash
    # kubean-karpenter-lint: disable=KK008
    A=$(curl -s http://169.254.169.254/latest/meta-data/instance-id)
      B=$(curl -s http://169.254.169.254/latest/meta-data/local-ipv4)
";
    let report = lint(&[("nc.yaml", text)], &Config::default());
    // Other rules (KK012: a Custom class without maxPods) may report on the class itself.
    let kk008: Vec<String> = codes(&report)
        .into_iter()
        .filter(|c| c.starts_with("KK008"))
        .collect();
    assert_eq!(kk008, ["KK008 nc.yaml:16:7"]);
    assert_eq!(report.suppressed, 1);
    let finding = report
        .diagnostics
        .iter()
        .find(|d| d.code == "KK008")
        .unwrap();
    assert_eq!(
        finding.source_line.as_deref(),
        Some("      B=$(curl -s http://169.254.169.254/latest/meta-data/local-ipv4)")
    );
}

/// An advice rule (the seed runbooks' choice, not a defect) says so in its finding, names the
/// alternative and its cost, shows both ways to silence it, and is a SARIF note; a defect
/// rule's finding carries none of that.
#[test]
fn advice_findings_say_they_are_advice() {
    let class = "apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: gpu
spec:
  amiSelectorTerms:
    - alias: al2023@latest
  metadataOptions:
    httpTokens: optional
";
    let report = lint(&[("a.yaml", class)], &Config::default());
    let advice = report
        .diagnostics
        .iter()
        .find(|d| d.code == "KK007")
        .unwrap();
    assert!(
        advice
            .message
            .contains("this is the project's advice, not a defect")
            && advice.message.contains("following `@latest`")
            && advice
                .message
                .contains("# kubean-karpenter-lint: disable=KK007")
            && advice
                .message
                .contains("`disable: [KK007]` in .kubean-karpenter-lint.yaml"),
        "{}",
        advice.message
    );
    let defect = report
        .diagnostics
        .iter()
        .find(|d| d.code == "KK040")
        .unwrap();
    assert!(!defect.message.contains("advice"), "{}", defect.message);
    let sarif: serde_json::Value =
        serde_json::from_str(&kk_lint::output::sarif::render(&report)).unwrap();
    let level = |code: &str| {
        sarif["runs"][0]["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["ruleId"] == code)
            .map(|r| r["level"].clone())
            .unwrap()
    };
    assert_eq!(level("KK007"), "note");
    assert_eq!(level("KK040"), "warning");
}

/// KK016's unmeetable `minValues` follows the linted Karpenter values' `minValuesPolicy`: an
/// error under Strict (the default: the pool launches nothing), a warning naming the lowered
/// value under BestEffort.
#[test]
fn an_unmeetable_min_values_is_an_error_under_strict_and_a_warning_under_best_effort() {
    let pool = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: general
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: general}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m6i.large, m6i.xlarge], minValues: 3}
  limits:
    cpu: \"64\"
";
    let values = |policy: &str| {
        format!(
            "settings:\n  clusterName: demo\n  clusterEndpoint: https://api.demo.internal:6443\n  minValuesPolicy: {policy}\ncontroller: {{}}\n"
        )
    };
    let finding = |files: &[(&str, &str)]| {
        lint(files, &Config::default())
            .diagnostics
            .into_iter()
            .find(|d| d.code == "KK016")
            .expect("KK016 reports the minValues")
    };
    let strict = finding(&[("pool.yaml", pool)]);
    assert_eq!(strict.severity, kk_lint::Severity::Error);
    assert!(
        strict.message.contains("launches nothing") && strict.message.contains("Strict"),
        "{}",
        strict.message
    );
    let strict_values = values("Strict");
    let named = finding(&[("pool.yaml", pool), ("values.yaml", &strict_values)]);
    assert_eq!(named.severity, kk_lint::Severity::Error);
    let best_effort_values = values("BestEffort");
    let relaxed = finding(&[("pool.yaml", pool), ("values.yaml", &best_effort_values)]);
    assert_eq!(relaxed.severity, kk_lint::Severity::Warning);
    assert!(
        relaxed.message.contains("lowered to 2"),
        "{}",
        relaxed.message
    );
}
