//! KK014: a GPU node class whose root volume is missing or too small for inference images, and
//! EBS volumes that are not encrypted.

use kk_model::FieldPath;
use kk_model::karpenter::{BlockDeviceMapping, EC2NodeClass};
use kk_model::quantity::Quantity;

use crate::context::{Context, NodeClassView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
For every EC2NodeClass that a GPU NodePool uses (a pool whose `nodeClassRef` names it and that
asks for GPU instance types, limits `nvidia.com/gpu` or labels its nodes `node.accelerator`),
finds the volume Karpenter treats as the node's root (ephemeral storage) volume, the way
Karpenter does: the `blockDeviceMappings` entry with `rootVolume: true`; with
`amiFamily: Custom`, the last entry; otherwise the entry for the AMI family's root device
(`/dev/xvda` for AL2/AL2023, `/dev/xvdb` for Bottlerocket, `/dev/sda1` for Windows). Reports
a GPU node class where there is no such entry, where it sets no `ebs.volumeSize`, or where the
size is below `100Gi`.

For every EC2NodeClass, reports each `blockDeviceMappings[].ebs` whose `encrypted` is not
`true`.

## Why
Without a mapping the node gets the AMI's root volume: 20 GiB on the EKS-optimized AMIs (a
Custom AMI gets no default block devices from Karpenter at all). An inference image is large
(the vLLM image is about 9 GB compressed and 18 GB on disk), so a 20 GiB root fills up during
the first image pull: the kubelet's image garbage collection and disk-pressure eviction start,
pods are evicted or never start, and the expensive GPU node does nothing. Image pull time on a
fresh node is bounded by the volume's size-linked throughput, so a bigger gp3 root is also the
first cold-start lever.

An EBS volume with `encrypted` unset or `false` is created unencrypted unless the account has
EBS encryption by default turned on; node volumes hold container images, pod data and often
credentials. Karpenter's own default mapping is encrypted; a mapping you write is not.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: gpu
spec:
  amiFamily: AL2023
  amiSelectorTerms:
    - alias: al2023@v20260827
  blockDeviceMappings:
    - deviceName: /dev/xvda
      ebs:
        volumeSize: 20Gi        # the vLLM image alone is ~18 GB on disk
        volumeType: gp3
        encrypted: false        # unencrypted EBS
```

## Fix
Give GPU node classes a large, encrypted root volume and mark it as the root:
```yaml
  blockDeviceMappings:
    - deviceName: /dev/xvda
      rootVolume: true
      ebs:
        volumeSize: 200Gi
        volumeType: gp3
        iops: 6000
        throughput: 500
        encrypted: true
        deleteOnTermination: true
```
Set `encrypted: true` on every EBS mapping (add `kmsKeyID` to use your own key).
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK014",
    name: "ebs-root-volume",
    severity: Severity::Warning,
    summary: "GPU EC2NodeClass without a root volume of at least 100Gi, or an unencrypted EBS volume",
    doc: DOC,
    advice: Some(crate::diagnostic::Advice {
        alternative: "the AMI's default root volume (20Gi on AL2023) and unencrypted volumes",
        cost: "image pulls of multi-GB CUDA images failing with disk pressure, and data at rest readable from a snapshot",
    }),
};

pub struct EbsRootVolume;

/// The smallest root volume for a GPU node class: 100 GiB.
const MIN_GPU_ROOT_BYTES: i128 = 100 << 30;

impl Rule for EbsRootVolume {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_classes {
            let gpu_pools: Vec<&str> = ctx
                .pools_of_class(view.name())
                .filter(|p| p.gpu.is_some())
                .map(|p| p.name())
                .collect();
            if !gpu_pools.is_empty() {
                root_volume(ctx, view, &gpu_pools, out);
            }
            unencrypted(ctx, view, out);
        }
    }
}

/// Where a node class's `blockDeviceMappings` are.
fn mappings_path() -> FieldPath {
    FieldPath::parse("spec.blockDeviceMappings")
}

fn root_volume(
    ctx: &Context<'_>,
    view: &NodeClassView<'_>,
    pools: &[&str],
    out: &mut Vec<Diagnostic>,
) {
    let used_by = format!(
        "GPU NodePool{} {}",
        if pools.len() == 1 { "" } else { "s" },
        pools.join(", ")
    );
    let help = "add a blockDeviceMappings entry with rootVolume: true and ebs: {volumeSize: 200Gi, \
                volumeType: gp3, encrypted: true}";
    let Some(i) = root_index(&view.class) else {
        let (path, what) = if view.class.spec.block_device_mappings.is_empty() {
            (
                FieldPath::parse("spec"),
                "has no blockDeviceMappings".to_owned(),
            )
        } else {
            (
                mappings_path(),
                format!(
                    "has no root volume mapping (rootVolume: true or {})",
                    root_devices(&view.class).join(" / ")
                ),
            )
        };
        out.push(
            ctx.diag_key(
                &META,
                view.obj,
                &path,
                format!(
                    "EC2NodeClass used by {used_by} {what}: nodes get the AMI's root volume \
                     (20 GiB on EKS-optimized AMIs), too small for GPU inference images (~18 GB on disk)"
                ),
            )
            .with_help(help),
        );
        return;
    };
    let mapping = &view.class.spec.block_device_mappings[i];
    let at = mappings_path().index(i);
    let device = mapping.device_name.as_deref().unwrap_or("(no deviceName)");
    let Some(size) = mapping.ebs.as_ref().and_then(|e| e.volume_size.as_deref()) else {
        out.push(
            ctx.diag(
                &META,
                view.obj,
                &at,
                format!(
                    "root volume {device} of an EC2NodeClass used by {used_by} sets no \
                     ebs.volumeSize: nodes get the AMI's size (20 GiB on EKS-optimized AMIs), too \
                     small for GPU inference images (~18 GB on disk)"
                ),
            )
            .with_help("set ebs.volumeSize: 200Gi (at least 100Gi)"),
        );
        return;
    };
    // An unparsable size is the schema rule's finding.
    let Ok(quantity) = Quantity::parse(size) else {
        return;
    };
    if quantity.milli >= MIN_GPU_ROOT_BYTES * 1000 {
        return;
    }
    out.push(
        ctx.diag(
            &META,
            view.obj,
            &at.key("ebs").key("volumeSize"),
            format!(
                "root volume {device} is {size} on an EC2NodeClass used by {used_by}: below \
                 100Gi, the first inference image pull (~18 GB on disk) fills it and the kubelet \
                 starts evicting"
            ),
        )
        .with_help("set ebs.volumeSize: 200Gi (at least 100Gi)"),
    );
}

/// Karpenter's choice of the volume that holds the kubelet's ephemeral storage
/// (aws/karpenter-provider-aws `ephemeralStorage` in pkg/providers/instancetype/types.go).
fn root_index(class: &EC2NodeClass) -> Option<usize> {
    let mappings = &class.spec.block_device_mappings;
    if let Some(i) = mappings.iter().position(|m| m.root_volume == Some(true)) {
        return Some(i);
    }
    if is_custom(class) {
        return mappings.len().checked_sub(1);
    }
    let devices = root_devices(class);
    mappings.iter().position(|m: &BlockDeviceMapping| {
        m.device_name
            .as_deref()
            .is_some_and(|d| devices.contains(&d))
    })
}

fn is_custom(class: &EC2NodeClass) -> bool {
    class.spec.ami_family.as_deref() == Some("Custom")
}

/// The AMI family, from `amiFamily` or the first alias (`al2023@v2026...`), lowercased.
fn ami_family(class: &EC2NodeClass) -> String {
    if let Some(family) = &class.spec.ami_family {
        return family.to_ascii_lowercase();
    }
    class
        .spec
        .ami_selector_terms
        .iter()
        .find_map(|t| t.alias.as_deref())
        .map(|a| a.split('@').next().unwrap_or_default().to_ascii_lowercase())
        .unwrap_or_default()
}

/// The root (ephemeral storage) device names of the node class's AMI family.
fn root_devices(class: &EC2NodeClass) -> Vec<&'static str> {
    let family = ami_family(class);
    if family.starts_with("bottlerocket") {
        vec!["/dev/xvdb"]
    } else if family.starts_with("windows") {
        vec!["/dev/sda1"]
    } else if family.starts_with("al2") {
        vec!["/dev/xvda"]
    } else {
        vec!["/dev/xvda", "/dev/sda1"]
    }
}

fn unencrypted(ctx: &Context<'_>, view: &NodeClassView<'_>, out: &mut Vec<Diagnostic>) {
    for (i, mapping) in view.class.spec.block_device_mappings.iter().enumerate() {
        let Some(ebs) = &mapping.ebs else { continue };
        if ebs.encrypted == Some(true) {
            continue;
        }
        let device = mapping.device_name.as_deref().unwrap_or("(no deviceName)");
        let at = mappings_path().index(i).key("ebs");
        let d = match ebs.encrypted {
            Some(_) => ctx.diag(
                &META,
                view.obj,
                &at.key("encrypted"),
                format!("EBS volume {device} has encrypted: false: it is created unencrypted"),
            ),
            None => ctx.diag_key(
                &META,
                view.obj,
                &at,
                format!(
                    "EBS volume {device} does not set encrypted: true: it is created unencrypted \
                     unless the account enables EBS encryption by default"
                ),
            ),
        };
        out.push(d.with_help("set ebs.encrypted: true (and kmsKeyID for a customer-managed key)"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(yaml: &str) -> EC2NodeClass {
        let docs = kk_model::yaml::load_documents(yaml, Default::default()).unwrap();
        serde_json::from_value(docs[0].value.clone()).unwrap()
    }

    #[test]
    fn root_volume_follows_karpenter() {
        let head =
            "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: x}\nspec:\n";
        let flagged = class(&format!(
            "{head}  amiFamily: AL2023\n  blockDeviceMappings:\n  - deviceName: /dev/xvdb\n  - deviceName: /dev/xvda\n    rootVolume: true\n"
        ));
        assert_eq!(root_index(&flagged), Some(1));
        let custom = class(&format!(
            "{head}  amiFamily: Custom\n  blockDeviceMappings:\n  - deviceName: /dev/xvda\n  - deviceName: /dev/xvdb\n"
        ));
        assert_eq!(root_index(&custom), Some(1));
        let bottlerocket = class(&format!(
            "{head}  amiSelectorTerms: [{{alias: bottlerocket@v1.40.0}}]\n  blockDeviceMappings:\n  - deviceName: /dev/xvda\n  - deviceName: /dev/xvdb\n"
        ));
        assert_eq!(root_index(&bottlerocket), Some(1));
        let none = class(&format!(
            "{head}  amiFamily: AL2023\n  blockDeviceMappings:\n  - deviceName: /dev/xvdb\n"
        ));
        assert_eq!(root_index(&none), None);
    }
}
