//! KK036: an AMI alias whose version Karpenter can never resolve.

use kk_model::FieldPath;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports `amiSelectorTerms[].alias` whose version part is not one Karpenter can look up:
for `al2` and `al2023`, `latest` or an EKS AMI release `v<YYYYMMDD>` (`al2023@v20260827`); for
`bottlerocket`, `latest` or a release `v<major>.<minor>.<patch>` (the `v` is optional).
(`windows*` aliases take only `latest`, which the CRD itself enforces.)

## Why
Karpenter (v1.0 to 1.15, `pkg/providers/amifamily`) turns the alias into the name of a public
SSM parameter — for AL2023 `/aws/service/eks/optimized-ami/<k8s>/amazon-linux-2023/<arch>/<variant>/amazon-eks-node-al2023-<arch>-<variant>-<k8s>-<version>/image_id`
— and asks for it. A version that is no release name (`al2@lates`, `al2023@2023.0.20230222`,
the AMI's OS version rather than its release) names no parameter: the node class reports
`AMIsReady=False` ("failed to discover any AMIs for alias"), and no pool using it launches.
The CRD accepts any text after the `@`, so only the cluster tells you, at launch time.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  amiSelectorTerms:
    - alias: al2023@2023.0.20230222
```

## Fix
Use the release version (`v` + the date of the EKS AMI release), e.g. `al2023@v20260827`; the
current one for a Kubernetes version is the SSM parameter
`/aws/service/eks/optimized-ami/<k8s>/amazon-linux-2023/x86_64/standard/recommended/release_version`.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK036",
    name: "ami-alias-version-unresolvable",
    severity: Severity::Error,
    summary: "AMI alias version that names no release: the node class never finds an AMI",
    doc: DOC,
    advice: None,
};

pub struct AmiAliasVersionUnresolvable;

/// `v` + eight digits (the EKS AMI release date).
fn is_release_date(v: &str) -> bool {
    v.strip_prefix('v')
        .is_some_and(|d| d.len() == 8 && d.bytes().all(|b| b.is_ascii_digit()))
}

/// `1.20.0` or `v1.20.0`.
fn is_semver(v: &str) -> bool {
    let parts: Vec<&str> = v.strip_prefix('v').unwrap_or(v).split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// What a valid version of `family` looks like, when `version` is not one.
fn problem(family: &str, version: &str) -> Option<&'static str> {
    if version == "latest" {
        return None;
    }
    match family {
        "al2" | "al2023" if !is_release_date(version) => Some("latest or v<YYYYMMDD>"),
        "bottlerocket" if !is_semver(version) => Some("latest or v<major>.<minor>.<patch>"),
        _ => None,
    }
}

impl Rule for AmiAliasVersionUnresolvable {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_classes {
            for (i, term) in view.class.spec.ami_selector_terms.iter().enumerate() {
                let Some(alias) = term.alias.as_deref() else {
                    continue;
                };
                let Some((family, version)) = alias.split_once('@') else {
                    continue;
                };
                let family = family.to_ascii_lowercase();
                if let Some(want) = problem(&family, version) {
                    let path = FieldPath::parse("spec.amiSelectorTerms")
                        .index(i)
                        .key("alias");
                    out.push(
                        ctx.diag(
                            &META,
                            view.obj,
                            &path,
                            format!(
                                "alias {alias}: {version:?} is no {family} release version \
                                 ({want}); Karpenter finds no AMI and the class stays \
                                 AMIsReady=False"
                            ),
                        )
                        .with_help(format!("e.g. {family}@{}", example(&family))),
                    );
                }
            }
        }
    }
}

fn example(family: &str) -> &'static str {
    if family == "bottlerocket" {
        "v1.39.1"
    } else {
        "v20260827"
    }
}

#[cfg(test)]
mod tests {
    use super::problem;

    #[test]
    fn versions_karpenter_can_and_cannot_look_up() {
        for ok in [
            ("al2023", "latest"),
            ("al2023", "v20260827"),
            ("al2", "v20250101"),
        ] {
            assert_eq!(problem(ok.0, ok.1), None, "{ok:?}");
        }
        for ok in [("bottlerocket", "v1.39.1"), ("bottlerocket", "1.57.0")] {
            assert_eq!(problem(ok.0, ok.1), None, "{ok:?}");
        }
        for bad in [
            ("al2", "lates"),
            ("al2023", "2023.0.20230222"),
            ("al2023", "v2026082"),
            ("al2023", "20260827"),
            ("bottlerocket", "1.39"),
        ] {
            assert!(problem(bad.0, bad.1).is_some(), "{bad:?}");
        }
    }
}
