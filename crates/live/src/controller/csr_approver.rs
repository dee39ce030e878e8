//! The node-client CSR approver: a join token alone no longer makes a node.
//!
//! kubeadm's blanket auto-approval signs `system:node:<any name>` for whoever holds a token
//! in kubeadm's group. Our tokens are in [`JOIN_TOKEN_GROUP`] instead, which nothing
//! auto-approves; this approver (run by the leader, next to the rotator) decides each
//! pending CSR whose requester is in that group:
//!
//! - approved only for signer `kubernetes.io/kube-apiserver-client-kubelet`, subject exactly
//!   `O=system:nodes, CN=system:node:<name>` and no extensions, an ECDSA P-256 key with
//!   usages {digital signature, client auth} (an RSA key may add key encipherment): what
//!   the kubelet's TLS bootstrap sends;
//! - `<name>` must be an instance a NodeClaim's `status.providerID` names (our userData
//!   names nodes by instance ID), with no Node of that name yet, and no certificate for it
//!   approved before; the CSR must be younger than that NodeClaim;
//! - it must be the **only** pending CSR of ours naming that instance. A join token can list
//!   and watch CSRs, so its holder can answer a real kubelet's CSR with its own for the same
//!   name; "first come" would then hand the node's identity (and the pods Karpenter launched
//!   it for) to whoever sorts first. When two or more ask for one name, all of them are
//!   denied, reported, and the name stays contested: later CSRs for it are denied too
//!   (the instance never joins and Karpenter replaces it: a denial of service, not a takeover);
//! - every other kubelet-client CSR from that group is denied, with the reason in the CSR's
//!   condition.
//!
//! CSRs for other signers (kubelet serving certificates among them) are never ours: the
//! approver's RBAC may approve or deny only for the kubelet client signer, so it cannot sign
//! off a serving certificate even if it wanted to (Kubespray brings its own serving-CSR
//! approver when `kubelet_rotate_server_certificates` is on).
//!
//! CSRs from anyone else (Kubespray's own joins in kubeadm's group, kubelet renewals by
//! `system:node:*`) are left alone.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kk_spec::names::instance_id;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use x509_cert::der::asn1::ObjectIdentifier;
use x509_cert::der::{DecodePem, Tag, Tagged};
use x509_cert::request::CertReq;

use crate::token::{JOIN_TOKEN_GROUP, TokenError};

/// The signer kubelet client certificates (TLS bootstrap) are requested from.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Condition reasons we write (the message says why).
pub const APPROVED_REASON: &str = "KubeanKarpenterNodeClaim";
pub const DENIED_REASON: &str = "KubeanKarpenterRefused";
/// Denied because more than one CSR asked for the same node: the name is then contested.
pub const CONTESTED_REASON: &str = "KubeanKarpenterContested";

const OID_CN: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
const OID_O: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.10");
const OID_EC: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const OID_P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const OID_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approve(String),
    Deny(String),
    /// Denied because several CSRs asked for one node name (reported, and the name blocked).
    Contested(String),
}

impl Decision {
    /// The CSR condition type and reason this decision writes (also the metric's labels).
    pub fn condition(&self) -> (&'static str, &'static str) {
        match self {
            Decision::Approve(_) => ("Approved", APPROVED_REASON),
            Decision::Deny(_) => ("Denied", DENIED_REASON),
            Decision::Contested(_) => ("Denied", CONTESTED_REASON),
        }
    }

    /// Why, as written into the condition's message.
    pub fn message(&self) -> &str {
        match self {
            Decision::Approve(m) | Decision::Deny(m) | Decision::Contested(m) => m,
        }
    }
}

/// What the approver knows about the cluster when deciding.
#[derive(Debug, Default, Clone)]
pub struct Known {
    /// Instance IDs named by NodeClaims' `status.providerID`, with the NodeClaim's creation time.
    pub claimed_instances: BTreeMap<String, jiff::Timestamp>,
    /// Names of existing Nodes.
    pub nodes: BTreeSet<String>,
    /// Node names a client certificate was already approved for.
    pub approved: BTreeSet<String>,
    /// How many pending CSRs of ours ask for each node name (valid or not).
    pub pending_per_name: BTreeMap<String, usize>,
    /// Node names once asked for by competing CSRs (denied with [`CONTESTED_REASON`]).
    pub contested: BTreeSet<String>,
}

fn is_settled(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| matches!(c.type_.as_str(), "Approved" | "Denied" | "Failed"))
        })
}

fn is_approved(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Approved"))
}

fn is_contested(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Denied" && c.reason.as_deref() == Some(CONTESTED_REASON))
        })
}

/// True when a join-token holder of ours asked (the only CSRs this approver decides).
pub fn is_ours(csr: &CertificateSigningRequest) -> bool {
    csr.spec
        .groups
        .as_ref()
        .is_some_and(|g| g.iter().any(|g| g == JOIN_TOKEN_GROUP))
}

fn text_value(any: &x509_cert::der::Any) -> Option<String> {
    match any.tag() {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String => {
            String::from_utf8(any.value().to_vec()).ok()
        }
        _ => None,
    }
}

/// The node name a kubelet client CSR asks for, after checking its subject, extensions and
/// key are what the kubelet sends. `Err` says what is wrong.
fn requested_node(request_pem: &[u8], usages: &[String]) -> Result<String, String> {
    let req = CertReq::from_pem(request_pem)
        .map_err(|e| format!("the request is not a PEM certificate request: {e}"))?;
    let info = &req.info;
    let mut cn = Vec::new();
    let mut orgs = Vec::new();
    for rdn in info.subject.0.iter() {
        for atv in rdn.0.iter() {
            let value = text_value(&atv.value)
                .ok_or_else(|| "the subject holds a value that is not text".to_owned())?;
            if atv.oid == OID_CN {
                cn.push(value);
            } else if atv.oid == OID_O {
                orgs.push(value);
            } else {
                return Err(format!(
                    "the subject carries attribute {} (a kubelet sends only O and CN)",
                    atv.oid
                ));
            }
        }
    }
    if orgs != ["system:nodes"] {
        return Err(format!(
            "the subject's organizations are {orgs:?}, not exactly [\"system:nodes\"]"
        ));
    }
    let [cn] = cn.as_slice() else {
        return Err("the subject needs exactly one common name".into());
    };
    let name = cn
        .strip_prefix("system:node:")
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("the common name {cn:?} is not system:node:<name>"))?;
    if !info.attributes.is_empty() {
        return Err(
            "the request carries attributes or extensions (e.g. SANs); a kubelet client request has none"
                .into(),
        );
    }
    let key = &info.public_key.algorithm;
    let rsa = if key.oid == OID_EC {
        let curve = key
            .parameters
            .as_ref()
            .and_then(|p| p.decode_as::<ObjectIdentifier>().ok());
        if curve != Some(OID_P256) {
            return Err("the ECDSA key is not on P-256 (the kubelet's curve)".into());
        }
        false
    } else if key.oid == OID_RSA {
        true
    } else {
        return Err(format!(
            "the key algorithm {} is neither ECDSA P-256 nor RSA",
            key.oid
        ));
    };
    let got: BTreeSet<&str> = usages.iter().map(String::as_str).collect();
    let base = BTreeSet::from(["client auth", "digital signature"]);
    let with_ke = BTreeSet::from(["client auth", "digital signature", "key encipherment"]);
    if got != base && !(rsa && got == with_ke) {
        return Err(format!(
            "usages {got:?} are not the kubelet's (digital signature, client auth{})",
            if rsa {
                "; key encipherment allowed for RSA"
            } else {
                ""
            }
        ));
    }
    Ok(name.to_owned())
}

/// What to do with one CSR: `None` when it is not ours to decide (someone else's, or settled).
pub fn decide(csr: &CertificateSigningRequest, known: &Known) -> Option<Decision> {
    if is_settled(csr) || !is_ours(csr) || csr.spec.signer_name != KUBELET_CLIENT_SIGNER {
        return None;
    }
    let deny = |m: String| Some(Decision::Deny(m));
    let spec = &csr.spec;
    let user = spec.username.as_deref().unwrap_or("");
    if !user.starts_with("system:bootstrap:") {
        return deny(format!(
            "{user:?} is in {JOIN_TOKEN_GROUP} but is not a bootstrap token"
        ));
    }
    // A race first: a competing CSR (even a malformed one) proves that someone besides the
    // instance knows its name and holds a join token, so no CSR for that name is approved.
    if let Some(name) = requested_cn(csr)
        .as_deref()
        .and_then(|cn| cn.strip_prefix("system:node:"))
    {
        let competing = known.pending_per_name.get(name).copied().unwrap_or(0);
        if competing > 1 {
            return Some(Decision::Contested(format!(
                "{competing} pending CSRs ask for system:node:{name}: a join-token holder may be \
                 racing the instance's kubelet, so none is approved and the name stays refused"
            )));
        }
        if known.contested.contains(name) {
            return Some(Decision::Contested(format!(
                "system:node:{name} was asked for by competing CSRs before: it is never approved"
            )));
        }
    }
    let usages = spec.usages.clone().unwrap_or_default();
    let name = match requested_node(&spec.request.0, &usages) {
        Ok(name) => name,
        Err(why) => return deny(why),
    };
    if known.nodes.contains(&name) {
        return deny(format!(
            "a Node named {name} already exists: a join token cannot take over an existing node's identity"
        ));
    }
    if known.approved.contains(&name) {
        return deny(format!(
            "a client certificate for system:node:{name} was already approved"
        ));
    }
    let Some(claimed_at) = known.claimed_instances.get(&name) else {
        return deny(format!(
            "no NodeClaim's providerID names instance {name}: only instances Karpenter launched join with this token"
        ));
    };
    if let Some(filed) = &csr.metadata.creation_timestamp
        && filed.0 < *claimed_at
    {
        return deny(format!(
            "the CSR was filed at {} before the NodeClaim naming instance {name} was created ({claimed_at})",
            filed.0
        ));
    }
    Some(Decision::Approve(format!(
        "a NodeClaim names instance {name} and no Node has that name yet"
    )))
}

pub(crate) fn nodeclaims_api(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

/// The common name of a CSR's request, when it parses (for "already approved").
fn requested_cn(csr: &CertificateSigningRequest) -> Option<String> {
    let req = CertReq::from_pem(&csr.spec.request.0).ok()?;
    req.info
        .subject
        .0
        .iter()
        .flat_map(|rdn| rdn.0.iter())
        .find(|atv| atv.oid == OID_CN)
        .and_then(|atv| text_value(&atv.value))
}

/// One pass: decides every pending CSR of ours, writes the decision into its approval
/// subresource and returns `(csr name, decision)` for each.
pub async fn approve_pending(client: &Client) -> Result<Vec<(String, Decision)>, TokenError> {
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let list = csrs
        .list(&ListParams::default())
        .await
        .map_err(|e| TokenError::from_kube("list CertificateSigningRequests", e))?;
    let pending: Vec<_> = list
        .items
        .iter()
        .filter(|c| is_ours(c) && !is_settled(c) && c.spec.signer_name == KUBELET_CLIENT_SIGNER)
        .collect();
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let mut known = Known::default();
    let node_of = |csr: &CertificateSigningRequest| {
        requested_cn(csr).and_then(|cn| cn.strip_prefix("system:node:").map(str::to_owned))
    };
    for csr in list
        .items
        .iter()
        .filter(|c| c.spec.signer_name == KUBELET_CLIENT_SIGNER)
    {
        let Some(name) = node_of(csr) else { continue };
        if is_approved(csr) {
            known.approved.insert(name);
        } else if is_contested(csr) {
            known.contested.insert(name);
        }
    }
    for csr in pending.iter().copied() {
        if let Some(name) = node_of(csr) {
            *known.pending_per_name.entry(name).or_default() += 1;
        }
    }
    let claims = nodeclaims_api(client)
        .list(&ListParams::default())
        .await
        .map_err(|e| TokenError::from_kube("list NodeClaims", e))?;
    for claim in &claims.items {
        if let Some(id) = claim.data["status"]["providerID"]
            .as_str()
            .and_then(instance_id)
        {
            let created = claim
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(jiff::Timestamp::MAX, |t| t.0);
            known.claimed_instances.insert(id.to_owned(), created);
        }
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let mut decided = Vec::new();
    for csr in pending {
        let name = csr.metadata.name.clone().unwrap_or_default();
        // The Node check is a fresh get (a Node may have registered since the last pass).
        if let Some(node) = requested_cn(csr)
            .as_deref()
            .and_then(|cn| cn.strip_prefix("system:node:"))
            && !node.is_empty()
            && nodes
                .get_opt(node)
                .await
                .map_err(|e| TokenError::from_kube(format!("get Node {node}"), e))?
                .is_some()
        {
            known.nodes.insert(node.to_owned());
        }
        let Some(decision) = decide(csr, &known) else {
            continue;
        };
        let (type_, reason) = decision.condition();
        let message = decision.message().to_owned();
        if let Decision::Contested(why) = &decision {
            tracing::warn!(csr = %name, requester = csr.spec.username.as_deref().unwrap_or(""), why = %why, "competing node CSRs: a join token may be in the wrong hands");
        }
        let mut updated = csr.clone();
        let status = updated.status.get_or_insert_with(Default::default);
        status
            .conditions
            .get_or_insert_with(Vec::new)
            .push(CertificateSigningRequestCondition {
                type_: type_.to_owned(),
                status: "True".to_owned(),
                reason: Some(reason.to_owned()),
                message: Some(message.clone()),
                last_update_time: Some(Time(jiff::Timestamp::now())),
                ..Default::default()
            });
        csrs.replace_subresource("approval", &name, &PostParams::default(), &updated)
            .await
            .map_err(|e| TokenError::from_kube(format!("{type_} CSR {name}"), e))?;
        if let Decision::Approve(_) = decision
            && let Some(node) =
                requested_cn(csr).and_then(|cn| cn.strip_prefix("system:node:").map(str::to_owned))
        {
            known.approved.insert(node);
        }
        tracing::info!(csr = %name, requester = csr.spec.username.as_deref().unwrap_or(""), decision = type_, why = %message, "decided a node CSR");
        decided.push((name, decision));
    }
    Ok(decided)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(groups: &[&str], user: &str, signer: &str) -> CertificateSigningRequest {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "c" },
            "spec": {
                "request": "",
                "signerName": signer,
                "username": user,
                "groups": groups,
                "usages": ["digital signature", "client auth"],
            }
        }))
        .unwrap()
    }

    #[test]
    fn only_our_groups_pending_csrs_are_decided() {
        let known = Known::default();
        let theirs = csr(
            &[
                "system:bootstrappers",
                "system:bootstrappers:kubeadm:default-node-token",
            ],
            "system:bootstrap:abcdef",
            KUBELET_CLIENT_SIGNER,
        );
        assert_eq!(decide(&theirs, &known), None);
        let not_a_token = csr(&[JOIN_TOKEN_GROUP], "mallory", KUBELET_CLIENT_SIGNER);
        assert!(
            matches!(decide(&not_a_token, &known), Some(Decision::Deny(m)) if m.contains("not a bootstrap token"))
        );
        let serving = csr(
            &[JOIN_TOKEN_GROUP],
            "system:bootstrap:abcdef",
            "kubernetes.io/kubelet-serving",
        );
        // Not ours to decide (and the approver's RBAC could not).
        assert_eq!(decide(&serving, &known), None);
        let garbage = csr(
            &[JOIN_TOKEN_GROUP],
            "system:bootstrap:abcdef",
            KUBELET_CLIENT_SIGNER,
        );
        assert!(matches!(decide(&garbage, &known), Some(Decision::Deny(m)) if m.contains("PEM")));
    }
}
