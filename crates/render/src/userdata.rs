//! The bash userData that makes a Karpenter-launched instance join with `kubeadm join`.
//!
//! With `amiFamily: Custom` Karpenter passes userData through untouched, so everything
//! the EKS bootstrap would do is ours: IMDSv2 (Karpenter's default `httpTokens:
//! required` makes tokenless IMDS calls fail), the exact provider ID Karpenter matches
//! NodeClaims by, the unregistered taint, kubelet flags that equal `spec.kubelet`, and
//! the join itself. The script never runs `set -x`: it handles a bootstrap token.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use kk_spec::{ClusterSpec, JoinMode, LocalStorage, Pool, PoolType};

use crate::names;
use kk_spec::ca::ClusterCa;

/// Everything the script needs, computed from the spec and shared with the EC2NodeClass.
pub struct NodeBoot<'a> {
    pub node_class: &'a str,
    pub pools: Vec<&'a str>,
    pub spec: &'a ClusterSpec,
    pub cluster_name: &'a str,
    pub ca: &'a ClusterCa,
    pub pool: &'a Pool,
    /// Node labels (`--node-labels`), the NodePool template labels.
    pub labels: &'a BTreeMap<String, String>,
    /// The kubelet flags that mirror `spec.kubelet` of the EC2NodeClass.
    pub kubelet_flags: Vec<String>,
}

/// Taints as kubelet's `--register-with-taints` spells them.
pub fn taint_flag(pool: &Pool) -> String {
    let mut taints = vec!["karpenter.sh/unregistered:NoExecute".to_owned()];
    for t in &pool.taints {
        match &t.value {
            Some(v) => taints.push(format!("{}={}:{}", t.key, v, t.effect)),
            None => taints.push(format!("{}:{}", t.key, t.effect)),
        }
    }
    taints.join(",")
}

/// The kubeadm config API the cluster's kubeadm reads: v1beta4 from Kubernetes 1.31 (where
/// it arrived), v1beta3 before (kubernetes/kubernetes cmd/kubeadm/app/apis/kubeadm).
fn kubeadm_config_api(kubernetes_version: &str) -> &'static str {
    let minor = kubernetes_version
        .trim_start_matches('v')
        .split('.')
        .nth(1)
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or(u32::MAX);
    if minor < 31 {
        "kubeadm.k8s.io/v1beta3"
    } else {
        "kubeadm.k8s.io/v1beta4"
    }
}

/// Air-gapped nodes: containerd's per-registry `hosts.toml` sends every pull from the public
/// registries to the mirror (same path, `pull` and `resolve` only). containerd reads these
/// files at each pull, so no restart is needed; it must have `config_path` including
/// /etc/containerd/certs.d (containerd 2's default; EKS-built AMIs set it).
fn mirror_block(mirror: &str) -> String {
    let mut s = String::from(
        "\n# Air-gapped: pull the public registries' images from the mirror (containerd hosts.toml).\n",
    );
    let _ = writeln!(s, "REGISTRY_MIRROR={}", sq(mirror));
    s.push_str(
        "write_mirror() {\n  mkdir -p \"/etc/containerd/certs.d/$1\"\n  printf 'server = \"%s\"\\n\\n[host.\"https://%s\"]\\n  capabilities = [\"pull\", \"resolve\"]\\n' \\\n    \"$2\" \"$REGISTRY_MIRROR\" > \"/etc/containerd/certs.d/$1/hosts.toml\"\n}\n",
    );
    for (registry, server) in kk_spec::images::MIRRORED_REGISTRIES {
        let _ = writeln!(s, "write_mirror {registry} {server}");
    }
    s
}

/// Single-quotes a value for bash (values are validated, this is belt and braces).
fn sq(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

pub fn render(boot: &NodeBoot<'_>) -> String {
    let spec = boot.spec;
    let endpoint = format!("{}:{}", spec.api_server.dns_name, spec.api_server.port);
    let mut s = String::new();
    let w = &mut s;
    let _ = writeln!(w, "#!/bin/bash");
    let _ = writeln!(
        w,
        "# kubean-karpenter userData for EC2NodeClass {} (NodePools: {}), cluster {}.",
        boot.node_class,
        boot.pools.join(", "),
        boot.cluster_name
    );
    let _ = writeln!(
        w,
        "# Joins the Kubean-built control plane with kubeadm. Rendered: edit the ElasticCluster spec, not this."
    );
    let _ = writeln!(
        w,
        "# No 'set -x': this script handles a bootstrap token and must not echo it to the console log."
    );
    w.push_str("set -euo pipefail\n\n");
    let _ = writeln!(w, "API_SERVER_ENDPOINT={}", sq(&endpoint));
    // The CA the node pins is known now, from the spec's CA bundle: it is baked in here in
    // every mode (static mode next to its token) and never read from the join store, whose writers must not be able to point
    // nodes at another cluster's CA (the store carries only the token that rotates).
    let ca_hash = spec
        .join
        .ca_cert_hash
        .as_deref()
        .unwrap_or(&boot.ca.cert_hash);
    match spec.join.mode {
        JoinMode::Static => {}
        JoinMode::Ssm | JoinMode::SecretsManager => {
            let _ = writeln!(w, "CA_CERT_HASH={}", sq(ca_hash));
            let _ = writeln!(w, "AWS_REGION={}", sq(&spec.aws.region));
            let _ = writeln!(
                w,
                "JOIN_STORE={}",
                sq(&names::join_store(spec, boot.cluster_name))
            );
        }
    }
    w.push_str(COMMON_FUNCTIONS);
    w.push_str(IMDS_BLOCK);
    if boot.pool.pool_type == PoolType::Gpu
        && let Some(gpu) = &spec.gpu
    {
        let _ = writeln!(
            w,
            "\n# GPU image checks: a node without a working driver and container runtime would"
        );
        let _ = writeln!(
            w,
            "# never advertise nvidia.com/gpu and stay uninitialized (and billed) forever."
        );
        let _ = writeln!(w, "EXPECTED_DRIVER={}", sq(&gpu.driver_version));
        w.push_str(GPU_CHECKS);
    }
    if let Some(registry) = &spec.registry {
        w.push_str(&mirror_block(&registry.mirror));
    }
    w.push('\n');
    match spec.join.mode {
        JoinMode::Static => {
            let token = spec.join.token.as_deref().unwrap_or_default();
            let _ = writeln!(
                w,
                "# Static join mode: the token is part of this userData, so rotating it drifts every node."
            );
            let _ = writeln!(w, "TOKEN={}", sq(token));
            let _ = writeln!(w, "CA_CERT_HASH={}", sq(ca_hash));
        }
        JoinMode::Ssm => {
            w.push_str(AWS_CLI_CHECK);
            w.push_str("# The join configuration lives in SSM, so token rotation never changes this userData.\n");
            w.push_str("fetch_join_config() {\n  aws ssm get-parameter --region \"$AWS_REGION\" --name \"$JOIN_STORE\" --with-decryption \\\n    --query Parameter.Value --output text\n}\n");
            w.push_str(&store_block("SSM parameter", "ssm:GetParameter"));
        }
        JoinMode::SecretsManager => {
            w.push_str(AWS_CLI_CHECK);
            w.push_str("# The join configuration lives in Secrets Manager, so token rotation never changes this userData.\n");
            w.push_str("fetch_join_config() {\n  aws secretsmanager get-secret-value --region \"$AWS_REGION\" --secret-id \"$JOIN_STORE\" \\\n    --query SecretString --output text\n}\n");
            w.push_str(&store_block(
                "Secrets Manager secret",
                "secretsmanager:GetSecretValue",
            ));
        }
    }
    let labels = boot
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut flags = vec![
        "--cloud-provider=external".to_owned(),
        "--provider-id=${PROVIDER_ID}".to_owned(),
        format!("--register-with-taints={}", taint_flag(boot.pool)),
    ];
    if !labels.is_empty() {
        flags.push(format!("--node-labels={labels}"));
    }
    flags.extend(boot.kubelet_flags.iter().cloned());
    w.push_str("\n# Kubelet flags. kubeadm's drop-in reads /etc/sysconfig/kubelet (or /etc/default/kubelet) with\n");
    w.push_str("# EnvironmentFile=, which beats Environment=; a later EnvironmentFile= beats both, so ours wins.\n");
    w.push_str("mkdir -p /etc/kubean-karpenter /etc/systemd/system/kubelet.service.d\n");
    // A quoted heredoc: nothing in a label or taint is expanded by bash; only the literal
    // ${PROVIDER_ID}, known at boot, is replaced, by bash itself.
    w.push_str("KUBELET_FLAGS=$(cat <<'EOF'\n");
    let _ = writeln!(w, "{}", flags.join(" "));
    w.push_str("EOF\n)\n");
    w.push_str("# shellcheck disable=SC2016 # the literal text to replace\nPROVIDER_ID_REF='${PROVIDER_ID}'\n");
    w.push_str("printf 'KUBELET_EXTRA_ARGS=%s\\n' \"${KUBELET_FLAGS//\"$PROVIDER_ID_REF\"/$PROVIDER_ID}\" >/etc/kubean-karpenter/kubelet-flags.env\n");
    w.push_str("cat >/etc/systemd/system/kubelet.service.d/20-kubean-karpenter.conf <<'EOF'\n[Service]\nEnvironmentFile=/etc/kubean-karpenter/kubelet-flags.env\nEOF\n");
    if boot.pool.local_storage == Some(LocalStorage::Raid0) {
        w.push_str(LOCAL_RAID0);
    }
    w.push_str(JOIN_PREFLIGHT);
    if boot.pool.pool_type == PoolType::Gpu && spec.gpu.is_some() {
        w.push_str(GPU_RUNTIME_RESTART);
    }
    w.push_str(&JOIN_BLOCK.replace(
        "@KUBEADM_API@",
        kubeadm_config_api(&spec.kubernetes_version),
    ));
    s
}

const COMMON_FUNCTIONS: &str = r#"
log() { echo "kubean-karpenter: $*" >&2; }
fail() {
  echo "kubean-karpenter: FATAL: $*" >&2
  { echo "kubean-karpenter: FATAL: $*" >/dev/console; } 2>/dev/null || true
  exit 1
}
# retry ATTEMPTS COMMAND...: runs COMMAND until it succeeds, backing off 1s, 2s, 4s ... 30s.
retry() {
  local attempts=$1 n=1 delay=1
  shift
  until "$@"; do
    if [ "$n" -ge "$attempts" ]; then
      return 1
    fi
    sleep "$delay"
    n=$((n + 1))
    delay=$((delay * 2))
    if [ "$delay" -gt 30 ]; then delay=30; fi
  done
}
"#;

const IMDS_BLOCK: &str = r#"
# IMDSv2: Karpenter launches with httpTokens=required, where tokenless requests get 401.
IMDS=http://169.254.169.254
imds_token() {
  curl -sS --fail --max-time 5 -X PUT "$IMDS/latest/api/token" \
    -H "X-aws-ec2-metadata-token-ttl-seconds: 21600"
}
IMDS_TOKEN="$(retry 10 imds_token)" || fail "no IMDSv2 token from $IMDS"
imds() {
  curl -sS --fail --max-time 5 -H "X-aws-ec2-metadata-token: $IMDS_TOKEN" "$IMDS/latest/meta-data/$1"
}
INSTANCE_ID="$(retry 5 imds instance-id)" || fail "cannot read instance-id from IMDS"
AWS_AZ="$(retry 5 imds placement/availability-zone)" || fail "cannot read the availability zone from IMDS"
[[ "$INSTANCE_ID" =~ ^i-[0-9a-f]{8,17}$ ]] || fail "unexpected instance ID '$INSTANCE_ID'"
# Regions, Local Zones (us-east-1-bos-1a) and Wavelength Zones all fit this.
[[ "$AWS_AZ" =~ ^[a-z]{2}(-[a-z0-9]+)+$ ]] || fail "unexpected availability zone '$AWS_AZ'"
# Karpenter matches the Node to its NodeClaim by this exact string.
PROVIDER_ID="aws:///${AWS_AZ}/${INSTANCE_ID}"
log "instance $INSTANCE_ID in $AWS_AZ, provider ID $PROVIDER_ID"
"#;

const GPU_CHECKS: &str = r#"command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: the GPU AMI has no NVIDIA driver"
DRIVER="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)" ||
  fail "nvidia-smi cannot talk to the driver"
[ "$DRIVER" = "$EXPECTED_DRIVER" ] ||
  fail "NVIDIA driver $DRIVER, but the spec pins $EXPECTED_DRIVER: rebuild the AMI or update spec.gpu.driverVersion"
command -v nvidia-container-runtime >/dev/null ||
  fail "nvidia-container-runtime not found: the GPU AMI lacks the NVIDIA container runtime"
# The device plugin runs without a RuntimeClass, so nvidia must be containerd's default runtime.
if command -v nvidia-ctk >/dev/null; then
  nvidia-ctk runtime configure --runtime=containerd --set-as-default >/dev/null ||
    fail "nvidia-ctk could not make nvidia containerd's default runtime"
fi
log "NVIDIA driver $DRIVER and container runtime present"
"#;

fn store_block(what: &str, action: &str) -> String {
    format!(
        r#"JOIN_CONFIG="$(retry 8 fetch_join_config)" ||
  fail "cannot read the join configuration from {what} $JOIN_STORE (the node role needs {action} on it)"
TOKEN=""
EXPIRATION=""
# KK_CA_CERT_HASH is ignored: the CA hash above was baked in at render time.
while IFS='=' read -r key value; do
  case "$key" in
    KK_TOKEN) TOKEN="$value" ;;
    KK_EXPIRATION) EXPIRATION="$value" ;;
  esac
done <<<"$JOIN_CONFIG"
[ -n "$EXPIRATION" ] || fail "the join configuration in $JOIN_STORE has no KK_EXPIRATION"
EXPIRES_AT="$(date -d "$EXPIRATION" +%s)" || fail "unreadable KK_EXPIRATION '$EXPIRATION' in $JOIN_STORE"
[ "$EXPIRES_AT" -gt "$(date +%s)" ] ||
  fail "the bootstrap token in $JOIN_STORE expired at $EXPIRATION: is the token rotation controller running?"
"#
    )
}

/// Without this, a missing CLI would look like an IAM problem after a minute of retries.
const AWS_CLI_CHECK: &str = "command -v aws >/dev/null || fail \"aws CLI not found: the AMI needs it to read the join configuration\"\n";

/// `localStorage: raid0`. The EC2NodeClass says `instanceStorePolicy: RAID0`, so Karpenter
/// counts the instance store as the node's ephemeral-storage, but with `amiFamily: Custom` its
/// userData does nothing with it (the RAID0 is part of the AL2023/Bottlerocket bootstraps it
/// does not render here): without this block pods would be scheduled against disk space that
/// lives on the root volume. Every
/// instance-store NVMe disk (EC2 names their model "Amazon EC2 NVMe Instance Storage"; EBS
/// volumes are "Amazon Elastic Block Store") goes into one RAID0 array, formatted and mounted
/// before containerd and the kubelet start; their roots are bind mounts into it, kept in
/// /etc/fstab with the array in /etc/mdadm.conf so a reboot brings them back. No disk: the
/// roots stay on the root volume and the node still joins.
const LOCAL_RAID0: &str = r#"
# Local NVMe (localStorage: raid0): the kubelet's and containerd's roots on a RAID0 of every
# instance-store disk. With amiFamily Custom, Karpenter's instanceStorePolicy RAID0 builds
# nothing, but it does advertise the instance store as ephemeral-storage.
LOCAL_ARRAY=/dev/md/kubean-local
LOCAL_MOUNT=/mnt/kubean-local
mapfile -t LOCAL_DISKS < <(lsblk -dpno NAME,MODEL | awk '/Amazon EC2 NVMe Instance Storage/ { print $1 }')
if [ "${#LOCAL_DISKS[@]}" -eq 0 ]; then
  log "no instance-store NVMe disk: the kubelet and containerd stay on the root volume"
else
  command -v mdadm >/dev/null || fail "mdadm not found: the AMI needs it for localStorage: raid0"
  log "RAID0 of ${#LOCAL_DISKS[@]} instance-store disk(s): ${LOCAL_DISKS[*]}"
  mdadm --create "$LOCAL_ARRAY" --level=0 --raid-devices="${#LOCAL_DISKS[@]}" --force --run "${LOCAL_DISKS[@]}" ||
    fail "mdadm could not build the RAID0 of ${LOCAL_DISKS[*]}"
  mdadm --detail --scan >>/etc/mdadm.conf || fail "cannot record the array in /etc/mdadm.conf"
  if command -v mkfs.xfs >/dev/null; then
    LOCAL_FS=xfs
    mkfs.xfs -f "$LOCAL_ARRAY" >/dev/null || fail "cannot format $LOCAL_ARRAY"
  else
    LOCAL_FS=ext4
    mkfs.ext4 -F -q "$LOCAL_ARRAY" || fail "cannot format $LOCAL_ARRAY"
  fi
  # The AMI started containerd before this script: it must not keep files open on the old root.
  systemctl stop containerd || fail "cannot stop containerd to move its root"
  mkdir -p "$LOCAL_MOUNT"
  mount -t "$LOCAL_FS" -o defaults,noatime "$LOCAL_ARRAY" "$LOCAL_MOUNT" || fail "cannot mount $LOCAL_ARRAY"
  echo "$LOCAL_ARRAY $LOCAL_MOUNT $LOCAL_FS defaults,noatime,nofail 0 2" >>/etc/fstab
  for root in /var/lib/kubelet /var/lib/containerd; do
    mkdir -p "$root" "$LOCAL_MOUNT${root}"
    # Keep what the image put there (containerd's pre-pulled images).
    cp -a "$root/." "$LOCAL_MOUNT${root}/"
    mount --bind "$LOCAL_MOUNT${root}" "$root" || fail "cannot bind $LOCAL_MOUNT${root} onto $root"
    echo "$LOCAL_MOUNT${root} $root none bind,nofail 0 0" >>/etc/fstab
  done
  log "kubelet and containerd roots on $LOCAL_ARRAY ($LOCAL_FS)"
fi
"#;

const JOIN_PREFLIGHT: &str = r#"
[[ "$TOKEN" =~ ^[a-z0-9]{6}\.[a-z0-9]{16}$ ]] || fail "malformed bootstrap token (expected [a-z0-9]{6}.[a-z0-9]{16})"
[[ "$CA_CERT_HASH" =~ ^sha256:[0-9a-f]{64}$ ]] || fail "malformed CA certificate hash (expected sha256:<64 hex>)"

systemctl daemon-reload
systemctl enable --now containerd
"#;

/// `nvidia-ctk runtime configure` only rewrites containerd's config file, and `enable --now`
/// leaves a containerd that is already running (the AMI starts it before cloud-init runs the
/// userData) on its old config: without a restart the device plugin finds no NVIDIA runtime,
/// the node never advertises nvidia.com/gpu and stays uninitialized, billed. The check asks the
/// running containerd through the CRI (crictl comes with kubeadm: cri-tools is its package
/// dependency and its preflight uses it).
const GPU_RUNTIME_RESTART: &str = r#"# nvidia-ctk changed containerd's config; a running containerd only reads it when restarted.
systemctl restart containerd || fail "cannot restart containerd after configuring the NVIDIA runtime"
nvidia_runtime_active() {
  local info
  info="$(crictl --runtime-endpoint unix:///run/containerd/containerd.sock info)" || return 1
  grep -Eq '"defaultRuntimeName": *"nvidia"' <<<"$info"
}
retry 6 nvidia_runtime_active ||
  fail "containerd does not run nvidia as its default runtime: the NVIDIA device plugin would find no GPU"
log "containerd runs the NVIDIA runtime"
"#;

const JOIN_BLOCK: &str = r#"# kubeadm starts the kubelet but does not enable it: a reboot would leave the node NotReady.
systemctl enable kubelet
# The token goes to kubeadm in a 0600 file under /run (a tmpfs), never on a command line
# (every local user can read /proc/*/cmdline), and the file is removed after the join.
JOIN_CONFIG=/run/kubean-karpenter/kubeadm-join.yaml
install -d -m 0700 /run/kubean-karpenter
trap 'rm -f "$JOIN_CONFIG"' EXIT
(
  umask 077
  cat >"$JOIN_CONFIG" <<EOF
apiVersion: @KUBEADM_API@
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "$API_SERVER_ENDPOINT"
    token: "$TOKEN"
    caCertHashes:
    - "$CA_CERT_HASH"
nodeRegistration:
  name: "$INSTANCE_ID"
EOF
)
log "joining $API_SERVER_ENDPOINT as $INSTANCE_ID"
kubeadm join --config "$JOIN_CONFIG"
rm -f "$JOIN_CONFIG"
log "joined"
"#;
