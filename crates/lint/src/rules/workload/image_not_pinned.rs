//! KK026: a container image with a floating tag (or none), or pinned only by tag.

use kk_model::FieldPath;
use kk_model::image::{ImageRef, is_floating};
use serde_json::Value;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Checks every container and init container image of a workload. A tag that moves as releases
come out (`latest`, `stable`, a bare major `v1` or major.minor `v1.35`), or no tag and no digest
at all (which every runtime reads as `latest`), is a warning. A fixed tag without a digest is
reported at info level in hand-written manifests (what `render` writes is listed by
`kubean-karpenter images`, which says which of its images are tag-only and how to pin each).

## Why
A registry can move a tag: two nodes of one pool can run different code, a mirror copied last
month holds different bytes than the one copied today, and what was reviewed is not what runs.
In an air-gapped cluster an image that is not in the mirror by the exact reference the manifest
names cannot start at all; `skopeo copy` of a floating tag copies whatever it points to now.

## Example
```yaml
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: nvidia-device-plugin
  namespace: kube-system
spec:
  selector:
    matchLabels: {name: nvidia-device-plugin}
  template:
    metadata:
      labels: {name: nvidia-device-plugin}
    spec:
      containers:
        - name: plugin
          image: nvcr.io/nvidia/k8s-device-plugin:latest
```

## Fix
Pin a release tag and its digest: `nvcr.io/nvidia/k8s-device-plugin:v0.20.0@sha256:<digest>`,
with the digest `skopeo inspect --format '{{.Digest}}' docker://<image>` prints (or the one your
mirror reports after `skopeo copy --preserve-digests`). In a spec, set `images.<component>.digest`.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK026",
    name: "image-not-pinned",
    severity: Severity::Warning,
    summary: "container image with a floating tag or none (warning), or a tag without a digest (info)",
    doc: DOC,
    advice: None,
};

pub struct ImageNotPinned;

impl Rule for ImageNotPinned {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for workload in &ctx.workloads {
            let rendered = ctx.source(workload.obj).origin.is_some();
            for list in ["initContainers", "containers"] {
                let Some(containers) = workload.pod_spec.get(list).and_then(Value::as_array) else {
                    continue;
                };
                for (i, container) in containers.iter().enumerate() {
                    let Some(image) = container.get("image").and_then(Value::as_str) else {
                        continue;
                    };
                    let path: FieldPath = workload.pod_spec_path.key(list).index(i).key("image");
                    let parts = ImageRef::parse(image);
                    if parts.has_digest() {
                        continue;
                    }
                    match parts.tag {
                        Some(tag) if !is_floating(tag) => {
                            if !rendered {
                                out.push(
                                    ctx.diag(
                                        &META,
                                        workload.obj,
                                        &path,
                                        format!("{image} is pinned by tag only: the registry can move the tag"),
                                    )
                                    .with_severity(Severity::Info)
                                    .with_help("append @sha256:<digest> (skopeo inspect --format '{{.Digest}}' docker://IMAGE)"),
                                );
                            }
                        }
                        tag => out.push(
                            ctx.diag(
                                &META,
                                workload.obj,
                                &path,
                                format!(
                                    "{image}: {} floats: what runs changes as releases come out",
                                    tag.map_or_else(
                                        || "no tag (read as latest)".to_owned(),
                                        |t| format!("tag {t:?}")
                                    )
                                ),
                            )
                            .with_help(
                                "pin a release tag and its digest: IMAGE:vX.Y.Z@sha256:<digest>",
                            ),
                        ),
                    }
                }
            }
        }
    }
}
