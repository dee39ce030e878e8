//! The steps of `apply` beyond Kubernetes objects, for a spec: the AWS side (ORDER.md step 3,
//! kk_live::aws_apply) and the Helm releases (steps 2 and 5) through the `helm` CLI.

use std::process::Command;

use kk_live::aws_apply::{AwsDesired, AwsOutcome};
use kk_live::interruption_apply::{InterruptionDesired, RuleDesired};
use kk_render::Bundle;
use kk_spec::{ElasticCluster, versions};
use serde_json::Value;

use crate::Failure;

fn json_file(bundle: &Bundle, path: &str) -> Result<Value, Failure> {
    let text = bundle
        .files
        .get(path)
        .ok_or_else(|| Failure(format!("the bundle has no {path}")))?;
    serde_json::from_str(text).map_err(|e| Failure(format!("{path}: {e}")))
}

/// What the account should hold, from the spec and the rendered iam/ files.
pub fn desired(
    spec: &ElasticCluster,
    bundle: &Bundle,
    controller_role: Option<String>,
    rotator_role: Option<String>,
) -> Result<AwsDesired, Failure> {
    let name = &spec.metadata.name;
    let aws = &spec.spec.aws;
    let node_role = json_file(bundle, "iam/node-role.json")?;
    let mut policies = vec![(
        format!("KarpenterControllerPolicy-{name}"),
        json_file(bundle, "iam/controller-policy.json")?,
        controller_role,
    )];
    if bundle.files.contains_key("iam/rotator-policy.json") {
        policies.push((
            format!("KubeanKarpenterRotatorPolicy-{name}"),
            json_file(bundle, "iam/rotator-policy.json")?,
            rotator_role,
        ));
    }
    let tag = |d: &kk_spec::Discovery| {
        d.discovery_tag
            .as_ref()
            .map(|t| (t.key.clone(), t.value.clone()))
    };
    Ok(AwsDesired {
        cluster: name.clone(),
        node_role: aws.node_role.clone(),
        trust_policy: json_file(bundle, "iam/node-role-trust-policy.json")?,
        managed_policy_arns: node_role["managedPolicyArns"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        inline_policies: node_role["inlinePolicies"]
            .as_object()
            .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default(),
        instance_profile: aws.node_instance_profile.clone(),
        policies,
        subnet_ids: aws.subnets.ids.clone(),
        subnet_tag: tag(&aws.subnets),
        security_group_ids: aws.security_groups.ids.clone(),
        security_group_tag: tag(&aws.security_groups),
        kubean_instance_ips: spec
            .spec
            .kubean
            .nodes
            .iter()
            .map(|n| n.ip.clone())
            .collect(),
        control_plane_security_group: aws.control_plane_security_group_id.clone(),
        api_port: spec.spec.api_server.port,
        efa: spec.spec.pools.iter().any(|p| p.efa),
        interruption: interruption(bundle)?,
        prune: false,
    })
}

/// The interruption queue and rules `interruption/` describes; `None` when the bundle has none.
fn interruption(bundle: &Bundle) -> Result<Option<InterruptionDesired>, Failure> {
    if !bundle.files.contains_key("interruption/queue.json") {
        return Ok(None);
    }
    let queue = json_file(bundle, "interruption/queue.json")?;
    let text = |v: &Value, key: &str, path: &str| {
        v[key]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| Failure(format!("{path}: no {key}")))
    };
    let rules = json_file(bundle, "interruption/rules.json")?;
    Ok(Some(InterruptionDesired {
        queue: text(&queue, "queueName", "interruption/queue.json")?,
        queue_arn: text(&queue, "arn", "interruption/queue.json")?,
        attributes: queue["attributes"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect(),
        policy: json_file(bundle, "interruption/queue-policy.json")?,
        rules: rules
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                Ok(RuleDesired {
                    name: text(r, "name", "interruption/rules.json")?,
                    event_pattern: r["eventPattern"].clone(),
                    description: format!(
                        "kubean-karpenter: Karpenter interruption handling; {}",
                        r["karpenter"].as_str().unwrap_or_default()
                    ),
                })
            })
            .collect::<Result<_, Failure>>()?,
    }))
}

/// Prints what the AWS side did (or, planning, would do).
pub fn report(outcome: &AwsOutcome, plan_only: bool) {
    let verb = if plan_only { "would call" } else { "called" };
    for w in &outcome.writes {
        eprintln!("aws: {verb} {w}");
    }
    for n in &outcome.notes {
        eprintln!("aws: note: {n}");
    }
    eprintln!(
        "aws: {} write(s), {} read(s){}",
        outcome.writes.len(),
        outcome.reads,
        if outcome.writes.is_empty() {
            " — already as the spec says"
        } else {
            ""
        }
    );
}

/// One Helm release of the bundle.
#[derive(Debug, Clone)]
pub struct Release {
    pub name: String,
    pub namespace: String,
    pub chart: String,
    pub version: Option<String>,
    pub repo: Option<String>,
    /// Bundle path of the values file.
    pub values_file: String,
}

impl Release {
    fn command(&self, values_path: &str) -> Vec<String> {
        let mut c = vec![
            "helm".into(),
            "upgrade".into(),
            "--install".into(),
            self.name.clone(),
            self.chart.clone(),
        ];
        if let Some(repo) = &self.repo {
            c.extend(["--repo".into(), repo.clone()]);
        }
        if let Some(v) = &self.version {
            c.extend(["--version".into(), v.clone()]);
        }
        c.extend([
            "--namespace".into(),
            self.namespace.clone(),
            "--create-namespace".into(),
            "-f".into(),
            values_path.to_owned(),
        ]);
        c
    }
}

/// The releases ORDER.md installs: the EBS CSI driver (step 2) and Karpenter (step 5).
pub fn releases(spec: &ElasticCluster, bundle: &Bundle) -> Vec<Release> {
    let mut out = Vec::new();
    let ebs = versions::component(versions::EBS_CSI_DRIVER);
    if bundle.files.contains_key("cloud/ebs-csi-values.yaml") {
        out.push(Release {
            name: "aws-ebs-csi-driver".into(),
            namespace: "kube-system".into(),
            chart: ebs
                .chart
                .as_ref()
                .map_or("aws-ebs-csi-driver", |c| c.name.as_str())
                .into(),
            version: Some(versions::default_version(versions::EBS_CSI_DRIVER).into()),
            repo: ebs.chart.as_ref().map(|c| c.repository.clone()),
            values_file: "cloud/ebs-csi-values.yaml".into(),
        });
    }
    out.push(Release {
        name: "karpenter".into(),
        namespace: spec.spec.karpenter.namespace.clone(),
        chart: versions::component(versions::KARPENTER)
            .chart
            .as_ref()
            .map_or_else(
                || "oci://public.ecr.aws/karpenter/karpenter".into(),
                |c| format!("{}/{}", c.repository, c.name),
            ),
        version: Some(spec.spec.karpenter.version.clone()),
        repo: None,
        values_file: "karpenter/values.yaml".into(),
    });
    out
}

/// What Helm reports about an installed release: its chart version and user-supplied values.
fn installed(helm: &str, r: &Release, kube: &[String]) -> Result<Option<(String, Value)>, Failure> {
    let list = Command::new(helm)
        .args([
            "list",
            "--namespace",
            &r.namespace,
            "--filter",
            &format!("^{}$", r.name),
            "-o",
            "json",
        ])
        .args(kube)
        .output()?;
    if !list.status.success() {
        return Err(Failure(format!(
            "helm list --namespace {}: {}",
            r.namespace,
            String::from_utf8_lossy(&list.stderr).trim()
        )));
    }
    let releases: Value = serde_json::from_slice(&list.stdout).unwrap_or(Value::Null);
    let Some(chart) = releases
        .as_array()
        .and_then(|a| a.first())
        .and_then(|r| r["chart"].as_str())
        .map(str::to_owned)
    else {
        return Ok(None);
    };
    let values = Command::new(helm)
        .args([
            "get",
            "values",
            &r.name,
            "--namespace",
            &r.namespace,
            "-o",
            "json",
        ])
        .args(kube)
        .output()?;
    if !values.status.success() {
        return Err(Failure(format!(
            "helm get values {}: {}",
            r.name,
            String::from_utf8_lossy(&values.stderr).trim()
        )));
    }
    Ok(Some((
        chart,
        serde_json::from_slice(&values.stdout).unwrap_or(Value::Null),
    )))
}

/// Installs or upgrades each release, skipping those whose chart version and values are
/// already what the bundle says (`helm upgrade` would add a revision for nothing).
/// Returns (release, action) pairs.
pub fn helm(
    releases: &[Release],
    bundle: &Bundle,
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
    dry_run: bool,
) -> Result<Vec<(String, String)>, Failure> {
    let dir = tempfile::tempdir()?;
    let helm = std::env::var("KK_HELM").unwrap_or_else(|_| "helm".into());
    let found = Command::new(&helm).arg("version").arg("--short").output();
    let mut kube = Vec::new();
    if let Some(k) = kubeconfig {
        kube.extend(["--kubeconfig".to_owned(), k.display().to_string()]);
    }
    if let Some(c) = context {
        kube.extend(["--kube-context".to_owned(), c.to_owned()]);
    }
    if !found.is_ok_and(|o| o.status.success()) {
        let commands: Vec<String> = releases
            .iter()
            .map(|r| r.command(&r.values_file).join(" "))
            .collect();
        return Err(Failure(format!(
            "`helm` is not on PATH: install Helm 3, or run these yourself and re-run apply with --skip-helm:\n  {}",
            commands.join("\n  ")
        )));
    }
    let mut done = Vec::new();
    for r in releases {
        let text = bundle
            .files
            .get(&r.values_file)
            .ok_or_else(|| Failure(format!("the bundle has no {}", r.values_file)))?;
        let want: Value =
            serde_saphyr::from_str(text).map_err(|e| Failure(format!("{}: {e}", r.values_file)))?;
        let path = dir.path().join(r.values_file.replace('/', "-"));
        std::fs::write(&path, text)?;
        let current = installed(&helm, r, &kube)?;
        let chart_version = r.version.as_deref().unwrap_or("");
        let unchanged = current.as_ref().is_some_and(|(chart, values)| {
            (chart_version.is_empty() || chart.ends_with(&format!("-{chart_version}")))
                && *values == want
        });
        if unchanged {
            done.push((
                r.name.clone(),
                "unchanged (chart and values as rendered; no new revision)".into(),
            ));
            continue;
        }
        let mut args = r.command(&path.display().to_string());
        args.remove(0);
        if dry_run {
            args.push("--dry-run=server".into());
        }
        args.extend(kube.iter().cloned());
        let out = Command::new(&helm).args(&args).output()?;
        if !out.status.success() {
            return Err(Failure(format!(
                "helm {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        done.push((
            r.name.clone(),
            match (current.is_some(), dry_run) {
                (_, true) => "would install/upgrade (helm --dry-run=server)".into(),
                (true, false) => "upgraded".into(),
                (false, false) => "installed".into(),
            },
        ));
    }
    Ok(done)
}
