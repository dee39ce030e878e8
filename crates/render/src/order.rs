//! `ORDER.md`: the seed's eight workflow steps, each mapped to the files that carry it out,
//! and the apply order `Bundle::manifests` follows.

use std::fmt::Write as _;

use kk_spec::{ElasticCluster, JoinMode};

use crate::{Bundle, FileKind, Target, names};
use kk_spec::ca::ClusterCa;

/// Directories of Kubernetes manifests, in the order they must be applied, and the cluster
/// each goes to.
const APPLY_ORDER: [(&str, Target); 11] = [
    ("kubean/", Target::Management),
    ("namespaces/", Target::NewCluster),
    ("cloud/", Target::NewCluster),
    ("authenticator/", Target::NewCluster),
    ("rotator/", Target::NewCluster),
    ("gpu/", Target::NewCluster),
    ("efa/", Target::NewCluster),
    ("nodeclasses/", Target::NewCluster),
    // Before the pools: a pool Karpenter plans without its overlay launches a node per
    // time-sliced pod.
    ("nodeoverlays/", Target::NewCluster),
    ("nodepools/", Target::NewCluster),
    ("verify/", Target::NewCluster),
];

/// The cluster of a bundle path: its directory's, else the new cluster.
pub fn target(path: &str) -> Target {
    APPLY_ORDER
        .iter()
        .find(|(dir, _)| path.starts_with(dir))
        .map_or(Target::NewCluster, |(_, target)| *target)
}

/// The manifests in apply order: by directory in [`APPLY_ORDER`], then by path. Helm values
/// and documents are never among them (their [`FileKind`] says so).
pub fn manifest_paths(bundle: &Bundle) -> Vec<String> {
    let mut out = Vec::new();
    for (dir, _) in APPLY_ORDER {
        for path in bundle.files.keys() {
            if path.starts_with(dir) && bundle.kind(path) == Some(FileKind::Manifest) {
                out.push(path.clone());
            }
        }
    }
    out
}

/// Where Kubean stores the new cluster's admin kubeconfig once its `kubeconfig.yml` post-hook
/// ran (kubean-io/kubean playbooks/kubeconfig.yml, v0.37.0: ConfigMap `<cluster>-kubeconf`,
/// created `--from-file` of the kubeconfig, so its key is `config`, in the spray job's
/// namespace; the Cluster's `spec.kubeconfRef` then names it).
fn kubeconf_configmap(cluster: &ElasticCluster) -> String {
    format!("{}-kubeconf", cluster.metadata.name)
}

fn two_clusters(cluster: &ElasticCluster) -> String {
    format!(
        "Two clusters are involved: **the management cluster**, where Kubean runs (`kubean/` goes there: `kubean-karpenter apply --mgmt-context <ctx>` or `spec.kubean.managementCluster`), and **the new cluster** `{}` that Kubean builds (everything else: `--context`/`--kubeconfig` or `spec.access`).\n",
        cluster.metadata.name
    )
}

fn fetch_kubeconfig(cluster: &ElasticCluster) -> String {
    let name = &cluster.metadata.name;
    format!(
        "`kubean-karpenter kubeconfig <spec> -f {name}.kubeconfig --mgmt-context <management>` (it writes the file 0600 and prints the CA hash), or `umask 077; kubectl --context <management> -n {ns} get configmap {cm} -o jsonpath='{{.data.config}}' > {name}.kubeconfig` (Kubean's `kubeconfig.yml` post-hook writes the ConfigMap; it holds admin credentials, keep it private)",
        ns = cluster.spec.kubean.namespace,
        cm = kubeconf_configmap(cluster),
    )
}

pub fn render_stage1(cluster: &ElasticCluster, bundle: &mut Bundle) {
    let spec = &cluster.spec;
    let name = &cluster.metadata.name;
    let mut s = String::new();
    let w = &mut s;
    let _ = writeln!(w, "# {name}: stage 1 of 2 (no cluster CA yet)\n");
    let _ = writeln!(
        w,
        "`spec.caBundle` is not set: the cluster CA does not exist until Kubean has built the control plane, and everything but `kubean/` needs it (Karpenter's `clusterCABundle`, the CA hash nodes join with). This bundle holds only `kubean/`.\n"
    );
    let _ = writeln!(w, "{}", two_clusters(cluster));
    let _ = writeln!(
        w,
        "1. **On the management cluster**, create the SSH Secret `{}` (type kubernetes.io/ssh-auth) in `{}`, then apply `kubean/` (`kubean-karpenter apply <spec> --mgmt-context <ctx>`) and wait for the ClusterOperation `{name}-install` to succeed.",
        spec.kubean.ssh.private_key_secret, spec.kubean.namespace
    );
    let _ = writeln!(
        w,
        "2. **Take the new cluster's kubeconfig from Kubean**: {}.",
        fetch_kubeconfig(cluster)
    );
    let _ = writeln!(
        w,
        "3. **Stage 2**: set `caBundle: {{kubeconfig: {{path: {name}.kubeconfig}}}}` and `access: {{kubeconfig: {name}.kubeconfig}}` in the spec and render again: the full bundle and its ORDER.md follow."
    );
    bundle.add_text("ORDER.md", s);
}

pub fn render(cluster: &ElasticCluster, ca: &ClusterCa, bundle: &mut Bundle) {
    let spec = &cluster.spec;
    let name = &cluster.metadata.name;
    let files = |dir: &str| -> String {
        bundle
            .files
            .keys()
            .filter(|p| p.starts_with(dir) && bundle.kind(p) == Some(FileKind::Manifest))
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // The Helm releases apply installs, as render registered them.
    let release = |name: &str| {
        bundle
            .helm_releases()
            .iter()
            .find(|r| r.name == name)
            .cloned()
            .expect("render registers both Helm releases before ORDER.md")
    };
    let (ebs, karpenter) = (release("aws-ebs-csi-driver"), release("karpenter"));
    let mut s = String::new();
    let w = &mut s;
    let _ = writeln!(
        w,
        "# {name}: Kubean cluster with Karpenter elastic workers\n"
    );
    let _ = writeln!(
        w,
        "Rendered by kubean-karpenter from the ElasticCluster spec. Apply in this order.\n"
    );
    let _ = writeln!(w, "{}", two_clusters(cluster));
    match &spec.kubean.existing_cluster {
        Some(adopted) => {
            let _ = writeln!(
                w,
                "1. **Kubean built this cluster already** (adopted: Kubean's Cluster `{adopted}`, whose inventory and variables stay Kubean's). Nothing goes to the management cluster; day-two operations (`kubean-karpenter kubean upgrade|scale|remove-node`) name `{adopted}`."
            );
        }
        None => {
            let _ = writeln!(
                w,
                "1. **Kubean builds the control plane, etcd and infra workers** (management cluster). Create the SSH Secret `{}` (type kubernetes.io/ssh-auth) in `{}`, then apply {}. When the ClusterOperation `{name}-install` has succeeded, take the new cluster's kubeconfig: {}.",
                spec.kubean.ssh.private_key_secret,
                spec.kubean.namespace,
                files("kubean/"),
                fetch_kubeconfig(cluster)
            );
        }
    }
    let _ = writeln!(
        w,
        "2. **Namespaces, CNI, AWS cloud controller manager, EBS CSI driver** (new cluster, from here on). Apply {} first (Karpenter's, before Helm installs Karpenter into it{}). The CNI ({}) comes with Kubespray. Apply `cloud/aws-cloud-controller-manager.yaml` and `cloud/node-registration-policy.yaml` (a node named like an instance must register tainted `karpenter.sh/unregistered` with its own instance's providerID, and may not drop the taint: only Karpenter does, for a NodeClaim's instance) and `cloud/node-identity-policy.yaml` (a node may not change its pool, accelerator, capacity-type or zone labels, nor advertise GPUs outside a GPU pool); install the aws-ebs-csi-driver chart {} with `{}` (`{}`).",
        files("namespaces/"),
        match (spec.join.mode.runs_controller(), spec.runs_health_agent()) {
            (true, true) => {
                ", and the rotator's, the CSR approver's and the node health agent's own, where nothing else runs"
            }
            (true, false) =>
                ", and the rotator's and the CSR approver's own, where nothing else runs",
            (false, true) => ", and the node health agent's own, where nothing else runs",
            (false, false) => "",
        },
        spec.kubean.network_plugin,
        ebs.version,
        ebs.values_file,
        ebs.command_line(),
    );
    if crate::authenticator::enabled(cluster).is_some() {
        let _ = writeln!(
            w,
            "   **Token webhook for `joinMethod: iam` pools.** Create the TLS Secret `{ns}/{secret}` with the key of `spec.iamAuthenticator.servingCertificate` (`kubectl -n {ns} create secret tls {secret} --cert=<cert> --key=<key>`; the key stays off the bundle), then apply {}. Kubespray already runs the API server with `--authentication-token-webhook-config-file` (the `kube_webhook_token_auth*` vars in `kubean/2-vars-conf.yaml`; the same file is `authenticator/webhook-kubeconfig.conf`); until the DaemonSet runs, only `iam` nodes cannot join.",
            files("authenticator/"),
            ns = crate::authenticator::NAMESPACE,
            secret = crate::authenticator::SERVING_SECRET,
        );
    }
    let _ = writeln!(
        w,
        "3. **IAM and discovery tags.** Create the node role from `iam/node-role.json` and `iam/node-role-trust-policy.json`, the instance profile `{}`; grant `iam/controller-policy.json`; set the tags in `iam/discovery.json`, among them `kubernetes.io/cluster/{name}=owned` on every Kubean-built instance (Karpenter tags its own). The cloud controller manager's cluster ID (`KubernetesClusterID = {name}` in `cloud/aws-cloud-controller-manager.yaml`) is Karpenter's `clusterName`.",
        spec.aws.node_instance_profile
    );
    match kk_spec::interruption::queue_name(cluster) {
        Some(queue) => {
            let _ = writeln!(
                w,
                "   **Interruption queue.** Create the SQS queue `{queue}` from `interruption/queue.json` (retention {}s, SQS-managed encryption) with the access policy `interruption/queue-policy.json`, and the {} EventBridge rules in `interruption/rules.json`, each targeting the queue (`kubean-karpenter apply <spec>` does all of it). Karpenter's `settings.interruptionQueue` names it: on a spot two-minute warning it drains the node onto a replacement instead of losing its pods.",
                kk_spec::interruption::RETENTION_SECONDS,
                kk_spec::interruption::EVENT_KINDS.len(),
            );
        }
        None if kk_spec::interruption::reclaimable(spec) => {
            let _ = writeln!(
                w,
                "   **No interruption queue** (`interruptionQueue: \"\"`), though a pool allows spot: a reclaimed node's pods die with it."
            );
        }
        None => {}
    }
    let step4 = match spec.join.mode {
        // The token is already in every EC2NodeClass's userData, so naming it here reveals nothing
        // more; `kubeadm token create` without it would mint a different, random token.
        JoinMode::Static => format!(
            "Static mode: the token is embedded in each EC2NodeClass userData (rotating it replaces every node). Create exactly that token on a control-plane node before the first node joins: `kubeadm token create {} --ttl 0 --description \"kubean-karpenter static join token for {name}\"` (`--ttl 0`: nodes join with it for the pool's whole life; use the ssm or secrets-manager mode to rotate it). Nodes pin the CA hash `{}`.",
            spec.join.token.as_deref().unwrap_or_default(),
            spec.join.ca_cert_hash.as_deref().unwrap_or(&ca.cert_hash),
        ),
        JoinMode::Ssm => format!(
            "The join configuration (lines KK_TOKEN=, KK_CA_CERT_HASH=, KK_EXPIRATION=) lives in the SSM SecureString `{}`; the CA hash is `{}` (baked into the userData too: nodes never take it from the store). Grant `iam/rotator-policy.json` to the rotator's AWS identity and apply {}: the rotator publishes a token and keeps it valid (`kubean-karpenter token create --publish` does it once by hand), and the CSR approver, under its own service account, approves the node certificates of instances a NodeClaim names.",
            names::join_store(spec, name),
            ca.cert_hash,
            files("rotator/")
        ),
        JoinMode::SecretsManager => format!(
            "The join configuration (lines KK_TOKEN=, KK_CA_CERT_HASH=, KK_EXPIRATION=) lives in the Secrets Manager secret `{}`; the CA hash is `{}` (baked into the userData too: nodes never take it from the store). Grant `iam/rotator-policy.json` to the rotator's AWS identity and apply {}: the rotator publishes a token and keeps it valid (`kubean-karpenter token create --publish` does it once by hand), and the CSR approver, under its own service account, approves the node certificates of instances a NodeClaim names.",
            names::join_store(spec, name),
            ca.cert_hash,
            files("rotator/")
        ),
    };
    let _ = writeln!(w, "4. **Bootstrap token.** {step4}");
    if spec.runs_health_agent() {
        let _ = writeln!(
            w,
            "   **Node health agent.** `rotator/health-agent.yaml` runs it on the nodes of every pool with `health` on (GPU pools by default): it reads each node's kernel log and writes the conditions Karpenter's node repair acts on (`nodeRepair` is on in `{}`); an admission policy keeps it to its own Node's own conditions (docs/guide/gpus-and-training.md).",
            crate::helm::KARPENTER_VALUES,
        );
    }
    if spec.runs_budget_controller() {
        let _ = writeln!(
            w,
            "   **Spend budgets.** `rotator/budget.yaml` runs the budget controller: it writes each budgeted NodePool's limit on its budget resource (the NodePools here leave it out), and until it has, an admission policy holds that pool's launches (docs/guide/budgets.md).",
        );
    }
    let _ = writeln!(
        w,
        "5. **Karpenter** {}: `{}`.",
        karpenter.version,
        karpenter.command_line()
    );
    if spec.scheduler.is_some() {
        let _ = writeln!(
            w,
            "   **Default topology spread.** Karpenter mirrors kube-scheduler's default constraints (`SCHEDULER_CONFIG` in `{}`, the same list as `kube_scheduler_profiles` in `kubean/`); it deduces each pod's selector from the Services that select it, which its chart cannot list: apply `{}` (list and watch on Services for Karpenter's service account).",
            crate::helm::KARPENTER_VALUES,
            crate::karpenter::SERVICES_READER_FILE,
        );
    }
    // The bare device plugin is a manifest in gpu/; the operator is a Helm release (plus its
    // time-slicing configs in gpu/, when a pool shares).
    let operator = bundle
        .helm_releases()
        .iter()
        .find(|r| r.name == "gpu-operator");
    let operator_values = operator.map(|r| r.values_file.clone());
    let gpu_first = match operator {
        Some(operator) => {
            let configs = files("gpu/");
            format!(
                "install the NVIDIA GPU Operator chart {} with `{}` (`{}`: driver and container toolkit off, the AMI has them; device plugin, GPU feature discovery and DCGM exporter on; in the `{}` namespace from `namespaces/`){}",
                operator.version,
                operator.values_file,
                operator.command_line(),
                operator.namespace,
                if configs.is_empty() {
                    String::new()
                } else {
                    format!(
                        " and apply {configs} (the time-slicing configs its device plugin picks by the pool label `{}`)",
                        kk_karpenter::labels::NVIDIA_DEVICE_PLUGIN_CONFIG
                    )
                },
            )
        }
        None => format!("apply {}", files("gpu/")),
    };
    let _ = writeln!(
        w,
        "6. **CPU EC2NodeClass and NodePool** and 7. **GPU EC2NodeClass and NodePool, NVIDIA device plugin**: {gpu_first} first (a GPU node without the plugin never initializes{}), then {}, then {}{}.",
        if bundle.files.keys().any(|p| p.starts_with("efa/")) {
            format!(
                ", nor an EFA node without {}, whose security groups must also admit all traffic from themselves: `iam/discovery.json`",
                files("efa/")
            )
        } else {
            String::new()
        },
        files("nodeclasses/"),
        {
            let overlays = files("nodeoverlays/");
            if overlays.is_empty() {
                String::new()
            } else {
                format!(
                    "{overlays} (the time-sliced GPUs each node advertises, so Karpenter packs the sharing pods; before the pools, or their first nodes are planned one GPU per pod), then "
                )
            }
        },
        files("nodepools/")
    );
    let queues = files("kueue/");
    if !queues.is_empty() {
        let _ = writeln!(
            w,
            "   **Job queues** (Kueue): `apply` leaves {queues} out, since a cluster without Kueue has no such kinds. Install Kueue {} first, then apply them; submit training Jobs with the label `kueue.x-k8s.io/queue-name: <pool>` in a namespace the pool's queue lists. See docs/guide/gpus-and-training.md.",
            crate::kueue::KUEUE_VERSION
        );
    }
    let monitors = files("monitoring/");
    if !monitors.is_empty() {
        let _ = writeln!(
            w,
            "   **Monitoring** (Prometheus Operator): `apply` leaves {monitors} out, since a cluster without the operator has no PrometheusRule or PodMonitor kinds (and the dashboard ConfigMap needs Grafana's sidecar); apply them once it runs (`kubectl apply -f monitoring/`). Karpenter's values already turn on its chart's ServiceMonitor. Each alert's `runbook` names the `kubean-karpenter doctor` check that explains it. See docs/guide/monitoring.md.",
        );
    }
    let _ = writeln!(
        w,
        "8. **Verify** CPU and GPU scale-up: apply {}; scale an inflate Deployment (`kubectl scale deployment inflate-<pool> --replicas=5`). Then run the seed's checklist, `bash verify/checklist.sh` (`KUBECTL=\"kubectl --context <new cluster>\"`), which runs:",
        files("verify/")
    );
    for (what, args) in crate::verify::checklist(cluster) {
        let _ = writeln!(w, "   - `kubectl {args}`: {what}");
    }
    let _ = writeln!(
        w,
        "   Where the seed's common failure points are handled: the API server security group (`iam/discovery.json`, TCP {}), an expired token (step 4; the userData says so on the console), a wrong CA hash (computed from the CA bundle; `render` refuses a pinned one that differs), `iam:PassRole` (`iam/controller-policy.json`), the NVIDIA container runtime (the GPU userData restarts containerd and checks it before joining), the device plugin's tolerations ({}).",
        spec.api_server.port,
        match operator_values {
            Some(values) => format!(
                "the GPU Operator's `daemonsets.tolerations` in `{values}`, exactly the GPU pools' taints"
            ),
            None => "`gpu/`, exactly the GPU pools' taints".to_owned(),
        }
    );
    let _ = writeln!(
        w,
        "\n## Day two\n\n\
         Kubernetes upgrade, in this order (`kubean-karpenter upgrade plan SPEC --to 1.<minor>.<patch>` checks it and lists the steps):\n\n\
         1. **Kubean first** (management cluster): set `kubernetesVersion`, render, re-apply `kubean/2-vars-conf.yaml` (its `kube_version`), then apply the ClusterOperation `kubean-karpenter kubean upgrade SPEC --from <running version>` prints (`upgrade-cluster.yml`). The control plane moves before any kubelet: a kubelet is never newer than the API server. Pools pinned by `alias` drift now (the alias resolves against the control plane's version); `ssmRelease` and `id` pins do not.\n\
         2. **Then the minor-matched components** (new cluster): `cloud/` (the cloud controller manager follows the control plane's minor), and Karpenter if its version does not support the new minor.\n\
         3. **Then the worker AMIs, pool by pool**: `kubean-karpenter ami resolve --spec SPEC`, `ami pin SPEC --pool <pool> --release v<date>` (or `--id`), render, apply `nodeclasses/`: Karpenter replaces the pool's nodes as drift, as many at once as its `Drifted` budget allows.\n\n\
         Kubean nodes: add one to the spec, re-apply `kubean/1-hosts-conf.yaml`, then `kubean-karpenter kubean scale SPEC --node <name>` (`scale.yml`); remove one with `kubean remove-node SPEC --node <name>` while it is still in the spec (Kubespray reads it from the inventory), then drop it from the spec and re-apply. Certificates: `kubean renew-certs SPEC` (`renew-certs.yml`) any time before they expire; it keeps the CA, so no Karpenter node drifts. These do not depend on the Karpenter side."
    );
    bundle.add_text("ORDER.md", s);
}
