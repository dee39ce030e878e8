//! The node-client CSR approver: a join token alone no longer makes a node.
//!
//! kubeadm's blanket auto-approval signs `system:node:<any name>` for whoever holds a token
//! in kubeadm's group. Our tokens are in [`JOIN_TOKEN_GROUP`] instead, which nothing
//! auto-approves; this approver (run by the leader, next to the rotator) decides each
//! pending CSR whose requester is in that group:
//!
//! - the requested name must be an EC2 instance ID (`i-` + 8 to 17 lowercase hex digits: our
//!   userData names nodes so). Any other name is denied **first**, before any API call is
//!   built from it: a name with a space or a slash is no valid URL path segment, and one such
//!   CSR once made every pass fail before it decided anything;
//! - approved only for signer `kubernetes.io/kube-apiserver-client-kubelet`, subject exactly
//!   `O=system:nodes, CN=system:node:<name>` and no extensions, an ECDSA P-256 key with
//!   usages {digital signature, client auth} (an RSA key may add key encipherment): what
//!   the kubelet's TLS bootstrap sends;
//! - `<name>` must be the instance of a **live** NodeClaim: one whose `status.providerID`
//!   names it, that is not being deleted, has no node yet (no `status.nodeName`, its
//!   `Registered` condition not True) and was created before the CSR; no Node of that name
//!   may exist, and no certificate may have been approved for that instance before;
//! - it must be the **only** pending CSR of ours naming that instance. A join token can list
//!   and watch CSRs, so its holder can answer a real kubelet's CSR with its own for the same
//!   name; "first come" would then hand the node's identity (and the pods Karpenter launched
//!   it for) to whoever sorts first. When two or more ask for one name, all of them are
//!   denied, reported, and the name stays contested: later CSRs for it are denied too
//!   (the instance never joins and Karpenter replaces it: a denial of service, not a takeover);
//! - every other kubelet-client CSR from that group is denied, with the reason in the CSR's
//!   condition, a Warning Event on the CSR and `kubean_karpenter_csr_denied_total{reason}`
//!   (one of the fixed [`Refusal`] labels).
//!
//! **The record of approvals.** "Approved before" cannot be read from CSR objects alone:
//! kube-controller-manager's cleaner deletes an approved CSR about an hour after approval,
//! and a token holder who then files a CSR for the same instance would be judged afresh. So
//! the approver keeps a record that outlives the CSRs: the ConfigMap
//! [`CSR_APPROVALS_CONFIGMAP`] in its Lease's namespace (kube-system), one key per instance
//! ID holding the approved CSR's UID and name, when, and since when no NodeClaim names the
//! instance. A ConfigMap rather than an annotation on the NodeClaim: the NodeClaim is
//! Karpenter's object (the approver would need write access to every NodeClaim, and the
//! record would vanish with the NodeClaim, exactly when a finalizing claim's instance is most
//! at risk), while the ConfigMap is the approver's own, reachable by its RBAC only by name,
//! and lives in kube-system, where only cluster administrators write. The entry is written
//! **before** the approval call (fail closed): if the approval call then fails, only the same
//! CSR (same UID) may still be approved; any other CSR for that instance is denied. Writes
//! carry the ConfigMap's resourceVersion, so two approvers (a leader change mid-pass) cannot
//! both record one instance. An entry is pruned only once no NodeClaim has named its instance
//! for [`PRUNE_AFTER`]. Without a readable record nothing is approved (denials go on).
//!
//! **One CSR never stops the others.** Each CSR is decided on its own; every API call has a
//! timeout ([`CALL_TIMEOUT`]); a failed call is collected in [`Pass::errors`] (counted and
//! logged by the caller) and the pass goes on with the next CSR; the undecided CSR stays
//! pending for the next pass.
//!
//! CSRs for other signers (kubelet serving certificates among them) are never ours: the
//! approver's RBAC may approve or deny only for the kubelet client signer, so it cannot sign
//! off a serving certificate even if it wanted to (Kubespray brings its own serving-CSR
//! approver when `kubelet_rotate_server_certificates` is on).
//!
//! CSRs from anyone else (Kubespray's own joins in kubeadm's group, kubelet renewals by
//! `system:node:*`) are left alone.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::api::core::v1::{ConfigMap, Event, EventSource, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kk_spec::names::{CSR_APPROVALS_CONFIGMAP, instance_id, is_instance_name};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use x509_cert::der::asn1::ObjectIdentifier;
use x509_cert::der::{DecodePem, Tag, Tagged};
use x509_cert::request::CertReq;

use crate::kube_error::KubeCallError;
use crate::token::{JOIN_TOKEN_GROUP, TokenError};

/// The signer kubelet client certificates (TLS bootstrap) are requested from.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Condition reasons we write (the message says why).
pub const APPROVED_REASON: &str = "KubeanKarpenterNodeClaim";
pub const DENIED_REASON: &str = "KubeanKarpenterRefused";
/// Denied because more than one CSR asked for the same node: the name is then contested.
pub const CONTESTED_REASON: &str = "KubeanKarpenterContested";
/// Where the Events on CSRs go (CSRs are cluster-scoped; like the orphan sweep's on Nodes).
pub const EVENT_NAMESPACE: &str = "default";
/// Every API call of a pass gives up after this long (the CSR it was for waits a pass).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// A pass starts no new CSR after this long; the rest wait for the next pass.
pub const PASS_BUDGET: Duration = Duration::from_secs(60);
/// The longest a pass can take: its budget, the CSR under way (four calls) and the prune.
pub const PASS_LIMIT: Duration = Duration::from_secs(60 + 6 * 10);
/// A record entry goes once no NodeClaim has named its instance for this long: longer than
/// a pending CSR lives (24 h, kube-controller-manager's cleaner), so every CSR filed while
/// the claim existed is gone before the entry is. EC2 never reuses an instance ID.
pub const PRUNE_AFTER: Duration = Duration::from_secs(24 * 3600);

const OID_CN: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
const OID_O: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.10");
const OID_EC: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const OID_P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const OID_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");

/// Why a CSR was denied: the `reason` label of `kubean_karpenter_csr_denied_total`, a fixed
/// set (the CSR's condition message says the rest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// The requester is in our join group but is no bootstrap token.
    NotBootstrapToken,
    /// Subject, extensions, key or usages are not what a kubelet sends.
    MalformedRequest,
    /// The requested name is no EC2 instance ID.
    InvalidName,
    /// Several CSRs asked for one name (or did before).
    Contested,
    /// A Node of that name exists.
    NodeExists,
    /// A certificate for that instance was approved before (record or CSR object).
    ApprovedBefore,
    /// No NodeClaim names the instance.
    NoClaim,
    /// The instance's NodeClaim is being deleted or already has its node.
    ClaimFinished,
    /// The CSR is older than the NodeClaim naming its instance.
    FiledBeforeClaim,
}

impl Refusal {
    /// Every refusal, in the order the metric lists them.
    pub const ALL: [Refusal; 9] = [
        Refusal::NotBootstrapToken,
        Refusal::MalformedRequest,
        Refusal::InvalidName,
        Refusal::Contested,
        Refusal::NodeExists,
        Refusal::ApprovedBefore,
        Refusal::NoClaim,
        Refusal::ClaimFinished,
        Refusal::FiledBeforeClaim,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::NotBootstrapToken => "not_bootstrap_token",
            Refusal::MalformedRequest => "malformed_request",
            Refusal::InvalidName => "invalid_name",
            Refusal::Contested => "contested",
            Refusal::NodeExists => "node_exists",
            Refusal::ApprovedBefore => "approved_before",
            Refusal::NoClaim => "no_claim",
            Refusal::ClaimFinished => "claim_finished",
            Refusal::FiledBeforeClaim => "filed_before_claim",
        }
    }

    /// Judged against the NodeClaims: not to be given when they could not be listed.
    fn needs_claims(self) -> bool {
        matches!(
            self,
            Refusal::NoClaim | Refusal::ClaimFinished | Refusal::FiledBeforeClaim
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approve(String),
    Deny(Refusal, String),
}

impl Decision {
    /// The CSR condition type and reason this decision writes (also the metric's labels).
    pub fn condition(&self) -> (&'static str, &'static str) {
        match self {
            Decision::Approve(_) => ("Approved", APPROVED_REASON),
            Decision::Deny(Refusal::Contested, _) => ("Denied", CONTESTED_REASON),
            Decision::Deny(..) => ("Denied", DENIED_REASON),
        }
    }

    /// Why, as written into the condition's message.
    pub fn message(&self) -> &str {
        match self {
            Decision::Approve(m) | Decision::Deny(_, m) => m,
        }
    }

    /// The refusal, when denied.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            Decision::Approve(_) => None,
            Decision::Deny(r, _) => Some(*r),
        }
    }
}

/// What the approver knows of one instance's NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub created: jiff::Timestamp,
    /// `metadata.deletionTimestamp` is set (it may stay a while for Karpenter's finalizer).
    pub deleting: bool,
    /// `status.nodeName`, when set.
    pub node_name: Option<String>,
    /// The `Registered` condition is True.
    pub registered: bool,
}

impl Claim {
    /// The instance a NodeClaim names and what it says of it (`None` without an instance).
    pub fn from_object(claim: &DynamicObject) -> Option<(String, Claim)> {
        let status = &claim.data["status"];
        let id = status["providerID"].as_str().and_then(instance_id)?;
        let registered = status["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Registered" && c["status"] == "True")
        });
        let claim = Claim {
            created: claim
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(jiff::Timestamp::MAX, |t| t.0),
            deleting: claim.metadata.deletion_timestamp.is_some(),
            node_name: status["nodeName"]
                .as_str()
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
            registered,
        };
        Some((id.to_owned(), claim))
    }

    /// Two claims naming one instance (never in a healthy cluster): the least live of both.
    fn merge(self, other: Claim) -> Claim {
        Claim {
            created: self.created.max(other.created),
            deleting: self.deleting || other.deleting,
            node_name: self.node_name.or(other.node_name),
            registered: self.registered || other.registered,
        }
    }
}

/// One entry of the record of approvals (the ConfigMap's value for an instance ID).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// The approved CSR's UID (a retry of that CSR may be approved again).
    pub uid: String,
    pub csr: String,
    pub at: jiff::Timestamp,
    /// Since when no NodeClaim names the instance (the entry goes [`PRUNE_AFTER`] later).
    pub claim_gone_since: Option<jiff::Timestamp>,
}

impl Approval {
    fn encode(&self) -> String {
        serde_json::json!({
            "uid": self.uid,
            "csr": self.csr,
            "approvedAt": self.at.to_string(),
            "claimGoneSince": self.claim_gone_since.map(|t| t.to_string()),
        })
        .to_string()
    }

    /// An entry that does not parse still counts as an approval (with no UID, so no CSR
    /// matches it): the record fails closed.
    fn decode(value: &str) -> Approval {
        let v: serde_json::Value = serde_json::from_str(value).unwrap_or_default();
        let time = |k: &str| {
            v[k].as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        };
        Approval {
            uid: v["uid"].as_str().unwrap_or_default().to_owned(),
            csr: v["csr"].as_str().unwrap_or_default().to_owned(),
            at: time("approvedAt").unwrap_or(jiff::Timestamp::UNIX_EPOCH),
            claim_gone_since: time("claimGoneSince"),
        }
    }
}

/// The record as stored: instance ID -> entry.
pub fn read_record(map: &ConfigMap) -> BTreeMap<String, Approval> {
    map.data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), Approval::decode(v)))
        .collect()
}

/// The record after a pass that saw NodeClaims naming `claimed`: entries of claimed
/// instances lose their "gone since", others get it (now), and those gone for longer than
/// [`PRUNE_AFTER`] are dropped. `None` when nothing changes.
pub fn prune(
    record: &BTreeMap<String, Approval>,
    claimed: &BTreeSet<String>,
    now: jiff::Timestamp,
) -> Option<BTreeMap<String, Approval>> {
    let mut out = BTreeMap::new();
    for (id, entry) in record {
        let mut entry = entry.clone();
        if claimed.contains(id) {
            entry.claim_gone_since = None;
        } else {
            let since = *entry.claim_gone_since.get_or_insert(now);
            if now.duration_since(since).as_secs_f64() > PRUNE_AFTER.as_secs_f64() {
                continue;
            }
        }
        out.insert(id.clone(), entry);
    }
    (out != *record).then_some(out)
}

/// What the approver knows about the cluster when deciding.
#[derive(Debug, Default, Clone)]
pub struct Known {
    /// NodeClaims by the instance their `status.providerID` names.
    pub claims: BTreeMap<String, Claim>,
    /// Names of existing Nodes.
    pub nodes: BTreeSet<String>,
    /// Node names an approved CSR object (still there) asked for.
    pub approved: BTreeSet<String>,
    /// The record of approvals: instances approved before, even after their CSR is gone.
    pub record: BTreeMap<String, Approval>,
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

/// The node name of a CSR's common name (`system:node:<name>`), when it parses.
fn cn_node(csr: &CertificateSigningRequest) -> Option<String> {
    requested_cn(csr).and_then(|cn| cn.strip_prefix("system:node:").map(str::to_owned))
}

/// What to do with one CSR: `None` when it is not ours to decide (someone else's, or settled).
pub fn decide(csr: &CertificateSigningRequest, known: &Known) -> Option<Decision> {
    if is_settled(csr) || !is_ours(csr) || csr.spec.signer_name != KUBELET_CLIENT_SIGNER {
        return None;
    }
    let deny = |r: Refusal, m: String| Some(Decision::Deny(r, m));
    let spec = &csr.spec;
    let user = spec.username.as_deref().unwrap_or("");
    if !user.starts_with("system:bootstrap:") {
        return deny(
            Refusal::NotBootstrapToken,
            format!("{user:?} is in {JOIN_TOKEN_GROUP} but is not a bootstrap token"),
        );
    }
    let cn_name = cn_node(csr);
    // A name that is no instance ID is refused before anything else looks at it (and before
    // any API call could be built from it).
    if let Some(name) = cn_name.as_deref()
        && !is_instance_name(name)
    {
        return deny(
            Refusal::InvalidName,
            format!(
                "{name:?} is not an EC2 instance ID (i- and 8 to 17 lowercase hex digits), the only names our nodes join under"
            ),
        );
    }
    // A race next: a competing CSR (even a malformed one) proves that someone besides the
    // instance knows its name and holds a join token, so no CSR for that name is approved.
    if let Some(name) = cn_name.as_deref() {
        let competing = known.pending_per_name.get(name).copied().unwrap_or(0);
        if competing > 1 {
            return deny(
                Refusal::Contested,
                format!(
                    "{competing} pending CSRs ask for system:node:{name}: a join-token holder may be \
                     racing the instance's kubelet, so none is approved and the name stays refused"
                ),
            );
        }
        if known.contested.contains(name) {
            return deny(
                Refusal::Contested,
                format!(
                    "system:node:{name} was asked for by competing CSRs before: it is never approved"
                ),
            );
        }
    }
    let usages = spec.usages.clone().unwrap_or_default();
    let name = match requested_node(&spec.request.0, &usages) {
        Ok(name) if is_instance_name(&name) => name,
        Ok(name) => {
            return deny(
                Refusal::InvalidName,
                format!("{name:?} is not an EC2 instance ID"),
            );
        }
        Err(why) => return deny(Refusal::MalformedRequest, why),
    };
    if known.nodes.contains(&name) {
        return deny(
            Refusal::NodeExists,
            format!(
                "a Node named {name} already exists: a join token cannot take over an existing node's identity"
            ),
        );
    }
    if let Some(before) = known.record.get(&name)
        && csr.metadata.uid.as_deref() != Some(before.uid.as_str())
    {
        return deny(
            Refusal::ApprovedBefore,
            format!(
                "a client certificate for system:node:{name} was already approved (CSR {}, {}): an instance gets one identity",
                before.csr, before.at
            ),
        );
    }
    if known.approved.contains(&name) {
        return deny(
            Refusal::ApprovedBefore,
            format!("a client certificate for system:node:{name} was already approved"),
        );
    }
    let Some(claim) = known.claims.get(&name) else {
        return deny(
            Refusal::NoClaim,
            format!(
                "no NodeClaim's providerID names instance {name}: only instances Karpenter launched join with this token"
            ),
        );
    };
    if claim.deleting {
        return deny(
            Refusal::ClaimFinished,
            format!(
                "the NodeClaim naming instance {name} is being deleted: its instance is going, it gets no new identity"
            ),
        );
    }
    if let Some(node) = &claim.node_name {
        return deny(
            Refusal::ClaimFinished,
            format!(
                "the NodeClaim naming instance {name} already has its node ({node}): the instance joined before"
            ),
        );
    }
    if claim.registered {
        return deny(
            Refusal::ClaimFinished,
            format!(
                "the NodeClaim naming instance {name} is already Registered: the instance joined before"
            ),
        );
    }
    if let Some(filed) = &csr.metadata.creation_timestamp
        && filed.0 < claim.created
    {
        return deny(
            Refusal::FiledBeforeClaim,
            format!(
                "the CSR was filed at {} before the NodeClaim naming instance {name} was created ({})",
                filed.0, claim.created
            ),
        );
    }
    Some(Decision::Approve(format!(
        "a NodeClaim names instance {name}, is not being deleted and has no node yet, and no certificate was approved for it before"
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

/// What went wrong in a pass; none of these stops it (the CSR concerned waits a pass).
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// An API call for one CSR failed or timed out.
    #[error("CSR {csr}: {source}")]
    Call { csr: String, source: KubeCallError },
    /// A CSR was not decided because something it depends on is unknown this pass.
    #[error("CSR {csr} left pending: {why}")]
    LeftPending { csr: String, why: &'static str },
    /// Reading what the decisions depend on, or pruning the record, failed.
    #[error("{0}")]
    State(KubeCallError),
}

/// What one pass did: each decided CSR with its decision, and what failed.
#[derive(Debug, Default)]
pub struct Pass {
    pub decided: Vec<(String, Decision)>,
    pub errors: Vec<PassError>,
}

/// One API call with [`CALL_TIMEOUT`].
async fn call<T>(
    what: impl Into<String>,
    request: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, KubeCallError> {
    match tokio::time::timeout(CALL_TIMEOUT, request).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(KubeCallError::from_kube(what, e)),
        Err(_) => Err(KubeCallError::Unreachable {
            call: what.into(),
            detail: format!("no answer within {} s", CALL_TIMEOUT.as_secs()),
        }),
    }
}

/// Why recording an approval did not happen.
enum RecordError {
    /// Another CSR of that instance is in the record (another approver, or a race).
    Taken(Approval),
    Call(KubeCallError),
}

/// Writes `approval` for `instance` into the record unless another CSR holds it (optimistic
/// concurrency on the ConfigMap; a conflict is read again, up to three times).
async fn record_approval(
    maps: &Api<ConfigMap>,
    instance: &str,
    approval: &Approval,
) -> Result<(), RecordError> {
    let what =
        || format!("record the approval of {instance} in ConfigMap {CSR_APPROVALS_CONFIGMAP}");
    for _ in 0..3 {
        let mut map = call(what(), maps.get(CSR_APPROVALS_CONFIGMAP))
            .await
            .map_err(RecordError::Call)?;
        let data = map.data.get_or_insert_with(Default::default);
        if let Some(before) = data.get(instance).map(|v| Approval::decode(v)) {
            return if before.uid == approval.uid {
                Ok(())
            } else {
                Err(RecordError::Taken(before))
            };
        }
        data.insert(instance.to_owned(), approval.encode());
        match call(
            what(),
            maps.replace(CSR_APPROVALS_CONFIGMAP, &PostParams::default(), &map),
        )
        .await
        {
            Ok(_) => return Ok(()),
            Err(e) if e.code() == Some(409) => continue,
            Err(e) => return Err(RecordError::Call(e)),
        }
    }
    Err(RecordError::Call(KubeCallError::Refused {
        call: what(),
        code: 409,
        reason: "Conflict".into(),
        message: "the record changed under every one of three writes".into(),
    }))
}

/// Drops the entries [`prune`] says may go (one write; a conflict waits for the next pass).
async fn prune_record(
    maps: &Api<ConfigMap>,
    claimed: &BTreeSet<String>,
) -> Result<(), KubeCallError> {
    let what = format!("prune ConfigMap {CSR_APPROVALS_CONFIGMAP}");
    let mut map = call(what.clone(), maps.get(CSR_APPROVALS_CONFIGMAP)).await?;
    let Some(pruned) = prune(&read_record(&map), claimed, jiff::Timestamp::now()) else {
        return Ok(());
    };
    map.data = Some(
        pruned
            .iter()
            .map(|(k, v)| (k.clone(), v.encode()))
            .collect(),
    );
    match call(
        what,
        maps.replace(CSR_APPROVALS_CONFIGMAP, &PostParams::default(), &map),
    )
    .await
    {
        Err(e) if e.code() == Some(409) => Ok(()),
        other => other.map(|_| ()),
    }
}

/// A Warning Event on a denied CSR (`kubectl get events --field-selector
/// involvedObject.name=<csr>` in [`EVENT_NAMESPACE`]).
async fn record_event(
    client: &Client,
    csr: &CertificateSigningRequest,
    decision: &Decision,
) -> Result<(), KubeCallError> {
    let name = csr.metadata.name.clone().unwrap_or_default();
    let now = Time(jiff::Timestamp::now());
    let (_, reason) = decision.condition();
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}.")),
            namespace: Some(EVENT_NAMESPACE.to_owned()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("certificates.k8s.io/v1".into()),
            kind: Some("CertificateSigningRequest".into()),
            name: Some(name.clone()),
            uid: csr.metadata.uid.clone(),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(format!(
            "denied ({}): {}",
            decision.refusal().map_or("", Refusal::label),
            decision.message()
        )),
        type_: Some("Warning".into()),
        source: Some(EventSource {
            component: Some("kubean-karpenter-csr-approver".into()),
            host: None,
        }),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Default::default()
    };
    let events: Api<Event> = Api::namespaced(client.clone(), EVENT_NAMESPACE);
    call(
        format!("create the Event on CSR {name}"),
        events.create(&PostParams::default(), &event),
    )
    .await
    .map(|_| ())
}

/// One pass: decides every pending CSR of ours, each on its own, writes each decision into
/// its approval subresource and returns what it decided and what failed. `record_namespace`
/// holds the record of approvals ([`CSR_APPROVALS_CONFIGMAP`]). Only a failure to list the
/// CSRs ends the pass early (there is then nothing to decide).
pub async fn approve_pending(client: &Client, record_namespace: &str) -> Result<Pass, TokenError> {
    let deadline = Instant::now() + PASS_BUDGET;
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let list = call(
        "list CertificateSigningRequests",
        csrs.list(&ListParams::default()),
    )
    .await?;
    let pending: Vec<_> = list
        .items
        .iter()
        .filter(|c| is_ours(c) && !is_settled(c) && c.spec.signer_name == KUBELET_CLIENT_SIGNER)
        .collect();
    let mut pass = Pass::default();
    if pending.is_empty() {
        return Ok(pass);
    }
    let mut known = Known::default();
    for csr in list
        .items
        .iter()
        .filter(|c| c.spec.signer_name == KUBELET_CLIENT_SIGNER)
    {
        let Some(name) = cn_node(csr) else { continue };
        if is_approved(csr) {
            known.approved.insert(name);
        } else if is_contested(csr) {
            known.contested.insert(name);
        }
    }
    for csr in pending.iter().copied() {
        if let Some(name) = cn_node(csr) {
            *known.pending_per_name.entry(name).or_default() += 1;
        }
    }
    // Without the NodeClaims or the record, only what needs neither is decided; the rest
    // waits (an honest CSR must not be denied because a list failed).
    let mut claims_unknown = None;
    match call(
        "list NodeClaims",
        nodeclaims_api(client).list(&ListParams::default()),
    )
    .await
    {
        Ok(claims) => {
            for (id, claim) in claims.items.iter().filter_map(Claim::from_object) {
                let merged = match known.claims.remove(&id) {
                    Some(other) => other.merge(claim),
                    None => claim,
                };
                known.claims.insert(id, merged);
            }
        }
        Err(e) => {
            pass.errors.push(PassError::State(e));
            claims_unknown = Some("the NodeClaims could not be listed");
        }
    }
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), record_namespace);
    let mut record_unknown = None;
    match call(
        format!("get ConfigMap {record_namespace}/{CSR_APPROVALS_CONFIGMAP}"),
        maps.get(CSR_APPROVALS_CONFIGMAP),
    )
    .await
    {
        Ok(map) => known.record = read_record(&map),
        Err(e) => {
            pass.errors.push(PassError::State(e));
            record_unknown = Some("the record of approvals could not be read");
        }
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for csr in pending {
        let name = csr.metadata.name.clone().unwrap_or_default();
        if Instant::now() > deadline {
            pass.errors.push(PassError::LeftPending {
                csr: name,
                why: "the pass used its time budget",
            });
            continue;
        }
        let Some(mut decision) = decide(csr, &known) else {
            continue;
        };
        // Checked where a decision could rest on what is unknown this pass.
        let unknown = match &decision {
            Decision::Approve(_) => claims_unknown.or(record_unknown),
            Decision::Deny(r, _) if r.needs_claims() => claims_unknown,
            Decision::Deny(..) => None,
        };
        if let Some(why) = unknown {
            pass.errors.push(PassError::LeftPending { csr: name, why });
            continue;
        }
        // The name is an instance ID here (decide refuses any other before approving).
        let instance = cn_node(csr).unwrap_or_default();
        if let Decision::Approve(_) = decision {
            // A fresh get: a Node may have registered since the last pass.
            match call(format!("get Node {instance}"), nodes.get_opt(&instance)).await {
                Ok(Some(_)) => {
                    known.nodes.insert(instance.clone());
                    decision = decide(csr, &known).unwrap_or(decision);
                }
                Ok(None) => {}
                Err(source) => {
                    pass.errors.push(PassError::Call { csr: name, source });
                    continue;
                }
            }
        }
        if let Decision::Approve(_) = decision
            && csr.metadata.uid.is_none()
        {
            // Never so with a real apiserver: without a UID the record could not tell a
            // retry of this CSR from another.
            pass.errors.push(PassError::LeftPending {
                csr: name,
                why: "the CSR has no UID to record",
            });
            continue;
        }
        if let Decision::Approve(_) = decision {
            // Recorded before the approval call: should that fail, only this CSR may still
            // be approved for the instance.
            let approval = Approval {
                uid: csr.metadata.uid.clone().unwrap_or_default(),
                csr: name.clone(),
                at: jiff::Timestamp::now(),
                claim_gone_since: None,
            };
            match record_approval(&maps, &instance, &approval).await {
                Ok(()) => {
                    known.record.insert(instance.clone(), approval);
                }
                Err(RecordError::Taken(before)) => {
                    known.record.insert(instance.clone(), before);
                    decision = decide(csr, &known).unwrap_or(decision);
                }
                Err(RecordError::Call(source)) => {
                    pass.errors.push(PassError::Call { csr: name, source });
                    continue;
                }
            }
        }
        let (type_, reason) = decision.condition();
        let message = decision.message().to_owned();
        if let Decision::Deny(Refusal::Contested, why) = &decision {
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
        if let Err(source) = call(
            format!("{type_} CSR {name}"),
            csrs.replace_subresource("approval", &name, &PostParams::default(), &updated),
        )
        .await
        {
            pass.errors.push(PassError::Call { csr: name, source });
            continue;
        }
        if let Decision::Approve(_) = decision {
            known.approved.insert(instance);
        } else if let Err(source) = record_event(client, csr, &decision).await {
            pass.errors.push(PassError::Call {
                csr: name.clone(),
                source,
            });
        }
        tracing::info!(csr = %name, requester = csr.spec.username.as_deref().unwrap_or(""), decision = type_, refusal = decision.refusal().map_or("", Refusal::label), why = %message, "decided a node CSR");
        pass.decided.push((name, decision));
    }
    if claims_unknown.is_none()
        && record_unknown.is_none()
        && let Err(e) = prune_record(&maps, &known.claims.keys().cloned().collect()).await
    {
        pass.errors.push(PassError::State(e));
    }
    Ok(pass)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// openssl's request for `O=system:nodes, CN=system:node:i-0123456789abcdef0` (P-256).
    const GOOD: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIH8MIGjAgEAMEExFTATBgNVBAoMDHN5c3RlbTpub2RlczEoMCYGA1UEAwwfc3lz
dGVtOm5vZGU6aS0wMTIzNDU2Nzg5YWJjZGVmMDBZMBMGByqGSM49AgEGCCqGSM49
AwEHA0IABAA3NzLVREb0tsGG0JFgokMxip4lqqXCp68XWlF064j5xSkY25VhvU89
dv+/4TpwDAiGfeIGIVZ1MI+F9jbTZtOgADAKBggqhkjOPQQDAgNIADBFAiBQ/gay
JetKbYWqGnds+JefN9sKYR8axyDhtI2MvLKRiAIhAIC0UbemKyRS0gEPFGsrDKcz
bI2avnvO0RALOtd9OiRJ
-----END CERTIFICATE REQUEST-----
";
    /// The same for `CN=system:node:a b`.
    const SPACE: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIHrMIGTAgEAMDExFTATBgNVBAoMDHN5c3RlbTpub2RlczEYMBYGA1UEAwwPc3lz
dGVtOm5vZGU6YSBiMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEuk8Uz5TQv9vl
P0CFA27WRrsAFpl0dNFglNE/FQIu5cyxmw6WnXOMpiz+Bfak+98qvi4fK8AKeTkv
508SinJrHqAAMAoGCCqGSM49BAMCA0cAMEQCIBtnP3C0bm1ayzBZCb20UFicJCa8
ieXD4cXGSLbMb8NWAiABOR9k6Ix671DRbD8fWckaGq/L69bMF+tB5P1D8sGSXQ==
-----END CERTIFICATE REQUEST-----
";
    const INSTANCE: &str = "i-0123456789abcdef0";

    fn ts(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(s).unwrap()
    }

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

    /// A kubelet-like CSR of our group, filed at second 1000 with UID `uid-1`.
    fn ours(pem: &str) -> CertificateSigningRequest {
        let mut c = csr(
            &[JOIN_TOKEN_GROUP],
            "system:bootstrap:abcdef",
            KUBELET_CLIENT_SIGNER,
        );
        c.spec.request = k8s_openapi::ByteString(pem.as_bytes().to_vec());
        c.metadata.uid = Some("uid-1".into());
        c.metadata.creation_timestamp = Some(Time(ts(1000)));
        c
    }

    fn live_claim() -> Claim {
        Claim {
            created: ts(900),
            deleting: false,
            node_name: None,
            registered: false,
        }
    }

    /// A NodeClaim for the instance, live, and one pending CSR for it.
    fn known() -> Known {
        Known {
            claims: BTreeMap::from([(INSTANCE.to_owned(), live_claim())]),
            pending_per_name: BTreeMap::from([(INSTANCE.to_owned(), 1)]),
            ..Default::default()
        }
    }

    fn refusal(d: Option<Decision>) -> Option<Refusal> {
        d.and_then(|d| d.refusal())
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
            matches!(decide(&not_a_token, &known), Some(Decision::Deny(Refusal::NotBootstrapToken, m)) if m.contains("not a bootstrap token"))
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
        assert!(
            matches!(decide(&garbage, &known), Some(Decision::Deny(Refusal::MalformedRequest, m)) if m.contains("PEM"))
        );
    }

    #[test]
    fn the_csr_of_a_live_claims_instance_is_approved() {
        assert!(matches!(
            decide(&ours(GOOD), &known()),
            Some(Decision::Approve(_))
        ));
    }

    #[test]
    fn a_name_that_is_no_instance_id_is_denied_before_anything_else() {
        // Even where two CSRs ask for it (contested comes after) and nothing else is known.
        let mut known = known();
        known.pending_per_name.insert("a b".into(), 2);
        let d = decide(&ours(SPACE), &known);
        assert!(
            matches!(&d, Some(Decision::Deny(Refusal::InvalidName, m)) if m.contains("\"a b\"")),
            "{d:?}"
        );
        assert_eq!(
            d.unwrap().condition(),
            ("Denied", DENIED_REASON),
            "the condition keeps the usual reason; the metric label says which"
        );
    }

    #[test]
    fn an_instance_approved_before_is_denied_even_without_its_csr_object() {
        // The record names another CSR for the instance; no approved CSR object is left.
        let mut known = known();
        known.record.insert(
            INSTANCE.into(),
            Approval {
                uid: "uid-0".into(),
                csr: "first".into(),
                at: ts(950),
                claim_gone_since: None,
            },
        );
        let d = decide(&ours(GOOD), &known);
        assert!(
            matches!(&d, Some(Decision::Deny(Refusal::ApprovedBefore, m)) if m.contains("CSR first")),
            "{d:?}"
        );
        // The CSR the entry was written for (its approval call failed) may be approved again.
        known.record.get_mut(INSTANCE).unwrap().uid = "uid-1".into();
        assert!(matches!(
            decide(&ours(GOOD), &known),
            Some(Decision::Approve(_))
        ));
        // An entry that did not parse matches no CSR: fail closed.
        known
            .record
            .insert(INSTANCE.into(), Approval::decode("not json"));
        assert_eq!(
            refusal(decide(&ours(GOOD), &known)),
            Some(Refusal::ApprovedBefore)
        );
    }

    #[test]
    fn a_claim_being_deleted_or_with_its_node_gives_no_identity() {
        for (label, claim) in [
            (
                "being deleted",
                Claim {
                    deleting: true,
                    ..live_claim()
                },
            ),
            (
                "already has its node",
                Claim {
                    node_name: Some(INSTANCE.into()),
                    ..live_claim()
                },
            ),
            (
                "already Registered",
                Claim {
                    registered: true,
                    ..live_claim()
                },
            ),
        ] {
            let mut known = known();
            known.claims.insert(INSTANCE.into(), claim);
            let d = decide(&ours(GOOD), &known);
            assert!(
                matches!(&d, Some(Decision::Deny(Refusal::ClaimFinished, m)) if m.contains(label)),
                "{label}: {d:?}"
            );
        }
    }

    #[test]
    fn no_claim_a_later_claim_an_existing_node_or_a_race_is_denied() {
        let mut k = known();
        k.claims.clear();
        assert_eq!(refusal(decide(&ours(GOOD), &k)), Some(Refusal::NoClaim));
        let mut k = known();
        k.claims.get_mut(INSTANCE).unwrap().created = ts(1001);
        assert_eq!(
            refusal(decide(&ours(GOOD), &k)),
            Some(Refusal::FiledBeforeClaim)
        );
        let mut k = known();
        k.nodes.insert(INSTANCE.into());
        assert_eq!(refusal(decide(&ours(GOOD), &k)), Some(Refusal::NodeExists));
        let mut k = known();
        k.pending_per_name.insert(INSTANCE.into(), 2);
        let d = decide(&ours(GOOD), &k).unwrap();
        assert_eq!(d.refusal(), Some(Refusal::Contested));
        assert_eq!(d.condition(), ("Denied", CONTESTED_REASON));
        let mut k = known();
        k.approved.insert(INSTANCE.into());
        assert_eq!(
            refusal(decide(&ours(GOOD), &k)),
            Some(Refusal::ApprovedBefore)
        );
    }

    #[test]
    fn claims_are_read_from_nodeclaims_and_two_for_one_instance_merge_to_the_least_live() {
        let object = |status: serde_json::Value, deleting: bool| -> DynamicObject {
            let mut meta =
                serde_json::json!({ "name": "nc", "creationTimestamp": "2026-01-01T00:00:00Z" });
            if deleting {
                meta["deletionTimestamp"] = "2026-01-02T00:00:00Z".into();
            }
            serde_json::from_value(serde_json::json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": meta, "status": status,
            }))
            .unwrap()
        };
        let provider = format!("aws:///us-east-1a/{INSTANCE}");
        let (id, fresh) = Claim::from_object(&object(
            serde_json::json!({ "providerID": provider }),
            false,
        ))
        .unwrap();
        assert_eq!(id, INSTANCE);
        assert!(!fresh.deleting && !fresh.registered && fresh.node_name.is_none());
        let (_, registered) = Claim::from_object(&object(
            serde_json::json!({ "providerID": provider, "conditions": [
                { "type": "Launched", "status": "True" },
                { "type": "Registered", "status": "True" },
            ] }),
            true,
        ))
        .unwrap();
        assert!(registered.registered && registered.deleting);
        assert!(Claim::from_object(&object(serde_json::json!({}), false)).is_none());
        let merged = fresh.clone().merge(registered);
        assert!(merged.registered && merged.deleting);
    }

    #[test]
    fn record_entries_round_trip_and_go_only_a_day_after_their_claim() {
        let entry = Approval {
            uid: "u".into(),
            csr: "c".into(),
            at: ts(1000),
            claim_gone_since: None,
        };
        assert_eq!(Approval::decode(&entry.encode()), entry);
        let record = BTreeMap::from([
            ("i-0aaaaaaaa".to_owned(), entry.clone()),
            (
                "i-0bbbbbbbb".to_owned(),
                Approval {
                    claim_gone_since: Some(ts(2000)),
                    ..entry.clone()
                },
            ),
        ]);
        let claimed = BTreeSet::from(["i-0bbbbbbbb".to_owned()]);
        // The claimed one loses its mark, the other is marked gone (not dropped).
        let now = ts(3000);
        let next = prune(&record, &claimed, now).unwrap();
        assert_eq!(next["i-0aaaaaaaa"].claim_gone_since, Some(now));
        assert_eq!(next["i-0bbbbbbbb"].claim_gone_since, None);
        assert_eq!(prune(&next, &claimed, now), None, "nothing changes twice");
        // A day later, still unclaimed: dropped; just under a day: kept.
        let day = PRUNE_AFTER.as_secs() as i64;
        assert!(prune(&next, &claimed, ts(3000 + day - 1)).is_none());
        let later = prune(&next, &claimed, ts(3000 + day + 1)).unwrap();
        assert_eq!(later.keys().collect::<Vec<_>>(), ["i-0bbbbbbbb"]);
    }

    #[test]
    fn every_refusal_has_its_own_label() {
        let labels: BTreeSet<_> = Refusal::ALL.iter().map(|r| r.label()).collect();
        assert_eq!(labels.len(), Refusal::ALL.len());
        // The alert's reasons (rendered by kk-render) are labels the approver writes.
        for reason in kk_render::monitoring::FORGED_CSR_REASONS {
            assert!(labels.contains(reason), "{reason}");
        }
    }
}
