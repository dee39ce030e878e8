//! KK009: a bootstrap token or AWS credentials written literally into an EC2NodeClass's
//! userData or into the Karpenter Helm values' `controller.env`.

use kk_model::FieldPath;
use serde_json::Value;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports secrets written literally where many people and processes can read them:
- in an EC2NodeClass's `userData`: a kubeadm bootstrap token (`[a-z0-9]{6}.[a-z0-9]{16}`), an
  AWS access key ID (`AKIA…`/`ASIA…` and 16 more characters), or a 40-character secret access
  key next to `aws_secret_access_key` / `AWS_SECRET_ACCESS_KEY`;
- in Karpenter Helm values: the same in a literal `value:` of `controller.env`.

Findings never repeat the secret: a token shows only its public ID (`abcdef.****************`),
an access key ID only its prefix.

## Why
userData is not a secret store. Anyone who may read EC2NodeClasses, anyone with
`ec2:DescribeInstanceAttribute`, and every process on the node (through the instance metadata
service) can read it; Helm values end up in the release Secret, in Git and in CI logs. A bootstrap
token lets its holder join machines to the cluster as nodes; an access key acts as whoever owns
it.

A token in userData has a second cost: Karpenter hashes userData into the EC2NodeClass, so
every token rotation is drift and replaces every node of the class. Tokens then either never
rotate (and outlive their purpose) or roll the whole pool each time.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: cpu
spec:
  amiFamily: Custom
  userData: |
    #!/bin/bash
    kubeadm join https://api.example.internal:6443 \
      --token abcdef.0123456789abcdef \
      --discovery-token-ca-cert-hash sha256:<64 hex>
```

## Fix
Keep the join configuration out of userData: store it in an SSM SecureString or a Secrets
Manager secret the node role may read, and let the node fetch it at boot (`join.mode: ssm` or
`secrets-manager` in the ElasticCluster spec does this, with a rotator that keeps the token
valid). For the Karpenter controller, use the infra workers' instance profile; if static keys
are unavoidable, reference a Secret with `valueFrom.secretKeyRef` (KK015 still notes it).
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK009",
    name: "literal-secret",
    severity: Severity::Warning,
    summary: "A bootstrap token or AWS credential is written literally into userData or Helm values",
    doc: DOC,
    advice: None,
};

pub struct LiteralSecret;

/// What kind of secret was found, and how it may be shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Secret {
    /// A kubeadm bootstrap token; holds its masked form.
    Token(String),
    /// An AWS access key ID; holds its masked form.
    AccessKeyId(String),
    /// A 40-character AWS secret access key.
    SecretAccessKey,
}

impl Secret {
    fn describe(&self) -> String {
        match self {
            Secret::Token(masked) => format!("a bootstrap token ({masked})"),
            Secret::AccessKeyId(masked) => format!("an AWS access key ID ({masked})"),
            Secret::SecretAccessKey => "an AWS secret access key (40 characters)".into(),
        }
    }
}

/// One secret in a text: where it starts (byte offset) and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub at: usize,
    pub secret: Secret,
}

impl Rule for LiteralSecret {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let path = FieldPath::parse("spec.userData");
        for view in &ctx.node_classes {
            let Some(script) = view.class.spec.user_data.as_deref() else {
                continue;
            };
            for (i, line) in script.lines().enumerate() {
                for found in find_secrets(line) {
                    let col = line[..found.at].chars().count() + 1;
                    let pos = ctx.pos_in_string(view.obj, &path, i + 1, col);
                    let consequence = match found.secret {
                        Secret::Token(_) => {
                            "anyone who can read the EC2NodeClass or the instance's user data can \
                             join nodes, and rotating the token changes userData, which drifts \
                             and replaces every node of this class"
                        }
                        _ => {
                            "anyone who can read the EC2NodeClass or the instance's user data \
                             (every process on the node, through IMDS) can use it"
                        }
                    };
                    let help = match found.secret {
                        Secret::Token(_) => {
                            "fetch the join configuration at boot from SSM Parameter Store or \
                             Secrets Manager (ElasticCluster join.mode ssm or secrets-manager)"
                        }
                        _ => "give the node an instance profile instead of static keys",
                    };
                    out.push(
                        ctx.diag_at(
                            &META,
                            view.obj,
                            pos,
                            format!(
                                "userData line {} holds {} in plain text: {consequence}",
                                i + 1,
                                found.secret.describe()
                            ),
                        )
                        .with_help(help),
                    );
                }
            }
        }
        for obj in &ctx.values {
            let env_path = FieldPath::parse("controller.env");
            let Some(Value::Array(env)) = obj.value(&env_path) else {
                continue;
            };
            for (i, entry) in env.iter().enumerate() {
                let Some(value) = entry.get("value").and_then(Value::as_str) else {
                    continue;
                };
                let name = entry.get("name").and_then(Value::as_str).unwrap_or("");
                let mut found = find_secrets(value);
                if found.is_empty()
                    && name.eq_ignore_ascii_case("AWS_SECRET_ACCESS_KEY")
                    && is_secret_key(value.trim())
                {
                    found.push(Found {
                        at: 0,
                        secret: Secret::SecretAccessKey,
                    });
                }
                let Some(first) = found.first() else {
                    continue;
                };
                let shown = if name.is_empty() { "an entry" } else { name };
                out.push(
                    ctx.diag(
                        &META,
                        obj,
                        &env_path.index(i).key("value"),
                        format!(
                            "controller.env {shown} holds {} in plain text: Helm values end up \
                             in the release Secret, in Git and in CI logs",
                            first.secret.describe()
                        ),
                    )
                    .with_help(
                        "use the infra workers' instance profile; if static keys are \
                         unavoidable, reference a Secret with valueFrom.secretKeyRef",
                    ),
                );
            }
        }
    }
}

impl Found {
    /// Bytes the secret takes in the text.
    fn len(&self) -> usize {
        match self.secret {
            Secret::Token(_) => 23,
            Secret::AccessKeyId(_) => 20,
            Secret::SecretAccessKey => 40,
        }
    }

    /// What stands in its place in shown text: the masked form, same length.
    fn masked(&self) -> String {
        match &self.secret {
            Secret::Token(m) | Secret::AccessKeyId(m) => m.clone(),
            Secret::SecretAccessKey => "*".repeat(40),
        }
    }
}

/// `line` with every secret [`find_secrets`] sees masked, columns unchanged. The framework
/// passes every code-frame line through this, so no output format shows a secret.
pub fn redact(line: &str) -> String {
    let found = find_secrets(line);
    if found.is_empty() {
        return line.to_owned();
    }
    let mut out = String::with_capacity(line.len());
    let mut at = 0;
    for f in found {
        out.push_str(&line[at..f.at]);
        out.push_str(&f.masked());
        at = f.at + f.len();
    }
    out.push_str(&line[at..]);
    out
}

fn is_token_char(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// Characters that continue a word around a candidate: a match inside a longer word (a host
/// name, a path segment) is not a secret.
fn continues_word(b: Option<u8>) -> bool {
    b.is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

fn is_secret_key(text: &str) -> bool {
    text.len() == 40
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'/' || b == b'+')
        // All letters, or all digits, is a word or a number, not a key.
        && text.bytes().any(|b| b.is_ascii_digit())
        && text.bytes().any(|b| b.is_ascii_alphabetic())
}

/// Bootstrap tokens, access key IDs and secret access keys in `text`, in order.
pub fn find_secrets(text: &str) -> Vec<Found> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let before = i.checked_sub(1).map(|p| bytes[p]);
        // [a-z0-9]{6}\.[a-z0-9]{16}, not inside a longer word, with a digit somewhere (an
        // all-letter match is a name like `config.somethinglonger`, not a random token).
        if i + 23 <= bytes.len()
            && !continues_word(before)
            && bytes[i..i + 6].iter().all(|b| is_token_char(*b))
            && bytes[i + 6] == b'.'
            && bytes[i + 7..i + 23].iter().all(|b| is_token_char(*b))
            && !continues_word(bytes.get(i + 23).copied())
            && bytes[i..i + 23].iter().any(u8::is_ascii_digit)
        {
            out.push(Found {
                at: i,
                secret: Secret::Token(format!("{}.{}", &text[i..i + 6], "*".repeat(16))),
            });
            i += 23;
            continue;
        }
        // (AKIA|ASIA)[A-Z0-9]{16}
        if i + 20 <= bytes.len()
            && !before.is_some_and(|b| b.is_ascii_alphanumeric())
            && (bytes[i..].starts_with(b"AKIA") || bytes[i..].starts_with(b"ASIA"))
            && bytes[i + 4..i + 20]
                .iter()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
            && !bytes.get(i + 20).is_some_and(u8::is_ascii_alphanumeric)
        {
            out.push(Found {
                at: i,
                secret: Secret::AccessKeyId(format!("{}{}", &text[i..i + 4], "*".repeat(16))),
            });
            i += 20;
            continue;
        }
        // aws_secret_access_key <sep> <40 characters>
        const KEY: &str = "aws_secret_access_key";
        if bytes.len() - i >= KEY.len()
            && bytes[i..i + KEY.len()].eq_ignore_ascii_case(KEY.as_bytes())
        {
            let after = &text[i + KEY.len()..];
            let skipped = after
                .find(|c: char| !(c.is_whitespace() || matches!(c, '=' | ':' | '"' | '\'')))
                .unwrap_or(after.len());
            let start = i + KEY.len() + skipped;
            let len = text[start..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '/' || c == '+' || c == '='))
                .unwrap_or(text.len() - start);
            if is_secret_key(&text[start..start + len]) {
                out.push(Found {
                    at: start,
                    secret: Secret::SecretAccessKey,
                });
                i = start + len;
                continue;
            }
            i += KEY.len();
            continue;
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<Secret> {
        find_secrets(text).into_iter().map(|f| f.secret).collect()
    }

    #[test]
    fn tokens_are_found_and_masked() {
        assert_eq!(
            kinds("  --token abcdef.0123456789abcdef \\"),
            vec![Secret::Token("abcdef.****************".into())]
        );
        assert_eq!(find_secrets("TOKEN='07401b.f395accd246ae52d'")[0].at, 7);
        // The render's own format check, host names and all-letter names are not tokens.
        assert!(kinds(r#"[[ "$TOKEN" =~ ^[a-z0-9]{6}\.[a-z0-9]{16}$ ]]"#).is_empty());
        assert!(kinds("ip-10-0-1-10.ec2.internal abcdef.0123456789abcdef.example.com").is_empty());
        assert!(kinds("config.kubernetesversionx").is_empty());
        assert!(kinds("--token $TOKEN --token <KUBEADM_BOOTSTRAP_TOKEN>").is_empty());
    }

    #[test]
    fn aws_keys_are_found_and_masked() {
        assert_eq!(
            kinds("export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE"),
            vec![Secret::AccessKeyId("AKIA****************".into())]
        );
        assert_eq!(
            kinds(
                "aws configure set aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
            ),
            vec![Secret::SecretAccessKey]
        );
        assert_eq!(
            kinds("AWS_SECRET_ACCESS_KEY=\"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\""),
            vec![Secret::SecretAccessKey]
        );
        assert!(kinds("AWS_SECRET_ACCESS_KEY=\"$(cat /run/secret)\"").is_empty());
        assert!(kinds("XAKIAIOSFODNN7EXAMPLE AKIA123").is_empty());
    }

    #[test]
    fn code_frames_never_show_the_secret() {
        assert_eq!(
            redact("  --token abcdef.0123456789abcdef \\"),
            "  --token abcdef.**************** \\"
        );
        let text = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec:\n  amiFamily: Custom\n  amiSelectorTerms: [{id: ami-0123456789abcdef0}]\n  role: r\n  subnetSelectorTerms: [{tags: {a: b}}]\n  securityGroupSelectorTerms: [{tags: {a: b}}]\n  userData: |\n    TOKEN='abcdef.0123456789abcdef' AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n";
        let report = crate::lint(
            &[crate::Input::new("c.yaml", text)],
            &crate::Config::default(),
        )
        .unwrap();
        let frames: Vec<&str> = report
            .diagnostics
            .iter()
            .filter(|d| d.code == "KK009")
            .filter_map(|d| d.source_line.as_deref())
            .collect();
        assert_eq!(frames.len(), 2);
        for frame in frames {
            assert_eq!(
                frame,
                "    TOKEN='abcdef.****************' AWS_ACCESS_KEY_ID=AKIA****************"
            );
        }
    }

    #[test]
    fn multibyte_text_does_not_panic() {
        assert!(kinds("é aws_secret_access_keyé ü AKIA€").is_empty());
    }
}
