//! KK019: Kubespray variables that break the way Karpenter's nodes join: anonymous access
//! removed (no cluster-info for token discovery), or the API server name Karpenter's nodes use
//! missing from the apiserver certificate.

use std::collections::BTreeSet;
use std::net::IpAddr;

use kk_model::{FieldPath, Pos};
use serde_json::Value;

use crate::context::{Context, EmbeddedView};
use crate::diagnostic::{Diagnostic, Severity};
use crate::rule::{Rule, RuleMeta};
use crate::userdata;

pub const DOC: &str = r#"
## What
Reads the Kubespray variables (`group_vars.yml` in a Kubean vars ConfigMap) and reports:

- `remove_anonymous_access: true` (also the YAML 1.1 spellings Ansible reads as true, such as
  `yes` and `on`);
- an API server DNS name the linted set joins nodes to that the apiserver certificate will not
  carry. The names come from the Karpenter Helm values (`settings.clusterEndpoint`) and from
  `kubeadm join <host>:<port>` in EC2NodeClass userData (a `$VARIABLE` assigned in the script
  is followed; a JoinConfiguration's `apiServerEndpoint:` written by the script counts too). Each must be in `supplementary_addresses_in_ssl_keys` or equal
  `apiserver_loadbalancer_domain_name` (Kubespray's default `lb-apiserver.kubernetes.local`
  when unset); the names Kubespray always adds (`kubernetes`, `localhost`, the inventory names
  of `kube_control_plane` hosts and their `kube_override_hostname`) count too. IP addresses
  and names built from templates are not checked.

Findings point at the line inside the ConfigMap's `group_vars.yml` block.

## Why
Karpenter's nodes join with `kubeadm join --token ... --discovery-token-ca-cert-hash ...`.
Token discovery reads the `cluster-info` ConfigMap in `kube-public` anonymously. With
`remove_anonymous_access: true` Kubespray deletes that ConfigMap and the anonymous binding:
every Karpenter node fails discovery, never registers, and is terminated after 15 minutes,
launch after launch.

The kubelet and kubeadm verify the API server's certificate against the name they connect to.
Kubespray issues the certificate with its own list of SANs; a DNS name that is not in it (the
`clusterEndpoint` Karpenter gives nodes, the host in userData) makes every join fail with
`x509: certificate is valid for ..., not <name>`, and Karpenter's own API calls through that
name fail the same way.

## Example
```yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: demo-vars-conf
  namespace: kubean-system
data:
  group_vars.yml: |
    apiserver_loadbalancer_domain_name: lb.demo.internal
    supplementary_addresses_in_ssl_keys:
      - 10.0.0.10
    remove_anonymous_access: true
---
settings:
  clusterName: demo
  clusterEndpoint: https://api.demo.internal:6443   # not a SAN
controller: {}
```

## Fix
Keep `remove_anonymous_access: false` (Kubespray's default) while nodes join with token
discovery, or switch the join to file discovery (`kubeadm join --discovery-file`). Add the API
server name to the certificate:
```yaml
    supplementary_addresses_in_ssl_keys:
      - api.demo.internal
```
and re-run Kubespray (`cluster.yml`, or `upgrade-cluster.yml` with `-e
upgrade_cluster_setup=true`) so that it re-issues the apiserver certificate.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK019",
    name: "kubespray-join-vars",
    severity: Severity::Error,
    summary: "Kubespray vars that break kubeadm joins: remove_anonymous_access, or the API server name missing from the certificate SANs",
    doc: DOC,
    advice: None,
};

pub struct KubesprayJoinVars;

/// Kubespray's default `apiserver_loadbalancer_domain_name`.
const DEFAULT_LB_DOMAIN: &str = "lb-apiserver.kubernetes.local";

/// An API server host some object makes nodes (or Karpenter) connect to.
struct Endpoint {
    host: String,
    /// `settings.clusterEndpoint of KarpenterValues`.
    source: String,
}

impl Rule for KubesprayJoinVars {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        if ctx.group_vars.is_empty() {
            return;
        }
        for vars in &ctx.group_vars {
            anonymous_access(ctx, vars, out);
        }
        let endpoints = endpoints(ctx);
        if endpoints.is_empty() {
            return;
        }
        let cover: Vec<Option<BTreeSet<String>>> = ctx.group_vars.iter().map(sans).collect();
        // Templated SANs: cannot tell.
        if cover.iter().any(Option::is_none) {
            return;
        }
        let control_plane = control_plane_names(ctx);
        for endpoint in endpoints {
            let host = endpoint.host.to_ascii_lowercase();
            if control_plane.contains(&host)
                || cover.iter().flatten().any(|names| names.contains(&host))
            {
                continue;
            }
            for vars in &ctx.group_vars {
                out.push(missing_san(ctx, vars, &endpoint));
            }
        }
    }
}

fn truthy(value: &Value) -> bool {
    match value {
        Value::Bool(b) => *b,
        // Ansible's YAML is 1.1: these strings are booleans there.
        Value::String(s) => matches!(
            s.as_str(),
            "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "y" | "Y"
        ),
        _ => false,
    }
}

/// The file position of `path` inside an embedded document (already mapped onto the file).
fn pos(vars: &EmbeddedView<'_>, path: &FieldPath) -> Pos {
    vars.embedded.doc.pos(path)
}

fn anonymous_access(ctx: &Context<'_>, vars: &EmbeddedView<'_>, out: &mut Vec<Diagnostic>) {
    let path = FieldPath::root().key("remove_anonymous_access");
    let Some(value) = kk_model::yaml::get(&vars.embedded.doc.value, &path) else {
        return;
    };
    if !truthy(value) {
        return;
    }
    out.push(
        ctx.diag_at(
            &META,
            vars.obj,
            pos(vars, &path),
            format!(
                "remove_anonymous_access: {} in {}: Kubespray deletes the kube-public/cluster-info \
                 ConfigMap, so kubeadm token discovery fails for every Karpenter node and none \
                 ever joins",
                match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                },
                vars.embedded.key
            ),
        )
        .with_help(
            "set remove_anonymous_access: false (Kubespray's default), or join nodes with \
             kubeadm join --discovery-file instead of token discovery",
        ),
    );
}

/// The DNS names these vars put in the apiserver certificate (with Kubespray's fixed ones),
/// lowercased; `None` when a template makes them unknowable.
fn sans(vars: &EmbeddedView<'_>) -> Option<BTreeSet<String>> {
    let doc = &vars.embedded.doc.value;
    let mut names: BTreeSet<String> = [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "localhost",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    let dns_domain = match doc.get("dns_domain") {
        Some(Value::String(d)) => d.clone(),
        _ => "cluster.local".to_owned(),
    };
    names.insert(format!("kubernetes.default.svc.{dns_domain}"));
    match doc.get("apiserver_loadbalancer_domain_name") {
        None | Some(Value::Null) => {
            names.insert(DEFAULT_LB_DOMAIN.to_owned());
        }
        Some(Value::String(s)) if s.contains("{{") => return None,
        Some(Value::String(s)) => {
            names.insert(s.trim().to_ascii_lowercase());
        }
        Some(_) => {}
    }
    match doc.get("supplementary_addresses_in_ssl_keys") {
        Some(Value::Array(items)) => {
            for item in items {
                match item {
                    Value::String(s) if s.contains("{{") => return None,
                    Value::String(s) => {
                        names.insert(s.trim().to_ascii_lowercase());
                    }
                    _ => {}
                }
            }
        }
        Some(Value::String(s)) if s.contains("{{") => return None,
        _ => {}
    }
    Some(names)
}

/// Kubespray also puts the control plane hosts' inventory names and kube_override_hostname
/// into the certificate: those of every inventory, lowercased.
fn control_plane_names(ctx: &Context<'_>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for inventory in &ctx.inventories {
        let all = inventory.embedded.doc.value.get("all");
        let plane = all
            .and_then(|a| a.get("children"))
            .and_then(|c| c.get("kube_control_plane"))
            .and_then(|g| g.get("hosts"))
            .and_then(Value::as_object);
        for name in plane.into_iter().flat_map(|h| h.keys()) {
            names.insert(name.to_ascii_lowercase());
            let host_vars = all.and_then(|a| a.get("hosts")).and_then(|h| h.get(name));
            if let Some(Value::String(o)) = host_vars.and_then(|h| h.get("kube_override_hostname"))
            {
                names.insert(o.to_ascii_lowercase());
            }
        }
    }
    names
}

/// API server hosts from the Karpenter values and from `kubeadm join` in userData, first
/// source of each host kept.
fn endpoints(ctx: &Context<'_>) -> Vec<Endpoint> {
    let mut found: Vec<Endpoint> = Vec::new();
    let mut push = |host: Option<String>, source: String| {
        let Some(host) = host.filter(|h| is_dns_name(h)) else {
            return;
        };
        if !found.iter().any(|e| e.host.eq_ignore_ascii_case(&host)) {
            found.push(Endpoint { host, source });
        }
    };
    for values in &ctx.values {
        let endpoint = values
            .value(&FieldPath::parse("settings.clusterEndpoint"))
            .and_then(Value::as_str);
        if let Some(url) = endpoint {
            push(
                host_of(url),
                "settings.clusterEndpoint of the Karpenter values".into(),
            );
        }
    }
    for class in &ctx.node_classes {
        let Some(script) = class.class.spec.user_data.as_deref() else {
            continue;
        };
        if let Some(target) = join_target(script) {
            push(
                host_of(&target),
                format!(
                    "kubeadm join in the userData of EC2NodeClass {}",
                    class.name()
                ),
            );
        }
    }
    found
}

/// The API server endpoint argument of the first `kubeadm join` in `script`, with a
/// `$VARIABLE` resolved from an assignment in the script.
fn join_target(script: &str) -> Option<String> {
    let commands = userdata::commands(script);
    // A JoinConfiguration written by the script (`kubeadm join --config`).
    let configured = || {
        script.lines().find_map(|line| {
            let value = line.trim().strip_prefix("apiServerEndpoint:")?;
            let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
            (!value.is_empty() && !value.contains('$')).then(|| value.to_owned())
        })
    };
    let join = commands.iter().find_map(|cmd| {
        let words: Vec<&str> = cmd.text.split_whitespace().collect();
        let at = words
            .windows(2)
            .position(|w| w[0].ends_with("kubeadm") && w[1] == "join")?;
        // The endpoint is the positional argument right after `join`.
        let target = words.get(at + 2)?.trim_matches(|c| c == '"' || c == '\'');
        (!target.starts_with('-') && !target.is_empty()).then(|| target.to_owned())
    });
    let Some(join) = join else {
        return configured();
    };
    let Some(var) = join.strip_prefix('$') else {
        return Some(join);
    };
    let var = var.trim_start_matches('{').trim_end_matches('}');
    if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    commands.iter().rev().find_map(|cmd| {
        let text = cmd
            .text
            .trim_start_matches("export ")
            .trim_start_matches("readonly ")
            .trim_start_matches("local ");
        let value = text.strip_prefix(var)?.strip_prefix('=')?;
        let value = value.split_whitespace().next().unwrap_or_default();
        let value = value.trim_matches(|c| c == '"' || c == '\'');
        (!value.contains('$')).then(|| value.to_owned())
    })
}

/// The host of `https://host:6443/path`, `host:6443` or `[::1]:6443`.
fn host_of(endpoint: &str) -> Option<String> {
    let rest = endpoint
        .split_once("://")
        .map(|(_, r)| r)
        .unwrap_or(endpoint);
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority
        .rsplit_once('@')
        .map(|(_, h)| h)
        .unwrap_or(authority);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split_once(']').map(|(h, _)| h.to_owned());
    }
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => authority,
    };
    (!host.is_empty()).then(|| host.to_owned())
}

/// A DNS name we can compare: letters, digits, dots and hyphens, not an IP address.
fn is_dns_name(host: &str) -> bool {
    host.parse::<IpAddr>().is_err()
        && host.chars().any(|c| c.is_ascii_alphabetic())
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
}

fn missing_san(ctx: &Context<'_>, vars: &EmbeddedView<'_>, endpoint: &Endpoint) -> Diagnostic {
    let doc = &vars.embedded.doc;
    let supp = FieldPath::root().key("supplementary_addresses_in_ssl_keys");
    let lb = FieldPath::root().key("apiserver_loadbalancer_domain_name");
    let at = if kk_model::yaml::get(&doc.value, &supp).is_some() {
        doc.key_pos(&supp)
    } else if kk_model::yaml::get(&doc.value, &lb).is_some() {
        doc.pos(&lb)
    } else {
        doc.pos(&FieldPath::root())
    };
    let lb_name = match doc.value.get("apiserver_loadbalancer_domain_name") {
        Some(Value::String(s)) => s.clone(),
        _ => format!("{DEFAULT_LB_DOMAIN} by default"),
    };
    let host = &endpoint.host;
    ctx.diag_at(
        &META,
        vars.obj,
        at,
        format!(
            "API server name {host} ({}) is not in supplementary_addresses_in_ssl_keys and is not \
             apiserver_loadbalancer_domain_name ({lb_name}): the apiserver certificate will not \
             carry it and nodes joining {host} fail TLS verification",
            endpoint.source
        ),
    )
    .with_help(format!(
        "add {host} to supplementary_addresses_in_ssl_keys in {} and re-run Kubespray so it \
         re-issues the apiserver certificate",
        vars.embedded.key
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_endpoints() {
        assert_eq!(host_of("https://api.x:6443").as_deref(), Some("api.x"));
        assert_eq!(host_of("api.x:6443").as_deref(), Some("api.x"));
        assert_eq!(host_of("https://api.x/").as_deref(), Some("api.x"));
        assert_eq!(
            host_of("https://[fd00::1]:6443").as_deref(),
            Some("fd00::1")
        );
        assert_eq!(host_of("https://:6443"), None);
        assert!(!is_dns_name("10.0.0.1"));
        assert!(!is_dns_name("<KUBE_APISERVER_DNS_NAME>"));
        assert!(is_dns_name("api.demo.internal"));
    }

    #[test]
    fn join_targets_follow_variables() {
        let script = "#!/bin/bash\nAPI_SERVER_ENDPOINT='api.demo.internal:6443'\nkubeadm join \"$API_SERVER_ENDPOINT\" \\\n  --token \"$T\"\n";
        assert_eq!(
            join_target(script).as_deref(),
            Some("api.demo.internal:6443")
        );
        let direct = "kubeadm join https://api.x:6443 --token t\n";
        assert_eq!(join_target(direct).as_deref(), Some("https://api.x:6443"));
        assert_eq!(join_target("kubeadm join --config /etc/k.yaml\n"), None);
        let config = "cat >/etc/k.yaml <<EOF\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: \"api.y:6443\"\nEOF\nkubeadm join --config /etc/k.yaml\n";
        assert_eq!(join_target(config).as_deref(), Some("api.y:6443"));
        assert_eq!(join_target("kubeadm join \"${EP}\"\n"), None);
        assert_eq!(join_target("echo hi\n"), None);
    }
}
