//! KK010: Custom-AMI userData that joins with kubeadm must register the node the way Karpenter
//! expects: the `karpenter.sh/unregistered:NoExecute` taint, a provider ID of the form
//! `aws:///<zone>/<instance-id>`, and `--cloud-provider=external`.

use kk_model::FieldPath;

use crate::context::{Context, NodeClassView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};
use crate::userdata::{self, Assignment};

pub const DOC: &str = r#"
## What
For each EC2NodeClass with `amiFamily: Custom` whose `userData` runs `kubeadm join`, reports:
- a kubelet that does not register with the taint `karpenter.sh/unregistered:NoExecute`
  (`--register-with-taints`, or a kubeadm `JoinConfiguration` taint);
- a provider ID (`--provider-id`, directly or through the variable it names) that is not
  `aws:///<availability zone>/<instance ID>`: `aws://` with two slashes, a missing zone, the zone
  ID (`use1-az1`) or region instead of the zone name, the host name instead of the instance ID,
  or a fixed value;
- a kubelet without `--cloud-provider=external` (error for `--cloud-provider=aws`, which no
  longer exists; warning when the flag is missing).

Both forms of kubelet flags are read: `KUBELET_EXTRA_ARGS=...` in an environment file and
`Environment="KUBELET_EXTRA_ARGS=..."` in a systemd drop-in.

## Why
With `amiFamily: Custom` Karpenter adds nothing to userData: no taint, no provider ID, no flags.
- Karpenter only registers a Node that carries `karpenter.sh/unregistered:NoExecute` (it sets
  the NodeClaim's `Registered` condition to false with `UnregisteredTaintNotFound`); after 15
  minutes without registration it deletes the NodeClaim and terminates the instance. The taint
  also keeps pods off the node until Karpenter has applied the NodePool's labels and taints.
- Karpenter matches a Node to its NodeClaim by `spec.providerID` only, byte for byte, and
  writes it as `aws:///<zone>/<instance-id>`. Any other string (`aws://us-east-1a/i-0123…`,
  `aws:///i-0123…`) never matches: the instance is terminated after 15 minutes and the pool
  launches another one, forever.
- Without `--cloud-provider=external` the AWS cloud controller manager never initializes the
  node (its addresses and topology labels), which the design relies on; `--cloud-provider=aws`
  was removed from the kubelet with the in-tree AWS provider (Kubernetes 1.27).

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
    PROVIDER_ID="aws://${AWS_AZ}/${INSTANCE_ID}"
    echo "KUBELET_EXTRA_ARGS=--provider-id=${PROVIDER_ID}" >/etc/sysconfig/kubelet
    kubeadm join api.example.internal:6443 --token "$TOKEN" \
      --discovery-token-ca-cert-hash "$CA_CERT_HASH"
```

## Fix
Read the zone and instance ID from IMDS (with an IMDSv2 token) and pass all three flags:
```bash
PROVIDER_ID="aws:///${AWS_AZ}/${INSTANCE_ID}"
KUBELET_EXTRA_ARGS=--cloud-provider=external --provider-id=${PROVIDER_ID} --register-with-taints=karpenter.sh/unregistered:NoExecute
```
Add the NodePool's own taints to the same `--register-with-taints` list.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK010",
    name: "custom-ami-registration",
    severity: Severity::Error,
    summary: "Custom-AMI userData joins without the unregistered taint, Karpenter's provider ID form or --cloud-provider=external",
    doc: DOC,
    advice: None,
};

pub struct CustomAmiRegistration;

const UNREGISTERED: &str = "karpenter.sh/unregistered";

impl Rule for CustomAmiRegistration {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for (view, script) in super::custom_ami_user_data(ctx) {
            if !userdata::joins_with_kubeadm(script) {
                continue;
            }
            let at = Anchor { ctx, view, script };
            check_taint(&at, out);
            check_provider_id(&at, out);
            check_cloud_provider(&at, out);
        }
    }
}

/// Where findings about one node class's userData go.
struct Anchor<'c, 'a> {
    ctx: &'c Context<'a>,
    view: &'c NodeClassView<'a>,
    script: &'c str,
}

impl Anchor<'_, '_> {
    fn diag(&self, line: usize, col: usize, message: String) -> Diagnostic {
        let path = FieldPath::parse("spec.userData");
        let pos = self.ctx.pos_in_string(self.view.obj, &path, line, col);
        self.ctx.diag_at(&META, self.view.obj, pos, message)
    }

    /// Where a missing kubelet flag belongs: the KUBELET_EXTRA_ARGS line, else `kubeadm join`.
    fn kubelet_args(&self) -> (usize, usize) {
        userdata::kubelet_args_at(self.script)
            .or_else(|| userdata::kubeadm_join_at(self.script))
            .unwrap_or((1, 1))
    }
}

/// `karpenter.sh/unregistered:NoExecute` or `karpenter.sh/unregistered=<any>:NoExecute`.
fn is_unregistered_taint(entry: &str) -> bool {
    let Some(rest) = entry.trim().strip_prefix(UNREGISTERED) else {
        return false;
    };
    let effect = match rest.strip_prefix('=') {
        Some(value_and_effect) => value_and_effect.split_once(':').map(|(_, e)| e),
        None => rest.strip_prefix(':'),
    };
    effect == Some("NoExecute")
}

fn check_taint(at: &Anchor<'_, '_>, out: &mut Vec<Diagnostic>) {
    let uses = userdata::flag_uses(at.script, "--register-with-taints");
    if uses
        .iter()
        .any(|u| u.value.split(',').any(is_unregistered_taint))
    {
        return;
    }
    // A kubeadm JoinConfiguration in a heredoc: `- key: karpenter.sh/unregistered` with
    // `effect: NoExecute`.
    let in_config = at.script.lines().any(|l| {
        l.trim_start()
            .trim_start_matches("- ")
            .trim_start()
            .strip_prefix("key:")
            .is_some_and(|v| v.trim().trim_matches(['"', '\'']) == UNREGISTERED)
    }) && at.script.contains("NoExecute");
    if in_config {
        return;
    }
    let why = "Karpenter never marks the node registered (UnregisteredTaintNotFound) and \
               terminates the instance after 15 minutes";
    let diag = match uses.first() {
        Some(u) => at.diag(
            u.line,
            u.col,
            format!(
                "--register-with-taints={} lacks karpenter.sh/unregistered:NoExecute: {why}",
                u.value
            ),
        ),
        None => {
            let (line, col) = at.kubelet_args();
            at.diag(
                line,
                col,
                format!(
                    "the kubelet does not register with the taint \
                     karpenter.sh/unregistered:NoExecute (no --register-with-taints): {why}"
                ),
            )
        }
    };
    out.push(diag.with_help(
        "add --register-with-taints=karpenter.sh/unregistered:NoExecute (plus the NodePool's \
         taints) to KUBELET_EXTRA_ARGS",
    ));
}

/// What a provider ID segment holds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Zone,
    InstanceId,
    /// Something else, described for the message.
    Other(String),
    /// Cannot tell (a command substitution, a variable set elsewhere).
    Unknown,
}

/// What `$name` holds, from its assignment in the script or else from its name.
fn classify_var(name: &str, assignments: &[Assignment], line: usize, depth: usize) -> Part {
    if let Some(a) = userdata::assigned(assignments, name, line) {
        if depth < 4
            && let Some(inner) = userdata::variable_ref(&a.value)
        {
            return classify_var(inner, assignments, a.line, depth + 1);
        }
        let part = classify_text(&a.value);
        if part != Part::Unknown {
            return part;
        }
    }
    let upper = name.to_ascii_uppercase();
    if upper.contains("ZONE_ID") || upper.contains("AZ_ID") {
        Part::Other(format!(
            "${name} (a zone ID such as use1-az1, not the zone name)"
        ))
    } else if upper.contains("ZONE") || upper.contains("AZ") {
        Part::Zone
    } else if upper.contains("INSTANCE") {
        Part::InstanceId
    } else if upper.contains("HOST") {
        Part::Other(format!("${name} (the host name, not the instance ID)"))
    } else if upper.contains("REGION") {
        Part::Other(format!("${name} (the region, not the availability zone)"))
    } else {
        Part::Unknown
    }
}

/// What an assigned value (an IMDS call, a literal) yields.
fn classify_text(value: &str) -> Part {
    // Variable names inside the command (`$IMDS_TOKEN`) say nothing about its output.
    let mut text = String::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        text.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let skip = if let Some(inner) = after.strip_prefix('{') {
            inner.find('}').map_or(after.len(), |e| e + 2)
        } else {
            after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len())
        };
        rest = &after[skip..];
    }
    text.push_str(rest);
    let t = text.to_ascii_lowercase();
    if t.contains("availability-zone-id") || t.contains("zone-id") {
        return Part::Other("the availability zone ID (use1-az1), not the zone name".into());
    }
    if t.contains("availability-zone") || t.contains("availability_zone") {
        return Part::Zone;
    }
    if t.contains("instance-id") || t.contains("instance_id") {
        return Part::InstanceId;
    }
    if t.contains("region") {
        return Part::Other("the region, not the availability zone".into());
    }
    if t.contains("hostname") {
        return Part::Other("the host name, not the instance ID".into());
    }
    if t.contains("local-ipv4") || t.contains("private-ip") {
        return Part::Other("an IP address".into());
    }
    if !value.contains(['$', '`']) && !value.is_empty() {
        return Part::Other(format!(
            "the fixed value '{value}', the same on every instance"
        ));
    }
    Part::Unknown
}

fn classify_segment(seg: &str, assignments: &[Assignment], line: usize) -> Part {
    match userdata::variable_ref(seg) {
        Some(name) => classify_var(name, assignments, line, 0),
        None if seg.contains(['$', '`']) => Part::Unknown,
        None if seg.is_empty() => Part::Other("nothing".into()),
        None => Part::Other(format!(
            "the fixed value '{seg}', the same on every instance"
        )),
    }
}

/// Why `id` (a provider ID, variables unexpanded) is not `aws:///<zone>/<instance-id>`.
fn provider_id_problem(id: &str, assignments: &[Assignment], line: usize) -> Option<String> {
    let Some(rest) = id.strip_prefix("aws://") else {
        return Some("does not start with aws:///".into());
    };
    let Some(rest) = rest.strip_prefix('/') else {
        return Some(
            "has two slashes after aws: where Karpenter writes three (aws:///<zone>/<instance-id>)"
                .into(),
        );
    };
    if rest.contains("$(") || rest.contains('`') {
        return None;
    }
    let segments: Vec<&str> = rest.split('/').collect();
    let [zone, instance] = segments.as_slice() else {
        return Some(if segments.len() == 1 {
            "has no availability zone (aws:///<zone>/<instance-id>)".into()
        } else {
            format!(
                "has {} path segments where Karpenter writes two (aws:///<zone>/<instance-id>)",
                segments.len()
            )
        });
    };
    let zone_part = classify_segment(zone, assignments, line);
    let instance_part = classify_segment(instance, assignments, line);
    match (zone_part, instance_part) {
        (Part::InstanceId, Part::Zone) => Some("has the zone and the instance ID swapped".into()),
        (Part::Other(what), _) => Some(format!("has {zone} = {what} where the zone belongs")),
        (_, Part::Other(what)) => Some(format!(
            "has {instance} = {what} where the instance ID belongs"
        )),
        (Part::InstanceId, _) => Some(format!("has the instance ID {zone} where the zone belongs")),
        (_, Part::Zone) => Some(format!(
            "has the zone {instance} where the instance ID belongs"
        )),
        _ => None,
    }
}

fn check_provider_id(at: &Anchor<'_, '_>, out: &mut Vec<Diagnostic>) {
    let assignments = userdata::assignments(at.script);
    // A real script passes the flag once or twice; the cap bounds hostile input.
    for u in userdata::flag_uses(at.script, "--provider-id")
        .into_iter()
        .take(32)
    {
        // `--provider-id=${PROVIDER_ID}`: the value is where PROVIDER_ID is built.
        let (line, col, id) = match userdata::variable_ref(&u.value)
            .and_then(|name| userdata::assigned(&assignments, name, u.line))
        {
            Some(a) => (a.line, a.col, a.value.clone()),
            None if u.value.starts_with('$') => continue,
            None => (u.line, u.col, u.value.clone()),
        };
        if let Some(problem) = provider_id_problem(&id, &assignments, line) {
            out.push(
                at.diag(
                    line,
                    col,
                    format!(
                        "provider ID {id} {problem}: Karpenter matches Nodes to NodeClaims by \
                         the exact string aws:///<zone>/<instance-id>, so this node never \
                         registers and its instance is terminated after 15 minutes"
                    ),
                )
                .with_help(
                    "build it as PROVIDER_ID=\"aws:///${AWS_AZ}/${INSTANCE_ID}\" from IMDS \
                     placement/availability-zone and instance-id",
                ),
            );
        }
    }
}

fn check_cloud_provider(at: &Anchor<'_, '_>, out: &mut Vec<Diagnostic>) {
    let uses = userdata::flag_uses(at.script, "--cloud-provider");
    if uses.iter().any(|u| u.value == "external") {
        return;
    }
    // kubeadm JoinConfiguration: `cloud-provider: external` or `name: cloud-provider` +
    // `value: external` under kubeletExtraArgs.
    let lines: Vec<&str> = at.script.lines().map(str::trim).collect();
    let in_config = lines.iter().enumerate().any(|(i, l)| {
        let unquoted = l.replace(['"', '\''], "");
        unquoted == "cloud-provider: external"
            || (unquoted.trim_start_matches("- ") == "name: cloud-provider"
                && lines
                    .get(i + 1)
                    .is_some_and(|n| n.replace(['"', '\''], "") == "value: external"))
    });
    if in_config {
        return;
    }
    let diag = match uses.iter().find(|u| !u.value.is_empty()) {
        Some(u) => at.diag(
            u.line,
            u.col,
            format!(
                "--cloud-provider={}: the kubelet has no in-tree cloud providers since \
                 Kubernetes 1.27; nodes need --cloud-provider=external and the AWS cloud \
                 controller manager",
                u.value
            ),
        ),
        None => {
            let (line, col) = at.kubelet_args();
            at.diag(
                line,
                col,
                "the kubelet runs without --cloud-provider=external: the AWS cloud controller \
                 manager never initializes these nodes (addresses, topology labels)"
                    .into(),
            )
            .with_severity(Severity::Warning)
        }
    };
    out.push(diag.with_help("add --cloud-provider=external to KUBELET_EXTRA_ARGS"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_id_forms() {
        let script = "INSTANCE_ID=\"$(imds instance-id)\"\nAWS_AZ=\"$(imds placement/availability-zone)\"\nREGION=\"$(imds placement/region)\"\n";
        let a = userdata::assignments(script);
        let problem = |id: &str| provider_id_problem(id, &a, 10);
        assert_eq!(problem("aws:///${AWS_AZ}/${INSTANCE_ID}"), None);
        assert_eq!(problem("aws:///$AWS_AZ/$INSTANCE_ID"), None);
        assert!(
            problem("aws://$AWS_AZ/$INSTANCE_ID")
                .unwrap()
                .contains("two slashes")
        );
        assert!(
            problem("aws:///${INSTANCE_ID}")
                .unwrap()
                .contains("no availability zone")
        );
        assert!(
            problem("aws:///${REGION}/${INSTANCE_ID}")
                .unwrap()
                .contains("region")
        );
        assert!(
            problem("aws:///${AWS_AZ}/${HOSTNAME}")
                .unwrap()
                .contains("host name")
        );
        assert!(
            problem("aws:///${INSTANCE_ID}/${AWS_AZ}")
                .unwrap()
                .contains("swapped")
        );
        assert!(
            problem("aws:///us-east-1a/${INSTANCE_ID}")
                .unwrap()
                .contains("fixed value")
        );
        assert!(problem("i-0123").unwrap().contains("aws:///"));
        // Unknown variables and inline command substitutions are not judged.
        assert_eq!(problem("aws:///${X}/${Y}"), None);
        assert_eq!(problem("aws:///$(curl -s a)/$(curl -s b)"), None);
    }

    #[test]
    fn assignments_and_flags_of_both_kubelet_flag_forms() {
        let script = "#!/bin/bash\n# TOKEN=commented\nexport A=1 B='two words'\nINSTANCE_ID=\"$(curl -H \"X: $T\" http://x/instance-id)\"\n  KK_TOKEN) TOKEN=\"$value\" ;;\nEnvironment=\"KUBELET_EXTRA_ARGS=--cloud-provider=external --node-labels=a=b\"\nKUBELET_EXTRA_ARGS=--max-pods=110 --provider-id=${PROVIDER_ID}\nkubeadm join x \\\n  --token \\\n  abcdef.0123456789abcdef --token-ttl 0\n";
        let a = userdata::assignments(script);
        let names: Vec<(&str, &str)> = a
            .iter()
            .map(|a| (a.name.as_str(), a.value.as_str()))
            .collect();
        assert!(names.contains(&("A", "1")));
        assert!(names.contains(&("B", "two words")));
        assert!(names.contains(&("INSTANCE_ID", "$(curl -H \"X: $T\" http://x/instance-id)")));
        assert!(names.contains(&("TOKEN", "$value")));
        assert!(!names.iter().any(|(n, _)| *n == "a"));
        let cloud = userdata::flag_uses(script, "--cloud-provider");
        assert_eq!((cloud[0].line, cloud[0].col), (6, 33));
        assert_eq!(cloud[0].value, "external");
        assert_eq!(userdata::flag_uses(script, "--node-labels")[0].value, "a=b");
        assert_eq!(
            userdata::flag_uses(script, "--provider-id")[0].value,
            "${PROVIDER_ID}"
        );
        let token = userdata::flag_uses(script, "--token");
        assert_eq!(token.len(), 1);
        assert_eq!(token[0].value, "abcdef.0123456789abcdef");
        assert!(userdata::joins_with_kubeadm(script));
        assert_eq!(userdata::kubelet_args_at(script), Some((6, 14)));
        assert_eq!(userdata::variable_ref("${A:-x}"), Some("A"));
        assert_eq!(userdata::variable_ref("$A/b"), None);
    }

    #[test]
    fn unregistered_taint_forms() {
        assert!(is_unregistered_taint("karpenter.sh/unregistered:NoExecute"));
        assert!(is_unregistered_taint(
            "karpenter.sh/unregistered=true:NoExecute"
        ));
        assert!(!is_unregistered_taint(
            "karpenter.sh/unregistered:NoSchedule"
        ));
        assert!(!is_unregistered_taint("karpenter.sh/unregistered"));
    }
}
