//! KK020: a bootstrap token or discovery CA hash in userData that kubeadm will refuse.

use kk_model::FieldPath;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};
use crate::userdata;

pub const DOC: &str = r#"
## What
Reports, in an EC2NodeClass's `userData`, literal values that are not what `kubeadm join`
accepts:
- a bootstrap token (`--token`, `--discovery-token`, `--tls-bootstrap-token`, or a `TOKEN=`,
  `KUBEADM_TOKEN=`, `BOOTSTRAP_TOKEN=`, `JOIN_TOKEN=` assignment) that does not match
  `^[a-z0-9]{6}\.[a-z0-9]{16}$`;
- a CA certificate hash (`--discovery-token-ca-cert-hash`, or a `CA_CERT_HASH=`,
  `KUBEADM_CA_CERT_HASH=`, `CA_HASH=` assignment) that is not `sha256:` followed by 64 lowercase
  hex digits.

Values built from shell variables (`"$TOKEN"`, `$(fetch)`) and empty initialisations
(`TOKEN=""`) are left alone: they are only known at boot. A placeholder left in, such as the
seed's `sha256:<KUBEADM_CA_CERT_HASH>`, is reported by name; other malformed tokens are described,
never printed.

## Why
kubeadm validates both before it contacts the API server: a malformed token or hash ends the join
at once, the kubelet never starts, and Karpenter terminates the instance after 15 minutes of no
registration and launches another one with the same userData — a loop that bills an instance
every quarter hour while pending pods wait. A placeholder copied from a runbook is the usual
cause.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: gpu
spec:
  amiFamily: Custom
  userData: |
    #!/bin/bash
    kubeadm join https://api.example.internal:6443 \
      --token <KUBEADM_BOOTSTRAP_TOKEN> \
      --discovery-token-ca-cert-hash sha256:<KUBEADM_CA_CERT_HASH>
```

## Fix
Create a token with `kubeadm token create` (or `kubean-karpenter token create`), and compute the
hash from the cluster CA:
```bash
openssl x509 -pubkey -in /etc/kubernetes/pki/ca.crt | openssl rsa -pubin -outform der 2>/dev/null |
  openssl dgst -sha256 -hex | sed 's/^.* /sha256:/'
```
Better, do not write either into userData: fetch them at boot from SSM or Secrets Manager
(see KK009).
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK020",
    name: "malformed-join-credentials",
    severity: Severity::Error,
    summary: "A bootstrap token or CA cert hash in userData is not in the form kubeadm accepts",
    doc: DOC,
    advice: None,
};

pub struct MalformedJoinCredentials;

const TOKEN_FLAGS: &[&str] = &["--token", "--discovery-token", "--tls-bootstrap-token"];
const TOKEN_VARS: &[&str] = &[
    "TOKEN",
    "KUBEADM_TOKEN",
    "BOOTSTRAP_TOKEN",
    "KUBEADM_BOOTSTRAP_TOKEN",
    "JOIN_TOKEN",
];
const HASH_FLAG: &str = "--discovery-token-ca-cert-hash";
const HASH_VARS: &[&str] = &[
    "CA_CERT_HASH",
    "KUBEADM_CA_CERT_HASH",
    "CA_HASH",
    "DISCOVERY_TOKEN_CA_CERT_HASH",
];

impl Rule for MalformedJoinCredentials {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        let path = FieldPath::parse("spec.userData");
        for view in &ctx.node_classes {
            let Some(script) = view.class.spec.user_data.as_deref() else {
                continue;
            };
            let mut found: Vec<(usize, usize, String)> = Vec::new();
            for flag in TOKEN_FLAGS {
                for u in userdata::flag_uses(script, flag) {
                    if let Some(problem) = token_problem(&u.value) {
                        found.push((u.line, u.col, format!("{flag} {problem}")));
                    }
                }
            }
            for u in userdata::flag_uses(script, HASH_FLAG) {
                for hash in u.value.split(',') {
                    if let Some(problem) = hash_problem(hash) {
                        found.push((u.line, u.col, format!("{HASH_FLAG} {problem}")));
                    }
                }
            }
            for a in userdata::assignments(script) {
                let problem = if TOKEN_VARS.contains(&a.name.as_str()) {
                    token_problem(&a.value)
                } else if HASH_VARS.contains(&a.name.as_str()) {
                    hash_problem(&a.value)
                } else {
                    None
                };
                if let Some(problem) = problem {
                    found.push((a.line, a.col, format!("{}= {problem}", a.name)));
                }
            }
            for (line, col, what) in found {
                let pos = ctx.pos_in_string(view.obj, &path, line, col);
                out.push(
                    ctx.diag_at(
                        &META,
                        view.obj,
                        pos,
                        format!(
                            "userData line {line}: {what}: kubeadm join refuses it, the node \
                             never joins and Karpenter replaces the instance every 15 minutes"
                        ),
                    )
                    .with_help(
                        "use a token from kubeadm token create ([a-z0-9]{6}.[a-z0-9]{16}) and \
                         sha256:<hex SHA-256 of the CA's public key>, or fetch both at boot \
                         from SSM or Secrets Manager",
                    ),
                );
            }
        }
    }
}

/// A value only known at boot (a variable, a command substitution) or an empty initialisation.
fn is_runtime(value: &str) -> bool {
    value.is_empty() || value.contains('$') || value.contains('`')
}

/// A runbook placeholder such as `<KUBEADM_BOOTSTRAP_TOKEN>` (or its HTML-escaped form).
fn placeholder(value: &str) -> Option<&str> {
    let start = value.find(['<', '&'])?;
    let inner = &value[start..];
    let is_placeholder = (inner.starts_with('<') && inner.ends_with('>'))
        || (inner.starts_with("&lt;") && inner.ends_with("&gt;"));
    let printable = inner
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "<>&;_-".contains(c));
    (is_placeholder && printable).then_some(inner)
}

/// Why `value` is not a bootstrap token, without repeating it (it may be a real one with a typo).
fn token_problem(value: &str) -> Option<String> {
    if is_runtime(value) {
        return None;
    }
    if let Some(p) = placeholder(value) {
        return Some(format!("is still the placeholder {p}"));
    }
    let Some((id, secret)) = value.split_once('.') else {
        return Some(format!(
            "is not a bootstrap token: {} characters with no '.' between the 6-character ID and \
             the 16-character secret",
            value.chars().count()
        ));
    };
    let ok = |part: &str, len: usize| {
        part.len() == len
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    if ok(id, 6) && ok(secret, 16) {
        return None;
    }
    let mut reasons = Vec::new();
    if id.chars().count() != 6 {
        reasons.push(format!(
            "its ID has {} characters, not 6",
            id.chars().count()
        ));
    }
    if secret.chars().count() != 16 {
        reasons.push(format!(
            "its secret has {} characters, not 16",
            secret.chars().count()
        ));
    }
    if value.chars().any(|c| c.is_ascii_uppercase()) {
        reasons.push("it has uppercase letters".into());
    }
    let odd = |c: char| !(c.is_ascii_alphanumeric() || c == '.');
    if value.chars().any(odd) {
        reasons.push("it has characters other than a-z, 0-9 and one '.'".into());
    }
    if reasons.is_empty() {
        reasons.push("it is not [a-z0-9]{6}.[a-z0-9]{16}".into());
    }
    Some(format!("is not a bootstrap token: {}", reasons.join(", ")))
}

/// Why `value` is not `sha256:<64 lowercase hex>`.
fn hash_problem(value: &str) -> Option<String> {
    let value = value.trim();
    if is_runtime(value) {
        return None;
    }
    if placeholder(value).is_some() {
        return Some(format!("is still the placeholder {value}"));
    }
    let Some(hex) = value.strip_prefix("sha256:") else {
        let prefix = value.split_once(':').map_or("no", |(p, _)| p);
        return Some(format!(
            "is not sha256:<64 hex digits> (prefix {prefix:?} instead of \"sha256\")"
        ));
    };
    if hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let digits = hex.chars().filter(char::is_ascii_hexdigit).count();
    let reason = if hex.chars().any(|c| !c.is_ascii_hexdigit()) {
        "has characters that are not hex digits".to_owned()
    } else if hex.chars().any(|c| c.is_ascii_uppercase()) {
        "has uppercase hex digits".to_owned()
    } else {
        format!("has {digits} hex digits, not 64")
    };
    Some(format!(
        "{value} is not sha256:<64 lowercase hex digits>: it {reason}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens() {
        assert_eq!(token_problem("abcdef.0123456789abcdef"), None);
        assert_eq!(token_problem("$TOKEN"), None);
        assert_eq!(token_problem(""), None);
        assert_eq!(
            token_problem("<KUBEADM_BOOTSTRAP_TOKEN>").unwrap(),
            "is still the placeholder <KUBEADM_BOOTSTRAP_TOKEN>"
        );
        let p = token_problem("ABCDEF.0123456789abcdef").unwrap();
        assert!(p.contains("uppercase") && !p.contains("0123456789"), "{p}");
        assert!(
            token_problem("abcdef0123456789abcdef")
                .unwrap()
                .contains("no '.'")
        );
        assert!(
            token_problem("abcde.0123456789abcdef")
                .unwrap()
                .contains("ID has 5")
        );
    }

    #[test]
    fn hashes() {
        let good = format!("sha256:{}", "0a".repeat(32));
        assert_eq!(hash_problem(&good), None);
        assert_eq!(hash_problem("$CA_CERT_HASH"), None);
        assert!(
            hash_problem("sha256:<KUBEADM_CA_CERT_HASH>")
                .unwrap()
                .contains("placeholder sha256:<KUBEADM_CA_CERT_HASH>")
        );
        assert!(hash_problem(&good.to_uppercase()).is_some());
        assert!(
            hash_problem(&format!("sha256:{}", "A".repeat(64)))
                .unwrap()
                .contains("uppercase")
        );
        assert!(hash_problem("sha256:abc").unwrap().contains("3 hex digits"));
        assert!(hash_problem("md5:abc").unwrap().contains("\"md5\""));
    }
}
