//! The identity-based join (`joinMethod: iam`): which images it suits and what the
//! aws-iam-authenticator section must hold. Called from `validate`.

use std::sync::LazyLock;

use base64::Engine;
use kk_model::FieldPath;
use regex::Regex;

use crate::types::*;

type Problems = Vec<(FieldPath, String)>;

/// The authenticator's cluster ID: what nodeadm puts in `cluster.name` and signs into every
/// token's `x-k8s-aws-id` header (an EKS cluster name's alphabet).
static CLUSTER_ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$").expect("valid regex"));

/// The authenticator answers health on this port on every address, whatever `port` says
/// (sigs.k8s.io/aws-iam-authenticator v0.7.2 pkg/server/server.go).
pub const AUTHENTICATOR_HEALTH_PORT: u16 = 21363;

/// The authenticator's cluster ID for a cluster (`iamAuthenticator.clusterID`, else the name).
pub fn authenticator_cluster_id(cluster: &ElasticCluster) -> &str {
    cluster
        .spec
        .iam_authenticator
        .as_ref()
        .and_then(|a| a.cluster_id.as_deref())
        .unwrap_or(&cluster.metadata.name)
}

pub(crate) fn authenticator(p: &mut Problems, at: &FieldPath, cluster: &ElasticCluster) {
    let spec = &cluster.spec;
    let Some(auth) = &spec.iam_authenticator else {
        for (i, pool) in spec.pools.iter().enumerate() {
            if pool.join_method == JoinMethod::Iam {
                p.push((
                    at.key("pools").index(i).key("joinMethod"),
                    "joinMethod iam needs spec.iamAuthenticator: the API server's webhook that \
                     turns a node's IAM token into its Kubernetes identity"
                        .into(),
                ));
            }
        }
        return;
    };
    let at = at.key("iamAuthenticator");
    if let Some(id) = &auth.cluster_id
        && !CLUSTER_ID.is_match(id)
    {
        p.push((
            at.key("clusterID"),
            format!("{id:?} is not a cluster ID (letters, digits, '-', '_', at most 100)"),
        ));
    }
    let image = auth.image.as_str();
    let pinned = image.contains("@sha256:")
        || image
            .rsplit_once(':')
            .is_some_and(|(_, tag)| !tag.contains('/') && tag != "latest");
    if !pinned {
        p.push((
            at.key("image"),
            format!("{image:?} must be pinned by tag (not latest) or digest"),
        ));
    }
    let pem = base64::engine::general_purpose::STANDARD
        .decode(auth.serving_certificate.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok());
    let is_cert = pem
        .as_deref()
        .is_some_and(|t| t.contains("-----BEGIN CERTIFICATE-----") && !t.contains("PRIVATE KEY"));
    if !is_cert {
        p.push((
            at.key("servingCertificate"),
            "must be a base64-encoded PEM certificate (and nothing else: its key belongs in \
             the Secret kube-system/aws-iam-authenticator-serving)"
                .into(),
        ));
    }
    if auth.port < 1024
        || auth.port == AUTHENTICATOR_HEALTH_PORT
        || auth.port == spec.api_server.port
    {
        p.push((
            at.key("port"),
            format!(
                "{} is taken or privileged: use 1024-65535, not {AUTHENTICATOR_HEALTH_PORT} (the \
                 authenticator's health port) nor apiServer.port",
                auth.port
            ),
        ));
    }
}

/// The selector a pool's `ami` becomes, and whether it picks an EKS-optimized image, asked
/// the way lint's KK021 asks it (`kk_karpenter::ami`).
fn eks_optimized_field(ami: &Ami, pool: &Pool) -> Option<&'static str> {
    if ami
        .alias
        .as_deref()
        .is_some_and(kk_karpenter::ami::alias_is_eks_optimized)
    {
        return Some("alias");
    }
    let release = ami.ssm_release.as_deref()?;
    let arch = match pool.instances.arch.first().map(String::as_str) {
        Some("arm64") => "arm64",
        _ => "x86_64",
    };
    let parameter = kk_karpenter::ami::al2023_release_parameter(release, arch, "standard");
    kk_karpenter::ami::ssm_parameter_is_eks_optimized(&parameter).then_some("ssmRelease")
}

/// EKS-optimized images have no kubeadm (awslabs/amazon-eks-ami templates/al2023/provisioners/
/// install-worker.sh, commit 0030ac57: `BINARIES=(kubelet)`) and their kubelet reads nodeadm's
/// configuration: they join with `iam`. And `iam` means nodeadm, which only AL2023 images run.
pub(crate) fn join_method(p: &mut Problems, at: &FieldPath, ami: &Ami, pool: &Pool) {
    let eks = eks_optimized_field(ami, pool);
    match (pool.join_method, eks) {
        (JoinMethod::KubeadmToken, Some(field)) => p.push((
            at.key(field),
            format!(
                "ami.{field} selects an EKS-optimized AMI, which has no kubeadm (its kubelet \
                 reads nodeadm's configuration): joinMethod kubeadm-token cannot join it; set \
                 joinMethod: iam, or use ami.id with a kubeadm-ready image"
            ),
        )),
        (JoinMethod::Iam, Some("alias")) => {
            let alias = ami.alias.as_deref().unwrap_or_default();
            let family = kk_karpenter::ami::alias_family(alias);
            if family != kk_karpenter::ami::NODEADM_FAMILY {
                p.push((
                    at.key("alias"),
                    format!(
                        "joinMethod iam writes a nodeadm NodeConfig, which only {} images run \
                         ({family} images bootstrap otherwise)",
                        kk_karpenter::ami::NODEADM_FAMILY
                    ),
                ));
            } else if alias.ends_with("@latest") {
                p.push((
                    at.key("alias"),
                    "pin the image (al2023@v<date>): @latest changes the image under the pool, \
                     and every node drifts when AWS publishes one"
                        .into(),
                ));
            }
        }
        _ => {}
    }
}
