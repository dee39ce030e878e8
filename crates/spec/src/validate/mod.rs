//! Semantic checks on a structurally valid spec. Each returns (field path, message).
//!
//! These catch what would otherwise surface much later: as an apiserver rejection at
//! apply time, a node that never joins, or a pool Karpenter can never launch.
//!
//! One file per spec section (`version.rs`, `control_plane.rs`, `kubean.rs`, `aws.rs`,
//! `karpenter.rs`, `join.rs`, `gpu.rs`, `health.rs`, `budget.rs`, `monitoring.rs`, `pools.rs`, `node_class.rs`, `reservations.rs`); the patterns and lists they share and
//! the entry point [`validate`] are here.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::LazyLock;

use kk_model::FieldPath;
use kk_model::quantity::Quantity;
use regex::Regex;

use crate::types::*;

mod aws;
mod budget;
mod control_plane;
mod controller;
mod gpu;
mod health;
mod images;
mod interruption;
mod join;
mod karpenter;
mod kubean;
mod monitoring;
mod node_class;
mod pools;
mod queue;
mod reservations;
mod scheduler;
mod staleness;
mod version;

use aws::aws;
use control_plane::{api_server, ca_bundle};
use gpu::gpu_stack;
use join::join;
use karpenter::karpenter;
use kubean::kubean;
pub use pools::node_class_name;
use pools::pools;
use version::{karpenter_chart_version, kubean_covers_version, version, worker_kubelet_skew};

type Problems = Vec<(FieldPath, String)>;

macro_rules! re {
    ($name:ident, $pattern:expr) => {
        static $name: LazyLock<Regex> =
            LazyLock::new(|| Regex::new($pattern).expect("valid regex"));
    };
}

re!(DNS_LABEL, r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$");
re!(
    DNS_SUBDOMAIN,
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
);
re!(K8S_VERSION, r"^v?1\.(\d+)\.\d+$");
re!(REGION, r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$");
re!(ACCOUNT, r"^\d{12}$");
re!(VPC_ID, r"^vpc-[0-9a-f]{8,17}$");
re!(SUBNET_ID, r"^subnet-[0-9a-f]{8,17}$");
re!(SG_ID, r"^sg-[0-9a-f]{8,17}$");
re!(AMI_ID, r"^ami-[0-9a-f]{8,17}$");
re!(RESERVATION_ID, r"^cr-[0-9a-f]{8,17}$");
re!(AMI_ALIAS, r"^([a-z0-9]+)@(.+)$");
re!(SSM_RELEASE, r"^1\.(\d+)\.\d+-\d{8}$");
re!(IAM_NAME, r"^[\w+=,.@-]{1,64}$");
re!(TOKEN, r"^[a-z0-9]{6}\.[a-z0-9]{16}$");
re!(CA_HASH, r"^sha256:[0-9a-f]{64}$");
re!(BUDGET_NODES, r"^((100|[0-9]{1,2})%|[0-9]+)$");
re!(
    LABEL_NAME,
    r"^([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$"
);
re!(
    LABEL_VALUE,
    r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
);
// A taint as kubelet and Kubespray's node_taints take it: a label key (optional DNS-subdomain
// prefix), an optional label value, an effect. Nothing a shell or YAML would read twice.
re!(
    INFRA_TAINT,
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9](=(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?)?:(NoSchedule|PreferNoSchedule|NoExecute)$"
);
// A POSIX login name (what Ansible's ansible_user is on the hosts).
re!(SSH_USER, r"^[a-z_][a-z0-9_-]{0,31}$");
re!(
    KMS_KEY_ARN,
    r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
);
re!(
    IAM_PRINCIPAL_ARN,
    r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/[A-Za-z0-9_+=,.@/-]+$"
);
re!(SSM_NAME, r"^/[A-Za-z0-9_.\-/]{1,1010}$");
re!(SECRET_NAME, r"^[A-Za-z0-9/_+=.@-]{1,512}$");
re!(SQS_NAME, r"^[A-Za-z0-9_-]+$");
re!(INSTANCE_TYPE, r"^[a-z0-9-]+\.[a-z0-9-]+$");
re!(IMAGE_TAG, r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$");

const AMI_ALIAS_FAMILIES: [&str; 3] = ["al2", "al2023", "bottlerocket"];
const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
const CAPACITY_TYPES: [&str; 3] = ["spot", "on-demand", "reserved"];
const ARCHES: [&str; 2] = ["amd64", "arm64"];
const VOLUME_TYPES: [&str; 7] = ["gp2", "gp3", "io1", "io2", "st1", "sc1", "standard"];
const RESERVED_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pid"];

pub fn validate(cluster: &ElasticCluster) -> Problems {
    let mut p = Problems::new();
    let root = FieldPath::root();
    if cluster.api_version != API_VERSION {
        p.push((
            root.key("apiVersion"),
            format!("must be {API_VERSION:?}, got {:?}", cluster.api_version),
        ));
    }
    if cluster.kind != KIND {
        p.push((
            root.key("kind"),
            format!("must be {KIND:?}, got {:?}", cluster.kind),
        ));
    }
    if !DNS_LABEL.is_match(&cluster.metadata.name) {
        p.push((
            root.key("metadata").key("name"),
            "cluster name must be a DNS label (lowercase letters, digits, '-', at most 63)".into(),
        ));
    }
    let spec = &cluster.spec;
    let at = root.key("spec");
    version(&mut p, &at, spec);
    kubean_covers_version(&mut p, &at, spec);
    karpenter_chart_version(&mut p, &at, spec);
    api_server(&mut p, &at.key("apiServer"), &spec.api_server);
    ca_bundle(&mut p, &at.key("caBundle"), &spec.ca_bundle);
    kubean(&mut p, &at.key("kubean"), &spec.kubean, &spec.aws.region);
    aws(&mut p, &at.key("aws"), &spec.aws);
    karpenter(&mut p, &at.key("karpenter"), &spec.karpenter);
    join(&mut p, &at.key("join"), &spec.join);
    interruption::interruption(&mut p, &at.key("karpenter"), &spec.karpenter);
    crate::iam::authenticator(&mut p, &at, cluster);
    controller::validate(&mut p, &at, spec);
    gpu_stack(&mut p, &at, spec);
    health::health(&mut p, &at, spec);
    scheduler::scheduler(&mut p, &at, spec);
    monitoring::monitoring(&mut p, &at, spec);
    images::images(&mut p, &at, spec);
    let per_pool_sharing = spec
        .gpu
        .as_ref()
        .is_some_and(|g| g.stack == crate::GpuSoftware::Operator);
    pools(&mut p, &at.key("pools"), &spec.pools, per_pool_sharing);
    pools::static_pools(&mut p, &at, spec);
    budget::budgets(&mut p, &at, spec);
    worker_kubelet_skew(&mut p, &at, spec);
    for (path, access) in [
        (at.key("access"), &spec.access),
        (
            at.key("kubean").key("managementCluster"),
            &spec.kubean.management_cluster,
        ),
    ] {
        if let Some(a) = access
            && a.kubeconfig.is_none()
            && a.context.is_none()
        {
            p.push((path, "set kubeconfig, context or both".into()));
        }
    }

    p
}

/// What [`validate`] lets through but a user should hear about: located like its problems,
/// printed as warnings; they never stop a render.
pub fn warnings(cluster: &ElasticCluster) -> Problems {
    let mut p = staleness::warnings(cluster);
    interruption::warnings(&mut p, &FieldPath::root().key("spec"), &cluster.spec);
    health::warnings(&mut p, &FieldPath::root().key("spec"), &cluster.spec);
    p
}

/// `prefix/name` with a DNS-subdomain prefix, as Kubernetes label keys are.
fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    LABEL_NAME.is_match(name) && prefix.is_none_or(|p| p.len() <= 253 && DNS_SUBDOMAIN.is_match(p))
}
