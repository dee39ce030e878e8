//! The AWS side of `apply` (ORDER.md step 3): the node role and its trust policy, managed and
//! inline policies, the instance profile, the controller and rotator policies, the discovery
//! and cluster tags, and the API port from the node security group to the control plane's.
//!
//! Every step reads first and writes only what differs, so a second run makes reads only.
//! With `plan_only` nothing is written: the writes it would make are returned as the plan.
//! A refusal stops the run and says which steps were done and which were not; re-running
//! resumes, since every step re-reads.
//!
//! Over 700 lines on purpose: one `Run` walks the ordered [`STEPS`] with its read-then-write
//! pattern; cutting the sequence across files would hide the order the steps must keep.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::aws_error::AwsCallError;
use crate::aws_read::{PolicyDocumentError, policy_document};

/// What the account should hold, from the spec and the rendered iam/ files.
#[derive(Debug, Clone, Default)]
pub struct AwsDesired {
    pub cluster: String,
    pub node_role: String,
    pub trust_policy: Value,
    pub managed_policy_arns: Vec<String>,
    pub inline_policies: BTreeMap<String, Value>,
    pub instance_profile: String,
    /// Customer-managed policies (name, document) and the role each is attached to, if known.
    pub policies: Vec<(String, Value, Option<String>)>,
    /// Subnets and node security groups: by ID, or found by their discovery tag (key, value);
    /// each gets the cluster tag `kubernetes.io/cluster/<name>=shared`.
    pub subnet_ids: Vec<String>,
    pub subnet_tag: Option<(String, String)>,
    /// Private IPs of the Kubean-built instances (they get `kubernetes.io/cluster/<name>=owned`).
    pub kubean_instance_ips: Vec<String>,
    /// The node security groups (they get the cluster tag too), the control plane's group and
    /// the API port it must admit from them.
    pub network: crate::node_network::NodeNetwork,
    /// A pool uses EFA: every node security group admits all traffic from itself.
    pub efa: bool,
    /// The interruption queue and its EventBridge rules (`interruption/`), when the spec has one.
    pub interruption: Option<super::interruption::InterruptionDesired>,
    /// `--prune`: delete the interruption queue and rules this cluster created (by tag) that
    /// `interruption` no longer names.
    pub prune: bool,
}

/// One write, done or planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// `iam:CreateRole`, `ec2:CreateTags`, ...
    pub call: String,
    pub target: String,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.call, self.target)
    }
}

#[derive(Debug, Clone, Default)]
pub struct AwsOutcome {
    /// Read calls made.
    pub reads: usize,
    /// Writes made (or, with plan_only, that would be made), in order.
    pub writes: Vec<Step>,
    /// Things already as wanted (for the report).
    pub unchanged: Vec<String>,
    /// Things that could not be done and are not errors (e.g. an instance Kubean has not built yet).
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("{failed}: {error}")]
pub struct AwsApplyError {
    pub outcome: AwsOutcome,
    pub failed: String,
    pub error: StepError,
    /// The steps after the failed one, not attempted.
    pub not_attempted: Vec<String>,
}

/// The steps, by name, in order (for the not-attempted list).
pub const STEPS: &[&str] = &[
    "node role",
    "node role trust policy",
    "node role managed policies",
    "node role inline policies",
    "instance profile",
    "customer-managed policies",
    "subnets' cluster tag",
    "node security groups' cluster tag",
    "Kubean-built instances' cluster tag",
    "API port from the node security group",
    "EFA: node security groups admit themselves",
    "interruption queue",
    "interruption rules",
    "interruption queue and rules the spec dropped",
];

/// Why a step stopped.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    // The call error is the source, not hidden: the CLI reads refusal vs outage from it.
    #[error("{0}")]
    Aws(#[from] AwsCallError),
    #[error("the policy document IAM returned: {0}")]
    Policy(#[from] PolicyDocumentError),
    #[error("building the request: {0}")]
    Request(#[from] aws_sdk_iam::error::BuildError),
    #[error(
        "queue {queue} carries {tag}={owner}: it belongs to another cluster; name another queue in spec.karpenter.interruptionQueue"
    )]
    ForeignQueue {
        queue: String,
        tag: String,
        owner: String,
    },
    #[error("events:PutTargets did not add the queue to rule {rule}: {message}")]
    TargetRefused { rule: String, message: String },
    #[error(
        "no {kind} carries the discovery tag {key}={value}: tag the ones Karpenter may use (iam/discovery.json)"
    )]
    NoDiscoveryTag {
        kind: String,
        key: String,
        value: String,
    },
    #[error(
        "the IAM role {role} is tagged {tag}={owner}: it belongs to cluster {owner:?}, not {cluster:?}; \
         apply never rewrites another cluster's node role (give this cluster its own aws.nodeRole)",
        tag = crate::store::CLUSTER_TAG
    )]
    ForeignRole {
        role: String,
        owner: String,
        cluster: String,
    },
}

fn code_of<E, R>(e: &aws_sdk_iam::error::SdkError<E, R>) -> Option<&str>
where
    E: aws_sdk_iam::error::ProvideErrorMetadata,
{
    e.as_service_error().and_then(|s| s.code())
}

pub(crate) struct Run<'a> {
    iam: &'a aws_sdk_iam::Client,
    pub(crate) ec2: &'a aws_sdk_ec2::Client,
    pub(crate) sqs: &'a aws_sdk_sqs::Client,
    pub(crate) events: &'a aws_sdk_eventbridge::Client,
    pub(crate) plan_only: bool,
    pub(crate) out: AwsOutcome,
}

impl Run<'_> {
    /// Records a write; whether to make it (not when only planning).
    pub(crate) fn write(&mut self, call: &str, target: impl Into<String>) -> bool {
        self.out.writes.push(Step {
            call: call.to_owned(),
            target: target.into(),
        });
        !self.plan_only
    }

    async fn node_role(&mut self, d: &AwsDesired) -> Result<(), StepError> {
        self.out.reads += 1;
        match self.iam.get_role().role_name(&d.node_role).send().await {
            Ok(r) => {
                // A role tagged for another cluster is not ours to rewrite: its trust and
                // inline policy would let that cluster's nodes read our store, and ours join
                // theirs. An untagged role (made by hand for this cluster) is claimed.
                let owner = r.role().and_then(|role| {
                    role.tags()
                        .iter()
                        .find(|t| t.key() == crate::store::CLUSTER_TAG)
                        .map(|t| t.value().to_owned())
                });
                match owner {
                    Some(owner) if owner != d.cluster => {
                        return Err(StepError::ForeignRole {
                            role: d.node_role.clone(),
                            owner,
                            cluster: d.cluster.clone(),
                        });
                    }
                    Some(_) => {}
                    None => {
                        if self.write(
                            "iam:TagRole",
                            format!(
                                "{} {}={}",
                                d.node_role,
                                crate::store::CLUSTER_TAG,
                                d.cluster
                            ),
                        ) {
                            self.iam
                                .tag_role()
                                .role_name(&d.node_role)
                                .tags(
                                    aws_sdk_iam::types::Tag::builder()
                                        .key(crate::store::CLUSTER_TAG)
                                        .value(&d.cluster)
                                        .build()?,
                                )
                                .send()
                                .await
                                .map_err(|e| AwsCallError::from_sdk("iam:TagRole", &e))?;
                        }
                    }
                }
                self.out.unchanged.push(format!("role {}", d.node_role));
                let current = r
                    .role()
                    .and_then(|r| r.assume_role_policy_document())
                    .map(policy_document)
                    .transpose()?;
                if current.as_ref() != Some(&d.trust_policy)
                    && self.write("iam:UpdateAssumeRolePolicy", &d.node_role)
                {
                    self.iam
                        .update_assume_role_policy()
                        .role_name(&d.node_role)
                        .policy_document(d.trust_policy.to_string())
                        .send()
                        .await
                        .map_err(|e| AwsCallError::from_sdk("iam:UpdateAssumeRolePolicy", &e))?;
                }
                Ok(())
            }
            Err(e) if code_of(&e) == Some("NoSuchEntity") => {
                if self.write("iam:CreateRole", &d.node_role) {
                    self.iam
                        .create_role()
                        .role_name(&d.node_role)
                        .assume_role_policy_document(d.trust_policy.to_string())
                        .tags(
                            aws_sdk_iam::types::Tag::builder()
                                .key(crate::store::CLUSTER_TAG)
                                .value(&d.cluster)
                                .build()?,
                        )
                        .send()
                        .await
                        .map_err(|e| AwsCallError::from_sdk("iam:CreateRole", &e))?;
                }
                Ok(())
            }
            Err(e) => Err(AwsCallError::from_sdk("iam:GetRole", &e).into()),
        }
    }

    async fn managed(&mut self, d: &AwsDesired) -> Result<(), StepError> {
        let attached = if self.role_exists(d).await? {
            self.attached_policies(&d.node_role).await?
        } else {
            BTreeSet::new()
        };
        for arn in &d.managed_policy_arns {
            if !attached.contains(arn) {
                self.attach(&d.node_role, arn).await?;
            }
        }
        Ok(())
    }

    /// The ARNs of the policies attached to `role` (one `iam:ListAttachedRolePolicies`).
    async fn attached_policies(&mut self, role: &str) -> Result<BTreeSet<String>, StepError> {
        self.out.reads += 1;
        Ok(self
            .iam
            .list_attached_role_policies()
            .role_name(role)
            .send()
            .await
            .map_err(|e| AwsCallError::from_sdk("iam:ListAttachedRolePolicies", &e))?
            .attached_policies()
            .iter()
            .filter_map(|p| p.policy_arn().map(str::to_owned))
            .collect())
    }

    /// Attaches the policy `arn` to `role` (one `iam:AttachRolePolicy`, recorded as a write).
    async fn attach(&mut self, role: &str, arn: &str) -> Result<(), StepError> {
        if self.write("iam:AttachRolePolicy", format!("{role} {arn}")) {
            self.iam
                .attach_role_policy()
                .role_name(role)
                .policy_arn(arn)
                .send()
                .await
                .map_err(|e| AwsCallError::from_sdk("iam:AttachRolePolicy", &e))?;
        }
        Ok(())
    }

    /// In a plan, the role may not exist yet: then there is nothing to read under it.
    async fn role_exists(&mut self, d: &AwsDesired) -> Result<bool, StepError> {
        if !self.plan_only {
            return Ok(true);
        }
        Ok(!self
            .out
            .writes
            .iter()
            .any(|w| w.call == "iam:CreateRole" && w.target == d.node_role))
    }

    async fn inline(&mut self, d: &AwsDesired) -> Result<(), StepError> {
        let exists = self.role_exists(d).await?;
        for (name, doc) in &d.inline_policies {
            let current = if exists {
                self.out.reads += 1;
                match self
                    .iam
                    .get_role_policy()
                    .role_name(&d.node_role)
                    .policy_name(name)
                    .send()
                    .await
                {
                    Ok(p) => Some(policy_document(p.policy_document())?),
                    Err(e) if code_of(&e) == Some("NoSuchEntity") => None,
                    Err(e) => return Err(AwsCallError::from_sdk("iam:GetRolePolicy", &e).into()),
                }
            } else {
                None
            };
            if current.as_ref() == Some(doc) {
                continue;
            }
            if self.write("iam:PutRolePolicy", format!("{} {name}", d.node_role)) {
                self.iam
                    .put_role_policy()
                    .role_name(&d.node_role)
                    .policy_name(name)
                    .policy_document(doc.to_string())
                    .send()
                    .await
                    .map_err(|e| AwsCallError::from_sdk("iam:PutRolePolicy", &e))?;
            }
        }
        Ok(())
    }

    async fn instance_profile(&mut self, d: &AwsDesired) -> Result<(), StepError> {
        self.out.reads += 1;
        let roles: Vec<String> = match self
            .iam
            .get_instance_profile()
            .instance_profile_name(&d.instance_profile)
            .send()
            .await
        {
            Ok(p) => p
                .instance_profile()
                .map(|p| p.roles().iter().map(|r| r.role_name().to_owned()).collect())
                .unwrap_or_default(),
            Err(e) if code_of(&e) == Some("NoSuchEntity") => {
                if self.write("iam:CreateInstanceProfile", &d.instance_profile) {
                    self.iam
                        .create_instance_profile()
                        .instance_profile_name(&d.instance_profile)
                        .send()
                        .await
                        .map_err(|e| AwsCallError::from_sdk("iam:CreateInstanceProfile", &e))?;
                }
                Vec::new()
            }
            Err(e) => return Err(AwsCallError::from_sdk("iam:GetInstanceProfile", &e).into()),
        };
        if !roles.contains(&d.node_role)
            && self.write(
                "iam:AddRoleToInstanceProfile",
                format!("{} {}", d.instance_profile, d.node_role),
            )
        {
            self.iam
                .add_role_to_instance_profile()
                .instance_profile_name(&d.instance_profile)
                .role_name(&d.node_role)
                .send()
                .await
                .map_err(|e| AwsCallError::from_sdk("iam:AddRoleToInstanceProfile", &e))?;
        }
        Ok(())
    }

    async fn policies(&mut self, d: &AwsDesired) -> Result<(), StepError> {
        for (name, doc, role) in &d.policies {
            self.out.reads += 1;
            let list = self
                .iam
                .list_policies()
                .scope(aws_sdk_iam::types::PolicyScopeType::Local)
                .send()
                .await
                .map_err(|e| AwsCallError::from_sdk("iam:ListPolicies", &e))?;
            let found = list
                .policies()
                .iter()
                .find(|p| p.policy_name() == Some(name.as_str()))
                .map(|p| {
                    (
                        p.arn().unwrap_or_default().to_owned(),
                        p.default_version_id().unwrap_or("v1").to_owned(),
                    )
                });
            let arn = match found {
                Some((arn, version)) => {
                    self.out.reads += 1;
                    let v = self
                        .iam
                        .get_policy_version()
                        .policy_arn(&arn)
                        .version_id(&version)
                        .send()
                        .await
                        .map_err(|e| AwsCallError::from_sdk("iam:GetPolicyVersion", &e))?;
                    let current = v
                        .policy_version()
                        .and_then(|v| v.document())
                        .map(policy_document)
                        .transpose()?;
                    if current.as_ref() != Some(doc) {
                        self.new_version(&arn).await?;
                        if self.write("iam:CreatePolicyVersion", &arn) {
                            self.iam
                                .create_policy_version()
                                .policy_arn(&arn)
                                .policy_document(doc.to_string())
                                .set_as_default(true)
                                .send()
                                .await
                                .map_err(|e| {
                                    AwsCallError::from_sdk("iam:CreatePolicyVersion", &e)
                                })?;
                        }
                    } else {
                        self.out.unchanged.push(format!("policy {name}"));
                    }
                    Some(arn)
                }
                None => {
                    if self.write("iam:CreatePolicy", name) {
                        let created = self
                            .iam
                            .create_policy()
                            .policy_name(name)
                            .policy_document(doc.to_string())
                            .send()
                            .await
                            .map_err(|e| AwsCallError::from_sdk("iam:CreatePolicy", &e))?;
                        created.policy().and_then(|p| p.arn()).map(str::to_owned)
                    } else {
                        None
                    }
                }
            };
            let Some(role) = role else { continue };
            let attached = match &arn {
                Some(_) => self.attached_policies(role).await?,
                None => BTreeSet::new(),
            };
            let target = arn.clone().unwrap_or_else(|| name.clone());
            if !attached.contains(&target) {
                self.attach(role, &target).await?;
            }
        }
        Ok(())
    }

    /// IAM keeps at most five versions: delete the oldest non-default one before adding.
    async fn new_version(&mut self, arn: &str) -> Result<(), StepError> {
        self.out.reads += 1;
        let versions = self
            .iam
            .list_policy_versions()
            .policy_arn(arn)
            .send()
            .await
            .map_err(|e| AwsCallError::from_sdk("iam:ListPolicyVersions", &e))?;
        let list = versions.versions();
        if list.len() < 5 {
            return Ok(());
        }
        if let Some(oldest) = list
            .iter()
            .filter(|v| !v.is_default_version())
            .min_by_key(|v| v.create_date().map(|d| d.secs()))
            .and_then(|v| v.version_id())
            && self.write("iam:DeletePolicyVersion", format!("{arn} {oldest}"))
        {
            self.iam
                .delete_policy_version()
                .policy_arn(arn)
                .version_id(oldest)
                .send()
                .await
                .map_err(|e| AwsCallError::from_sdk("iam:DeletePolicyVersion", &e))?;
        }
        Ok(())
    }

    /// The resources by ID, or by their discovery tag (none found: an error naming the tag to
    /// set); each gets the cluster tag.
    async fn tag_resources(
        &mut self,
        kind: &str,
        ids: &[String],
        discovery: &Option<(String, String)>,
        cluster: &str,
    ) -> Result<(), StepError> {
        let mut ids: Vec<String> = ids.to_vec();
        if ids.is_empty()
            && let Some((key, value)) = discovery
        {
            self.out.reads += 1;
            let found = self
                .ec2
                .describe_tags()
                .filters(
                    aws_sdk_ec2::types::Filter::builder()
                        .name("key")
                        .values(key)
                        .build(),
                )
                .filters(
                    aws_sdk_ec2::types::Filter::builder()
                        .name("value")
                        .values(value)
                        .build(),
                )
                .filters(
                    aws_sdk_ec2::types::Filter::builder()
                        .name("resource-type")
                        .values(kind)
                        .build(),
                )
                .send()
                .await
                .map_err(|e| AwsCallError::from_sdk("ec2:DescribeTags", &e))?;
            ids = found
                .tags()
                .iter()
                .filter_map(|t| t.resource_id().map(str::to_owned))
                .collect();
            if ids.is_empty() {
                return Err(StepError::NoDiscoveryTag {
                    kind: kind.to_owned(),
                    key: key.to_owned(),
                    value: value.to_owned(),
                });
            }
        }
        if ids.is_empty() {
            return Ok(());
        }
        let key = format!("kubernetes.io/cluster/{cluster}");
        self.out.reads += 1;
        let described = self
            .ec2
            .describe_tags()
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name("resource-id")
                    .set_values(Some(ids.clone()))
                    .build(),
            )
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name("key")
                    .values(&key)
                    .build(),
            )
            .send()
            .await
            .map_err(|e| AwsCallError::from_sdk("ec2:DescribeTags", &e))?;
        let tagged: BTreeSet<&str> = described
            .tags()
            .iter()
            .filter(|t| matches!(t.value(), Some("owned" | "shared")))
            .filter_map(|t| t.resource_id())
            .collect();
        let missing: Vec<String> = ids
            .iter()
            .filter(|id| !tagged.contains(id.as_str()))
            .cloned()
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        self.create_tag(missing, &key, "shared").await
    }

    /// Tags `ids` with `key=value` (one `ec2:CreateTags`); nothing when `ids` is empty.
    async fn create_tag(
        &mut self,
        ids: Vec<String>,
        key: &str,
        value: &str,
    ) -> Result<(), StepError> {
        if ids.is_empty()
            || !self.write("ec2:CreateTags", format!("{} {key}={value}", ids.join(",")))
        {
            return Ok(());
        }
        self.ec2
            .create_tags()
            .set_resources(Some(ids))
            .tags(
                aws_sdk_ec2::types::Tag::builder()
                    .key(key)
                    .value(value)
                    .build(),
            )
            .send()
            .await
            .map_err(|e| AwsCallError::from_sdk("ec2:CreateTags", &e))?;
        Ok(())
    }

    async fn kubean_instances(&mut self, d: &AwsDesired) -> Result<(), StepError> {
        if d.kubean_instance_ips.is_empty() {
            return Ok(());
        }
        let key = format!("kubernetes.io/cluster/{}", d.cluster);
        self.out.reads += 1;
        let out = self
            .ec2
            .describe_instances()
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name("private-ip-address")
                    .set_values(Some(d.kubean_instance_ips.clone()))
                    .build(),
            )
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name("instance-state-name")
                    .values("pending")
                    .values("running")
                    .values("stopped")
                    .build(),
            )
            .send()
            .await
            .map_err(|e| AwsCallError::from_sdk("ec2:DescribeInstances", &e))?;
        let mut found = BTreeSet::new();
        let mut missing = Vec::new();
        for i in out.reservations().iter().flat_map(|r| r.instances()) {
            if let Some(ip) = i.private_ip_address() {
                found.insert(ip.to_owned());
            }
            let has = i.tags().iter().any(|t| {
                t.key() == Some(key.as_str()) && matches!(t.value(), Some("owned" | "shared"))
            });
            if !has && let Some(id) = i.instance_id() {
                missing.push(id.to_owned());
            }
        }
        for ip in &d.kubean_instance_ips {
            if !found.contains(ip) {
                self.out.notes.push(format!(
                    "no instance with private IP {ip} (Kubean has not built it yet?): tag it {key}=owned when it exists"
                ));
            }
        }
        self.create_tag(missing, &key, "owned").await
    }

    /// The node security groups: by ID, or found by their discovery tag.
    pub(crate) async fn node_security_groups(
        &mut self,
        d: &AwsDesired,
    ) -> Result<BTreeSet<String>, StepError> {
        let mut nodes: BTreeSet<String> =
            d.network.node_security_group_ids.iter().cloned().collect();
        if let Some((key, value)) = &d.network.node_security_group_tag {
            self.out.reads += 1;
            let tagged = crate::node_network::security_groups_tagged(self.ec2, key, value).await?;
            nodes.extend(tagged.into_iter().map(|g| g.id));
        }
        Ok(nodes)
    }

    async fn api_port(&mut self, d: &AwsDesired) -> Result<(), StepError> {
        let nodes = self.node_security_groups(d).await?;
        if nodes.is_empty() {
            self.out
                .notes
                .push("no node security group found: the API port rule was not added".into());
            return Ok(());
        }
        self.out.reads += 1;
        let cp = self
            .ec2
            .describe_security_groups()
            .group_ids(&d.network.control_plane_security_group)
            .send()
            .await
            .map_err(|e| AwsCallError::from_sdk("ec2:DescribeSecurityGroups", &e))?;
        let admitted: BTreeSet<String> = cp
            .security_groups()
            .iter()
            .map(crate::node_network::security_group)
            .flat_map(|g| {
                g.groups_admitted(d.network.api_port)
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect();
        for node in nodes.difference(&admitted) {
            if self.write(
                "ec2:AuthorizeSecurityGroupIngress",
                format!(
                    "{} tcp/{} from {node}",
                    d.network.control_plane_security_group, d.network.api_port
                ),
            ) {
                self.ec2
                    .authorize_security_group_ingress()
                    .group_id(&d.network.control_plane_security_group)
                    .ip_permissions(
                        aws_sdk_ec2::types::IpPermission::builder()
                            .ip_protocol("tcp")
                            .from_port(d.network.api_port as i32)
                            .to_port(d.network.api_port as i32)
                            .user_id_group_pairs(
                                aws_sdk_ec2::types::UserIdGroupPair::builder()
                                    .group_id(node)
                                    .description("kubean-karpenter: nodes to the API server")
                                    .build(),
                            )
                            .build(),
                    )
                    .send()
                    .await
                    .map_err(|e| AwsCallError::from_sdk("ec2:AuthorizeSecurityGroupIngress", &e))?;
            }
        }
        Ok(())
    }
}

/// Reconciles the account with `desired`, in [`STEPS`] order. `on_write` hears of each write as
/// soon as its step has made it (or, with `plan_only`, planned it): a run killed half-way has
/// said what it already changed.
pub async fn reconcile(
    sdk: &aws_config::SdkConfig,
    desired: &AwsDesired,
    plan_only: bool,
    on_write: &mut dyn FnMut(&Step),
) -> Result<AwsOutcome, AwsApplyError> {
    let iam = aws_sdk_iam::Client::new(sdk);
    let ec2 = aws_sdk_ec2::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let events = aws_sdk_eventbridge::Client::new(sdk);
    let mut run = Run {
        iam: &iam,
        ec2: &ec2,
        sqs: &sqs,
        events: &events,
        plan_only,
        out: AwsOutcome::default(),
    };
    let mut reported = 0;
    for (i, step) in STEPS.iter().enumerate() {
        let result = match i {
            0 => run.node_role(desired).await,
            1 => Ok(()), // the trust policy is compared and updated with the role
            2 => run.managed(desired).await,
            3 => run.inline(desired).await,
            4 => run.instance_profile(desired).await,
            5 => run.policies(desired).await,
            6 => {
                run.tag_resources(
                    "subnet",
                    &desired.subnet_ids,
                    &desired.subnet_tag,
                    &desired.cluster,
                )
                .await
            }
            7 => {
                run.tag_resources(
                    "security-group",
                    &desired.network.node_security_group_ids,
                    &desired.network.node_security_group_tag,
                    &desired.cluster,
                )
                .await
            }
            8 => run.kubean_instances(desired).await,
            9 => run.api_port(desired).await,
            10 => run.efa_self_rule(desired).await,
            11 => run.interruption_queue(desired).await,
            12 => run.interruption_rules(desired).await,
            _ => run.interruption_prune(desired).await,
        };
        if let Err(error) = result {
            // The refused write is not among the done ones.
            if !plan_only
                && let StepError::Aws(aws) = &error
                && run.out.writes.last().is_some_and(|w| aws.call() == w.call)
            {
                run.out.writes.pop();
            }
            run.out.writes[reported..].iter().for_each(&mut *on_write);
            return Err(AwsApplyError {
                outcome: run.out,
                failed: (*step).to_owned(),
                error,
                not_attempted: STEPS[i + 1..].iter().map(|s| (*s).to_owned()).collect(),
            });
        }
        run.out.writes[reported..].iter().for_each(&mut *on_write);
        reported = run.out.writes.len();
    }
    Ok(run.out)
}
