//! The `ElasticCluster` document: every placeholder of the seed runbook in one place.
//!
//! Field names follow Kubernetes conventions (camelCase, `...ID` for identifiers).
//! Unknown fields are refused: a typo in a spec must not silently become a default.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const API_VERSION: &str = "kubean-karpenter.io/v1alpha1";
pub const KIND: &str = "ElasticCluster";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ElasticCluster {
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    pub spec: ClusterSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    /// The cluster name: Karpenter's `settings.clusterName`, the discovery tag value, the Kubean Cluster.
    pub name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSpec {
    /// Kubernetes version Kubean installs, e.g. `1.35.5` (within the Karpenter release's range
    /// in the versions table: 1.14 supports 1.29–1.36).
    pub kubernetes_version: String,
    pub api_server: ApiServer,
    /// The new cluster's CA. Absent in stage 1 (before Kubean has created the CA): `render`
    /// then writes only `kubean/` and says so.
    #[serde(default)]
    pub ca_bundle: CaBundleSource,
    pub kubean: Kubean,
    pub aws: Aws,
    #[serde(default)]
    pub karpenter: Karpenter,
    pub join: Join,
    /// The aws-iam-authenticator server on the control-plane nodes: the API server's token
    /// webhook for pools with `joinMethod: iam`. Required when a pool uses that method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iam_authenticator: Option<IamAuthenticator>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuStack>,
    /// Scheduling defaults kube-scheduler and Karpenter share, so that the nodes Karpenter
    /// launches are the ones the scheduler then binds pods to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<Scheduler>,
    pub pools: Vec<Pool>,
    /// How `apply` reaches the new cluster (everything but `kubean/`); its kubeconfig is the one
    /// Kubean stores in the `<cluster>-kubeconf` ConfigMap. Command-line flags win.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<ClusterAccess>,
    /// The in-cluster controller (`kubean-karpenter controller`: join-token rotator and CSR
    /// approver) that the `ssm` and `secrets-manager` join modes run; required there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<Controller>,
    /// Per-image overrides, keyed by the versions table's component name
    /// (`cloud-controller-manager`, `nvidia-device-plugin`, ...): a mirror repository, a digest
    /// (rendered `repository:tag@sha256:...`), and for components whose version the spec sets
    /// nowhere else, the tag.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub images: BTreeMap<String, ImageOverride>,
    /// An air-gapped install: every image is pulled from `mirror`, Kubespray downloads files
    /// from `filesRepo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<Registry>,
    /// Prometheus monitoring of the fleet (`monitoring/`, Karpenter's ServiceMonitor), rendered
    /// only when the cluster runs the Prometheus Operator (`prometheusOperator: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitoring: Option<Monitoring>,
    /// The whole fleet's spend limit, US dollars per hour, shared by every dynamic pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::spend::SpendBudget>,
    /// How budgets hold while the budget controller is silent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_enforcement: Option<crate::spend::BudgetEnforcement>,
}

/// What the cluster's Prometheus Operator should watch and alert on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Monitoring {
    /// The cluster runs the Prometheus Operator (its CRDs `monitoring.coreos.com/v1`): render
    /// `monitoring/` (alert rules, a PodMonitor for our controllers) and turn on the Karpenter
    /// chart's ServiceMonitor. Off by default: without the operator those kinds do not exist.
    #[serde(default)]
    pub prometheus_operator: bool,
    /// Labels put on every monitoring object, for the Prometheus resource's rule and monitor
    /// selectors (kube-prometheus-stack selects `release: <its Helm release>` by default).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Minutes a GPU NodeClaim may stay launched but not initialized (billed, unusable: the
    /// driver or device plugin never came up) before the alert fires.
    #[serde(default = "default_gpu_initialized_within_minutes")]
    pub gpu_initialized_within_minutes: u32,
}

fn default_gpu_initialized_within_minutes() -> u32 {
    15
}

/// The private registry (and file server) an air-gapped cluster pulls from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Registry {
    /// `host[:port]` of the mirror. Every image `upstream-host/path:tag` becomes
    /// `mirror/path:tag` (the layout `skopeo copy` to `docker://mirror/path:tag` and containerd's
    /// `hosts.toml` mirrors both use); nodes also get containerd mirror config for the public
    /// registries, Kubespray its offline variables.
    pub mirror: String,
    /// Kubespray's `files_repo`: an HTTP(S) server holding kubeadm, kubelet, etcd, CNI, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_repo: Option<String>,
}

/// One image's override (`spec.images.<component>`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageOverride {
    /// Registry and repository, no tag or digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// The tag; only for components whose version is not set elsewhere in the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// `sha256:` and 64 lowercase hex digits: the image manifest (or index) digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Controller {
    pub image: ControllerImage,
}

/// Where the controller's image lives, pinned by digest: `dist/image` builds it and writes the
/// digest to `dist/out/IMAGE_DIGEST`; `skopeo copy --preserve-digests` pushes it unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControllerImage {
    /// Registry and repository, no tag or digest: `registry.example.com/team/kubean-karpenter`.
    pub repository: String,
    /// The image manifest's digest, `sha256:` and 64 lowercase hex digits.
    pub digest: String,
}

impl ControllerImage {
    /// The reference the Deployment runs: `repository@digest`.
    pub fn reference(&self) -> String {
        format!("{}@{}", self.repository, self.digest)
    }
}

/// A cluster `apply` talks to: a kubeconfig file (relative to the spec file) and/or a context.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterAccess {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiServer {
    /// DNS name nodes use to reach the API server (`<KUBE_APISERVER_DNS_NAME>`); also a SAN.
    pub dns_name: String,
    /// The one API server port: the apiservers listen on it (Kubespray `kube_apiserver_port`),
    /// the load balancer forwards it, nodes join on it.
    #[serde(default = "default_api_port")]
    pub port: u16,
    /// IP of the load balancer in front of the API servers, when Kubespray should pin it
    /// in /etc/hosts (`loadbalancer_apiserver.address`); omit when DNS resolves the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_address: Option<String>,
}

fn default_api_port() -> u16 {
    6443
}

/// Where the cluster CA certificate comes from; at most one field is set (none: stage 1).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CaBundleSource {
    /// A PEM file, relative to the spec file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The PEM, base64-encoded (as in a kubeconfig's `certificate-authority-data`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
    /// Read `certificate-authority-data` from a kubeconfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<KubeconfigRef>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeconfigRef {
    pub path: String,
    /// Cluster entry to read; the current context's cluster when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Kubean {
    /// Namespace of the hosts/vars ConfigMaps and the SSH Secret.
    #[serde(default = "default_kubean_namespace")]
    pub namespace: String,
    /// The spray-job image the ClusterOperation runs.
    pub spray_job_image: String,
    /// Kubespray `kube_network_plugin` (calico, cilium, ...). Not aws-vpc-cni: pod density is set explicitly.
    #[serde(default = "default_network_plugin")]
    pub network_plugin: String,
    pub ssh: Ssh,
    pub nodes: Vec<KubeanNode>,
    /// Taints for infra nodes, in Kubespray's `key=value:Effect` form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub infra_taints: Vec<String>,
    /// The cluster Kubean runs in, where `apply` sends `kubean/` (not the cluster it builds).
    /// Command-line flags (`--mgmt-kubeconfig`, `--mgmt-context`) win.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub management_cluster: Option<ClusterAccess>,
    /// An adopted cluster: the name of the Kubean `Cluster` that already built it. Kubean's own
    /// inventory, variables and Cluster stay authoritative: render writes no `kubean/` install
    /// objects, and day-two operations (`kubean upgrade`, `scale`, ...) name this Cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub existing_cluster: Option<String>,
}

fn default_kubean_namespace() -> String {
    "kubean-system".into()
}

fn default_network_plugin() -> String {
    "calico".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ssh {
    pub user: String,
    #[serde(default = "default_ssh_port")]
    pub port: u16,
    /// Secret (type kubernetes.io/ssh-auth, key `ssh-privatekey`) in the Kubean namespace.
    pub private_key_secret: String,
}

fn default_ssh_port() -> u16 {
    22
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeRole {
    ControlPlane,
    Etcd,
    Infra,
}

impl NodeRole {
    /// As the spec writes it (`control-plane`, `etcd`, `infra`).
    pub fn as_str(self) -> &'static str {
        match self {
            NodeRole::ControlPlane => "control-plane",
            NodeRole::Etcd => "etcd",
            NodeRole::Infra => "infra",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeanNode {
    pub name: String,
    pub ip: String,
    /// EC2 private DNS name (required; validate says so): Kubespray never sets `--provider-id`,
    /// so the AWS cloud controller manager finds the instance by this name, which the node
    /// registers under (`kube_override_hostname`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_dns_name: Option<String>,
    pub roles: Vec<NodeRole>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Aws {
    pub region: String,
    /// Needed for IAM ARNs (`iam:PassRole` on the node role only).
    #[serde(rename = "accountID")]
    pub account_id: String,
    #[serde(default = "default_partition")]
    pub partition: String,
    #[serde(rename = "vpcID")]
    pub vpc_id: String,
    pub subnets: Discovery,
    pub security_groups: Discovery,
    /// Security group of the API server; must admit `apiServer.port` from the node security group.
    #[serde(rename = "controlPlaneSecurityGroupID")]
    pub control_plane_security_group_id: String,
    pub node_role: String,
    pub node_instance_profile: String,
}

fn default_partition() -> String {
    "aws".into()
}

/// Subnets or security groups: by IDs, or by a discovery tag (default `karpenter.sh/discovery=<cluster>`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Discovery {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery_tag: Option<Tag>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tag {
    pub key: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Karpenter {
    #[serde(default = "default_karpenter_namespace")]
    pub namespace: String,
    /// Helm chart version of oci://public.ecr.aws/karpenter/karpenter (default: the versions
    /// table's, `kubean-karpenter versions`).
    #[serde(default = "default_karpenter_version")]
    pub version: String,
    #[serde(default)]
    pub credentials: ControllerCredentials,
    /// The SQS queue Karpenter reads spot-interruption, rebalance, state-change, scheduled
    /// maintenance and capacity-reservation events from (a queue name, not a URL or ARN).
    /// Absent: the cluster's name whenever a pool allows `spot` or `reserved`, none otherwise.
    /// `""` turns it off (validate warns when a pool allows spot). See
    /// [`crate::interruption::queue_name`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruption_queue: Option<String>,
    /// No internet: skip the pricing API.
    #[serde(rename = "isolatedVPC", default)]
    pub isolated_vpc: bool,
    /// Karpenter's feature gates by the chart's key (`spotToSpotConsolidation: true`); those
    /// not named keep the chart's default ([`crate::feature_gates::GATES`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub feature_gates: BTreeMap<String, bool>,
    /// What Karpenter does when a pool's instance types cannot meet a `minValues`
    /// (`settings.minValuesPolicy`): `Strict` (the chart's default) launches nothing,
    /// `BestEffort` launches with the minValues lowered to what the types offer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values_policy: Option<MinValuesPolicy>,
}

/// Karpenter's `settings.minValuesPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MinValuesPolicy {
    Strict,
    BestEffort,
}

impl MinValuesPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            MinValuesPolicy::Strict => "Strict",
            MinValuesPolicy::BestEffort => "BestEffort",
        }
    }
}

/// `scheduler`: kube-scheduler's default topology spread (Kubespray's `kube_scheduler_profiles`,
/// `defaultingType: List`) and Karpenter's mirror of it (`SCHEDULER_CONFIG`, core v1.15).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scheduler {
    /// Given to every pod without topology spread constraints of its own, with the selector
    /// both schedulers deduce from its Services and its ReplicaSet or StatefulSet. No
    /// `labelSelector` or `matchLabelKeys`: Karpenter refuses them in defaults.
    #[serde(default)]
    pub default_constraints: Vec<DefaultSpreadConstraint>,
}

/// One default topology spread constraint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DefaultSpreadConstraint {
    pub max_skew: i32,
    /// `topology.kubernetes.io/zone`, `kubernetes.io/hostname`, ...
    pub topology_key: String,
    /// `DoNotSchedule` or `ScheduleAnyway`. Karpenter treats ScheduleAnyway as required until
    /// a pod cannot be placed, then relaxes it; kube-scheduler only scores it.
    pub when_unsatisfiable: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_domains: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_taints_policy: Option<String>,
}

impl Scheduler {
    /// Karpenter's `SCHEDULER_CONFIG` document (`podTopologySpread.defaultConstraints`).
    pub fn karpenter_config(&self) -> serde_json::Value {
        serde_json::json!({ "podTopologySpread": { "defaultConstraints": self.default_constraints } })
    }

    /// Kubespray's `kube_scheduler_profiles`: the default profile with PodTopologySpread's
    /// `List` defaulting (kube-scheduler's v1 config refuses constraints under `System`).
    pub fn kube_scheduler_profiles(&self) -> serde_json::Value {
        serde_json::json!([{
            "schedulerName": "default-scheduler",
            "pluginConfig": [{
                "name": "PodTopologySpread",
                "args": {
                    "defaultingType": "List",
                    "defaultConstraints": self.default_constraints,
                },
            }],
        }])
    }
}

impl Default for Karpenter {
    fn default() -> Self {
        Self {
            namespace: default_karpenter_namespace(),
            version: default_karpenter_version(),
            credentials: ControllerCredentials::default(),
            interruption_queue: None,
            isolated_vpc: false,
            feature_gates: BTreeMap::new(),
            min_values_policy: None,
        }
    }
}

fn default_karpenter_namespace() -> String {
    "karpenter".into()
}

fn default_karpenter_version() -> String {
    crate::versions::default_version(crate::versions::KARPENTER).into()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CredentialSource {
    /// The infra workers' instance profile (recommended).
    #[default]
    InstanceProfile,
    /// AK/SK from a Secret (only when an instance profile cannot be used).
    StaticSecret,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControllerCredentials {
    #[serde(default)]
    pub source: CredentialSource,
    /// Secret with keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (staticSecret only).
    #[serde(default = "default_credentials_secret")]
    pub secret_name: String,
}

impl Default for ControllerCredentials {
    fn default() -> Self {
        Self {
            source: CredentialSource::default(),
            secret_name: default_credentials_secret(),
        }
    }
}

fn default_credentials_secret() -> String {
    "karpenter-aws-credentials".into()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JoinMode {
    /// Token and CA hash embedded in userData (the seed's way; a rotation drifts every node).
    Static,
    /// Fetched at boot from an SSM SecureString parameter.
    Ssm,
    /// Fetched at boot from a Secrets Manager secret.
    SecretsManager,
}

impl JoinMode {
    /// Whether this mode runs the in-cluster controller (its image is then required).
    pub fn runs_controller(self) -> bool {
        match self {
            JoinMode::Static => false,
            JoinMode::Ssm | JoinMode::SecretsManager => true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Join {
    pub mode: JoinMode,
    /// SSM parameter name or Secrets Manager secret name; default `/kubean-karpenter/<cluster>/join`
    /// (SSM) or `kubean-karpenter/<cluster>/join` (Secrets Manager).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_name: Option<String>,
    /// Static mode only: `[a-z0-9]{6}.[a-z0-9]{16}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Static mode only; computed from the CA bundle when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert_hash: Option<String>,
    /// A customer-managed KMS key for the store (ssm and secrets-manager modes): `render`
    /// writes its key policy, which lets only this cluster's node role decrypt the store and
    /// only `writerArns` (the rotator's identity) write it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms: Option<JoinKms>,
    /// Static mode only, and required there: the token sits in userData with kubeadm's
    /// auto-approval, so whoever reads userData (IMDS, `ec2:DescribeInstanceAttribute`, the
    /// EC2NodeClass) can register as any node until it expires. For labs and tests.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_insecure_static: bool,
}

/// How the nodes of a pool (of its node class) prove who they are when they join.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JoinMethod {
    /// `kubeadm join` with a bootstrap token (`spec.join`): Custom AMIs that ship kubeadm.
    #[default]
    KubeadmToken,
    /// nodeadm with a kubelet that authenticates as its instance's IAM role through the
    /// aws-iam-authenticator webhook (`spec.iamAuthenticator`): EKS-optimized AL2023 AMIs, or
    /// Custom AMIs that ship nodeadm. No shared secret reaches the node.
    Iam,
}

impl JoinMethod {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// The aws-iam-authenticator server (sigs.k8s.io/aws-iam-authenticator) run on every
/// control-plane node, listening on 127.0.0.1 for the API server's token webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IamAuthenticator {
    /// The cluster ID tokens are bound to (their signed `x-k8s-aws-id` header); nodes' nodeadm
    /// `cluster.name`. Defaults to `metadata.name`.
    #[serde(rename = "clusterID", default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// The authenticator's container image, pinned by tag or digest.
    pub image: String,
    /// The serving certificate (PEM, base64-encoded; public). Its key goes into the TLS Secret
    /// `kube-system/aws-iam-authenticator-serving`, created by the operator, never the spec.
    /// The API server trusts exactly this certificate (self-signed, SAN IP 127.0.0.1).
    pub serving_certificate: String,
    /// Port on 127.0.0.1 of each control-plane node.
    #[serde(default = "default_authenticator_port")]
    pub port: u16,
}

fn default_authenticator_port() -> u16 {
    21362
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinKms {
    /// `arn:<partition>:kms:<region>:<account>:key/<key-id>`.
    pub key_arn: String,
    /// IAM role or user ARNs that publish the join configuration (the rotator's AWS identity).
    #[serde(default)]
    pub writer_arns: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GpuStack {
    /// NVIDIA driver baked into the GPU AMI (`<NVIDIA_DRIVER_VERSION>`), checked at boot.
    pub driver_version: String,
    /// CUDA version of the AMI (`<CUDA_VERSION>`), for the verification workload.
    pub cuda_version: String,
    /// Tag of nvcr.io/nvidia/k8s-device-plugin (`<NVIDIA_DEVICE_PLUGIN_VERSION>`); the bare
    /// device plugin's image (with `stack: operator` the operator's release picks its own).
    pub device_plugin_version: String,
    /// What advertises the GPUs: our bare device plugin DaemonSet, or the NVIDIA GPU Operator.
    #[serde(default)]
    pub stack: GpuSoftware,
    /// The GPU Operator chart release under `stack: operator` (`v26.7.0`); the versions table's
    /// default when unset. Pinned to step through NVIDIA's one-line-at-a-time upgrades.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_version: Option<String>,
}

impl GpuStack {
    /// The GPU Operator release render installs: the pin, else the versions table's default.
    pub fn operator_release(&self) -> &str {
        self.operator_version
            .as_deref()
            .unwrap_or_else(|| crate::versions::default_version(crate::versions::GPU_OPERATOR))
    }
}

/// `gpu.stack`: which NVIDIA software runs on the GPU nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuSoftware {
    /// `gpu/nvidia-device-plugin.yaml`: the device plugin DaemonSet alone.
    #[default]
    DevicePlugin,
    /// The NVIDIA GPU Operator chart (device plugin, GPU feature discovery, DCGM exporter;
    /// driver and container toolkit off: the GPU AMIs bake them in).
    Operator,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolType {
    Cpu,
    Gpu,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pool {
    /// NodePool name.
    pub name: String,
    #[serde(rename = "type")]
    pub pool_type: PoolType,
    /// EC2NodeClass name; defaults to the pool name. Pools may share one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class: Option<String>,
    pub ami: Ami,
    /// How its nodes join: `kubeadm-token` (default) or `iam`. Pools sharing a node class agree.
    #[serde(default, skip_serializing_if = "JoinMethod::is_default")]
    pub join_method: JoinMethod,
    pub instances: Instances,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<PoolGpu>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// NodePool limits (`cpu`, `memory`, `nvidia.com/gpu`, ...), as Kubernetes quantities.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, QuantityValue>,
    /// A spend limit in US dollars per hour: Karpenter never launches past it (the budget
    /// controller narrows this NodePool's `limits[budget.resource]`; docs/guide/budgets.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::spend::SpendBudget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<Disruption>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<RootVolume>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<Kubelet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
    /// A static (warm) pool: Karpenter keeps exactly this many nodes, whatever the pods
    /// (`spec.replicas`, the `staticCapacity` feature gate, alpha). No `weight`, only the
    /// `nodes` limit, no consolidation, and a pool cannot switch between static and dynamic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// Node-class field: the capacity reservations (On-Demand Capacity Reservations, capacity
    /// blocks for ML) its `reserved` offerings come from, as Karpenter's
    /// `capacityReservationSelectorTerms` (terms are ORed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservations: Vec<CapacityReservationTerm>,
    /// How long Karpenter lets a node's pods drain (checkpoint) before it removes the node
    /// anyway (`spec.template.spec.terminationGracePeriod`): e.g. `2h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<String>,
    /// Node-class field: `raid0` puts the kubelet's and containerd's roots on a RAID0 of the
    /// instance-store NVMe disks, built by the userData (Karpenter ignores
    /// `instanceStorePolicy` with `amiFamily: Custom`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_storage: Option<LocalStorage>,
    /// Pods of this pool use EFA (`vpc.amazonaws.com/efa`): the EFA device plugin runs on its
    /// nodes, and the node security groups admit all traffic from themselves.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub efa: bool,
    /// Kueue job queueing for this GPU pool: a ResourceFlavor (its nodes), a ClusterQueue
    /// (quota = its limits) and a LocalQueue in each namespace listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<PoolQueue>,
    /// The node health agent on this pool's nodes: which faults it turns into the node
    /// conditions Karpenter's node repair acts on. Default: GPU faults (NVIDIA XIDs) on GPU
    /// pools when `controller` names our image (the agent's), nothing elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<PoolHealth>,
}

/// `health` on a pool: what the node health agent watches there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolHealth {
    /// NVIDIA XIDs (`AcceleratedHardwareReady`); default: on for a GPU pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<bool>,
    /// A read-only or shut-down filesystem (`StorageReady`); default: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<bool>,
}

/// What the health agent watches on a pool's nodes, defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HealthWatch {
    pub gpu: bool,
    pub kernel: bool,
}

impl HealthWatch {
    /// Whether the agent runs on the pool's nodes at all.
    pub fn any(self) -> bool {
        self.gpu || self.kernel
    }
}

impl ClusterSpec {
    /// What the node health agent watches on `pool`'s nodes: as its `health` says; where it
    /// says nothing, GPU faults on a GPU pool when the spec names our controller's image (the
    /// agent's), else nothing.
    pub fn health_watch(&self, pool: &Pool) -> HealthWatch {
        let h = pool.health.unwrap_or_default();
        HealthWatch {
            gpu: h
                .gpu
                .unwrap_or(pool.pool_type == PoolType::Gpu && self.controller.is_some()),
            kernel: h.kernel.unwrap_or(false),
        }
    }

    /// Whether any pool runs the node health agent.
    pub fn runs_health_agent(&self) -> bool {
        self.pools.iter().any(|p| self.health_watch(p).any())
    }

    /// Whether Karpenter's node repair reboots for the faults a reboot clears: the AWS gate
    /// `karpenter.featureGates.rebootForRepair` (off unless named).
    pub fn reboot_for_repair(&self) -> bool {
        self.karpenter.feature_gates.get("rebootForRepair") == Some(&true)
    }

    /// Whether Karpenter's node repair is on: as `karpenter.featureGates.nodeRepair` says, or,
    /// where it says nothing, on exactly when a pool runs the health agent.
    pub fn node_repair(&self) -> bool {
        self.karpenter
            .feature_gates
            .get("nodeRepair")
            .copied()
            .unwrap_or_else(|| self.runs_health_agent())
    }
}

// Spend budgets (spend.rs): which pools a budget narrows, and how.

impl Pool {
    /// The resource a budget on this pool narrows: as written; else the GPU resource on a GPU
    /// pool whose NodeClaims count its GPUs exactly (not time-sliced, where the Node advertises
    /// more than the NodeClaim), else `cpu`.
    pub fn budget_resource(&self) -> String {
        if let Some(resource) = self.budget.as_ref().and_then(|b| b.resource.clone()) {
            return resource;
        }
        match &self.gpu {
            Some(gpu) if self.pool_type == PoolType::Gpu && gpu.sharing_replicas <= 1 => {
                crate::spend::GPU_RESOURCE.to_owned()
            }
            _ => "cpu".to_owned(),
        }
    }
}

impl ClusterSpec {
    /// The pools whose launches the budget controller narrows, with the resource it narrows:
    /// dynamic pools with a budget, and every dynamic pool when the cluster has one. Static
    /// pools (`replicas`) launch a fixed count; their spend is checked once, at validate.
    pub fn budgeted_pools(&self) -> impl Iterator<Item = (&Pool, String)> {
        self.pools
            .iter()
            .filter(|p| p.replicas.is_none() && (p.budget.is_some() || self.budget.is_some()))
            .map(|p| (p, p.budget_resource()))
    }

    /// Whether the budget controller runs: a dynamic pool is budgeted.
    pub fn runs_budget_controller(&self) -> bool {
        self.budgeted_pools().next().is_some()
    }

    /// What a launch meets while the budget controller is silent.
    pub fn on_controller_down(&self) -> crate::spend::OnControllerDown {
        self.budget_enforcement
            .as_ref()
            .map(|e| e.on_controller_down)
            .unwrap_or_default()
    }

    /// How old the controller's heartbeat may be (validated; the default where unparsable).
    pub fn budget_stale_after(&self) -> std::time::Duration {
        self.budget_enforcement
            .as_ref()
            .and_then(|e| e.stale_after.as_deref())
            .and_then(|text| crate::time::parse_duration(text).ok())
            .unwrap_or(crate::spend::DEFAULT_STALE_AFTER)
    }
}

/// `queue` on a GPU pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolQueue {
    /// Namespaces whose jobs may use the pool: each gets a LocalQueue named after the pool.
    pub namespaces: Vec<String>,
}

/// What the userData does with the instance-store NVMe disks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LocalStorage {
    /// One RAID0 array of every instance-store disk, under /var/lib/kubelet and
    /// /var/lib/containerd.
    Raid0,
}

/// One capacity-reservation selector term: an `id`, or `tags` and/or `instanceMatchCriteria`
/// (optionally narrowed to an `ownerID`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityReservationTerm {
    /// A reservation ID, `cr-` and hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Tags the reservations carry (`"*"` matches any value of a key).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// The account owning the reservations (shared reservations), 12 digits.
    #[serde(rename = "ownerID", default, skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
    /// `open` or `targeted` (capacity blocks are targeted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_match_criteria: Option<String>,
}

/// A quantity written as a string (`"500"`, `1000Gi`) or a bare number (`500`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum QuantityValue {
    Int(i64),
    Float(f64),
    Text(String),
}

impl QuantityValue {
    pub fn as_text(&self) -> String {
        match self {
            Self::Int(i) => i.to_string(),
            Self::Float(f) => f.to_string(),
            Self::Text(s) => s.clone(),
        }
    }
}

/// The AMI, exactly one of three forms. Only `id` validates today: `alias` and `ssmRelease`
/// select EKS-optimized images, which have no kubeadm (kept for the identity-based join).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ami {
    /// An AMI ID, e.g. `ami-0123456789abcdef0` (a custom image with kubeadm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// A Karpenter alias `family@version`, e.g. `al2023@v20260827` (pin it; never `@latest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// An EKS AL2023 release such as `1.36.3-20260827`, resolved by Karpenter through the
    /// release's own (immutable) public SSM parameter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_release: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Instances {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub families: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<String>,
    /// Karpenter capacity types, spot first when both are allowed.
    #[serde(default = "default_capacity_types")]
    pub capacity_types: Vec<String>,
    #[serde(default = "default_arch")]
    pub arch: Vec<String>,
    /// Karpenter `minValues` on the instance-type flexibility (spot diversity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<i64>,
    /// Which reservations the pool's `reserved` offerings may come from: `capacity-block`
    /// (capacity blocks for ML) or `default` (On-Demand Capacity Reservations); unset, both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_type: Option<String>,
}

fn default_capacity_types() -> Vec<String> {
    vec!["on-demand".into()]
}

fn default_arch() -> Vec<String> {
    vec!["amd64".into()]
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolGpu {
    #[serde(default = "default_gpu_manufacturer")]
    pub manufacturer: String,
    /// `karpenter.k8s.aws/instance-gpu-name` values, e.g. `l4`, `a10g`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// GPUs per node (`karpenter.k8s.aws/instance-gpu-count`).
    pub count: Option<i64>,
    /// Time-slicing replicas per GPU; the node advertises count × replicas `nvidia.com/gpu`.
    #[serde(default = "default_sharing")]
    pub sharing_replicas: i64,
}

fn default_gpu_manufacturer() -> String {
    "nvidia".into()
}

fn default_sharing() -> i64 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub effect: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Disruption {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidation_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidate_after: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<Budget>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Budget {
    pub nodes: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RootVolume {
    #[serde(default = "default_device_name")]
    pub device_name: String,
    pub size: String,
    #[serde(rename = "type", default = "default_volume_type")]
    pub volume_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    #[serde(default = "default_true")]
    pub encrypted: bool,
    #[serde(rename = "kmsKeyID", default, skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
}

fn default_device_name() -> String {
    "/dev/xvda".into()
}

fn default_volume_type() -> String {
    "gp3".into()
}

fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Kubelet {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<i64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kube_reserved: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub system_reserved: BTreeMap<String, String>,
}
