//! `karpenter/values.yaml`: Helm values for Karpenter against a non-EKS control plane.

use kk_spec::{CredentialSource, ElasticCluster, images, versions};
use serde_json::{Value, json};

use crate::names::{self, INFRA_ROLE_LABEL};
use crate::{Bundle, RenderError};
use kk_spec::ca::ClusterCa;

pub fn values(cluster: &ElasticCluster, ca: &ClusterCa) -> Value {
    let spec = &cluster.spec;
    let k = &spec.karpenter;
    let mut env = vec![json!({ "name": "AWS_REGION", "value": spec.aws.region })];
    if k.credentials.source == CredentialSource::StaticSecret {
        // Only when the infra workers cannot carry an instance profile: the keys stay in
        // a Secret the operator creates; they never appear in rendered files.
        for key in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
            env.push(json!({
                "name": key,
                "valueFrom": { "secretKeyRef": { "name": k.credentials.secret_name, "key": key } }
            }));
        }
    }
    let mut controller = json!({ "env": env });
    // The chart pins its own image (by digest where its values.yaml has one); the spec's
    // `images.karpenter` (a mirror, a digest) replaces it, tag = the chart version.
    if spec.images.contains_key(versions::KARPENTER) || spec.registry.is_some() {
        let image = images::resolve(spec, versions::KARPENTER);
        controller["image"] = json!({
            "repository": image.repository,
            "tag": image.tag,
            "digest": image.digest.unwrap_or_default(),
        });
    }
    let mut values = json!({
        "settings": {
            "clusterName": cluster.metadata.name,
            // Must be set off EKS, or Karpenter calls eks:DescribeCluster and exits.
            "clusterEndpoint": format!("https://{}:{}", spec.api_server.dns_name, spec.api_server.port),
            "clusterCABundle": ca.bundle_base64,
            "eksControlPlane": false,
            "isolatedVPC": k.isolated_vpc,
            // The queue's name (Karpenter calls GetQueueUrl with it); empty: no interruption controller.
            "interruptionQueue": kk_spec::interruption::queue_name(cluster).unwrap_or_default(),
        },
        "controller": controller,
        // Karpenter must never run on nodes it manages: pin it to Kubean's infra workers.
        // The chart's default affinity (no karpenter.sh/nodepool, spread by host) stays.
        "nodeSelector": { INFRA_ROLE_LABEL: "" },
        "tolerations": names::infra_tolerations(spec),
        // The chart's default 2 replicas with required hostname anti-affinity: one per infra node.
        "replicas": names::infra_replicas(spec),
    });
    // The gates the spec names, each in the chart's map for it; the chart keeps its defaults
    // for the rest.
    for (name, on) in &k.feature_gates {
        if let Some(gate) = kk_spec::feature_gates::find(name) {
            let map = match gate.family {
                kk_spec::feature_gates::Family::Core => "featureGates",
                kk_spec::feature_gates::Family::Aws => "awsFeatureGates",
            };
            values["settings"][map][name.as_str()] = json!(on);
        }
    }
    // Node repair follows the health agent unless the spec names the gate: the agent's
    // conditions are what repair acts on.
    if spec.node_repair() && !k.feature_gates.contains_key("nodeRepair") {
        values["settings"]["featureGates"]["nodeRepair"] = json!(true);
    }
    if crate::controller_workload::Network::for_aws_caller(spec)
        == crate::controller_workload::Network::Host
    {
        // The instance profile through IMDS with the infra workers' hop limit at 1: only
        // host-network pods reach it, so the other pods there cannot borrow Karpenter's role.
        values["hostNetwork"] = json!(true);
        values["dnsPolicy"] = json!("Default");
    }
    if let Some(scheduler) = &spec.scheduler {
        // Karpenter parses the text strictly (YAML; JSON is YAML): the same list Kubespray
        // gives kube-scheduler, so both place pods without constraints alike.
        let config = scheduler.karpenter_config().to_string();
        if let Some(env) = values["controller"]["env"].as_array_mut() {
            env.push(json!({ "name": "SCHEDULER_CONFIG", "value": config }));
        }
    }
    if let Some(policy) = k.min_values_policy {
        values["settings"]["minValuesPolicy"] = json!(policy.as_str());
    }
    if let Some(monitoring) = crate::monitoring::enabled(cluster) {
        // The chart's own ServiceMonitor (`serviceMonitor.enabled`, chart v1.14), carrying the
        // labels the operator's Prometheus selects monitors by.
        values["serviceMonitor"] = json!({
            "enabled": true,
            "additionalLabels": monitoring.labels,
        });
    }
    values
}

/// The bundle file granting Karpenter list and watch on Services (`spec.scheduler` only).
pub const SERVICES_READER_FILE: &str = "cloud/karpenter-services-reader.yaml";
const SERVICES_READER: &str = "kubean-karpenter:karpenter-services-reader";

/// Karpenter deduces a pod's default-spread selector from the Services selecting it (core
/// v1.15 `defaultconstraints.go`) through a cluster-wide watch; the chart's ClusterRole grants
/// Services nowhere but `get` in kube-system. Read only, nothing else.
fn services_reader(cluster: &ElasticCluster) -> [Value; 2] {
    let labels = json!({ crate::names::MANAGED_BY.0: crate::names::MANAGED_BY.1 });
    [
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": { "name": SERVICES_READER, "labels": labels },
            "rules": [{ "apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"] }],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": { "name": SERVICES_READER, "labels": labels },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SERVICES_READER },
            "subjects": [{ "kind": "ServiceAccount", "name": "karpenter", "namespace": cluster.spec.karpenter.namespace }],
        }),
    ]
}

/// Karpenter's namespace, before Helm (step 5) would create it (the bundle's objects for it,
/// such as the PrometheusRule, need it). Applied first in the new cluster. No managed-by label: pruning our objects must never
/// delete the namespace Karpenter runs in.
fn namespace(cluster: &ElasticCluster) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": { "name": cluster.spec.karpenter.namespace },
    })
}

pub fn render(
    cluster: &ElasticCluster,
    ca: &ClusterCa,
    bundle: &mut Bundle,
) -> Result<(), RenderError> {
    bundle.add_yaml(
        &format!("namespaces/{}.yaml", cluster.spec.karpenter.namespace),
        &[namespace(cluster)],
    )?;
    if cluster.spec.scheduler.is_some() {
        bundle.add_yaml(SERVICES_READER_FILE, &services_reader(cluster))?;
    }
    bundle.add_release(crate::helm::karpenter(cluster), values(cluster, ca))
}
