//! `iam/`: the Karpenter controller policy (scoped to this cluster, no eks:*), the node role
//! and instance profile, the node's read access to the join store, and the discovery tags.

use kk_spec::arn::Arns;
use kk_spec::{CredentialSource, ElasticCluster, JoinMode};
use serde_json::{Value, json};

use crate::names;
use crate::{Bundle, RenderError};

fn statement(sid: &str, actions: &[&str], resources: Value, condition: Option<Value>) -> Value {
    let mut s = json!({ "Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resources });
    if let Some(c) = condition {
        s["Condition"] = c;
    }
    s
}

pub fn controller_policy(cluster: &ElasticCluster) -> Value {
    let name = &cluster.metadata.name;
    let aws = &cluster.spec.aws;
    let r = &aws.region;
    let arns = Arns::of(aws);
    let ec2 = |res: &str| arns.ec2_any_account(res);
    let owned = format!("aws:ResourceTag/kubernetes.io/cluster/{name}");
    let requested_owned = format!("aws:RequestTag/kubernetes.io/cluster/{name}");
    let tagged_resources = json!([
        ec2("fleet/*"),
        ec2("instance/*"),
        ec2("volume/*"),
        ec2("network-interface/*"),
        ec2("launch-template/*"),
        ec2("spot-instances-request/*"),
    ]);
    let instance_profiles = arns.instance_profile("*");
    let mut statements = vec![
        statement(
            "AllowScopedEC2InstanceAccessActions",
            &["ec2:RunInstances", "ec2:CreateFleet"],
            json!([
                arns.ec2_unowned("image/*"),
                arns.ec2_unowned("snapshot/*"),
                ec2("security-group/*"),
                ec2("subnet/*"),
                ec2("capacity-reservation/*"),
                ec2("placement-group/*"),
            ]),
            None,
        ),
        statement(
            "AllowScopedEC2LaunchTemplateAccessActions",
            &["ec2:RunInstances", "ec2:CreateFleet"],
            json!(ec2("launch-template/*")),
            Some(
                json!({ "StringEquals": { &owned: "owned" }, "StringLike": { "aws:ResourceTag/karpenter.sh/nodepool": "*" } }),
            ),
        ),
        statement(
            "AllowScopedEC2InstanceActionsWithTags",
            &[
                "ec2:RunInstances",
                "ec2:CreateFleet",
                "ec2:CreateLaunchTemplate",
            ],
            tagged_resources.clone(),
            Some(
                json!({ "StringEquals": { &requested_owned: "owned" }, "StringLike": { "aws:RequestTag/karpenter.sh/nodepool": "*" } }),
            ),
        ),
        statement(
            "AllowScopedResourceCreationTagging",
            &["ec2:CreateTags"],
            tagged_resources,
            Some(json!({
                "StringEquals": { &requested_owned: "owned", "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"] },
                "StringLike": { "aws:RequestTag/karpenter.sh/nodepool": "*" }
            })),
        ),
        statement(
            "AllowScopedResourceTagging",
            &["ec2:CreateTags"],
            json!(ec2("instance/*")),
            Some(json!({
                "StringEquals": { &owned: "owned" },
                "StringLike": { "aws:ResourceTag/karpenter.sh/nodepool": "*" },
                "ForAllValues:StringEquals": { "aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"] }
            })),
        ),
        statement(
            "AllowScopedDeletion",
            &["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
            json!([ec2("instance/*"), ec2("launch-template/*")]),
            Some(
                json!({ "StringEquals": { &owned: "owned" }, "StringLike": { "aws:ResourceTag/karpenter.sh/nodepool": "*" } }),
            ),
        ),
        // The seed's checklist: "the Karpenter controller lacks the iam:PassRole permission".
        // Only the node role, only to EC2.
        statement(
            "AllowPassingInstanceRole",
            &["iam:PassRole"],
            json!(arns.role(&aws.node_role)),
            Some(
                json!({ "StringEquals": { "iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"] } }),
            ),
        ),
        statement(
            "AllowScopedInstanceProfileCreationActions",
            &["iam:CreateInstanceProfile"],
            json!(instance_profiles),
            Some(json!({
                "StringEquals": { &requested_owned: "owned", "aws:RequestTag/topology.kubernetes.io/region": r },
                "StringLike": { "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*" }
            })),
        ),
        statement(
            "AllowScopedInstanceProfileTagActions",
            &["iam:TagInstanceProfile"],
            json!(instance_profiles),
            Some(json!({
                "StringEquals": {
                    &owned: "owned", "aws:ResourceTag/topology.kubernetes.io/region": r,
                    &requested_owned: "owned", "aws:RequestTag/topology.kubernetes.io/region": r
                },
                "StringLike": { "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*", "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*" }
            })),
        ),
        statement(
            "AllowScopedInstanceProfileActions",
            &[
                "iam:AddRoleToInstanceProfile",
                "iam:RemoveRoleFromInstanceProfile",
                "iam:DeleteInstanceProfile",
            ],
            json!(instance_profiles),
            Some(json!({
                "StringEquals": { &owned: "owned", "aws:ResourceTag/topology.kubernetes.io/region": r },
                "StringLike": { "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*" }
            })),
        ),
        statement(
            "AllowRegionalReadActions",
            &[
                "ec2:DescribeCapacityReservations",
                "ec2:DescribeImages",
                "ec2:DescribeInstances",
                "ec2:DescribeInstanceStatus",
                "ec2:DescribeInstanceTypeOfferings",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplates",
                "ec2:DescribePlacementGroups",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeSpotPriceHistory",
                "ec2:DescribeSubnets",
            ],
            json!("*"),
            Some(json!({ "StringEquals": { "aws:RequestedRegion": r } })),
        ),
        // AMI aliases and ssmRelease AMIs resolve through these public parameters.
        statement(
            "AllowSSMReadActions",
            &["ssm:GetParameter"],
            json!(arns.ssm_public_parameters()),
            None,
        ),
        statement(
            "AllowUnscopedInstanceProfileListAction",
            &["iam:ListInstanceProfiles"],
            json!("*"),
            None,
        ),
        statement(
            "AllowInstanceProfileReadActions",
            &["iam:GetInstanceProfile"],
            json!(instance_profiles),
            None,
        ),
    ];
    // Karpenter 1.15's reboot-for-repair reboots a node in place (same tags as deletion).
    if cluster.spec.reboot_for_repair() {
        statements.push(statement(
            "AllowScopedReboot",
            &["ec2:RebootInstances"],
            json!(ec2("instance/*")),
            Some(
                json!({ "StringEquals": { &owned: "owned" }, "StringLike": { "aws:ResourceTag/karpenter.sh/nodepool": "*" } }),
            ),
        ));
    }
    if !cluster.spec.karpenter.isolated_vpc {
        statements.push(statement(
            "AllowPricingReadActions",
            &["pricing:GetProducts"],
            json!("*"),
            None,
        ));
    }
    // Only the interruption queue's ARN: validate refuses a queue name that would widen it.
    if let Some(queue) = kk_spec::interruption::queue_name(cluster) {
        statements.push(statement(
            "AllowInterruptionQueueActions",
            &["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
            json!(kk_spec::interruption::queue_arn(cluster, &queue)),
            None,
        ));
    }
    json!({ "Version": "2012-10-17", "Statement": statements })
}

/// The parameter reads AmazonSSMManagedInstanceCore allows on `*` (and their siblings).
const SSM_PARAMETER_READS: [&str; 4] = [
    "ssm:GetParameter",
    "ssm:GetParameters",
    "ssm:GetParametersByPath",
    "ssm:GetParameterHistory",
];

/// What the node may read at boot: exactly the join store, nothing else. The node role
/// also carries AmazonSSMManagedInstanceCore (Session Manager), which allows
/// `ssm:GetParameter(s)` on every parameter in the account, another cluster's join token
/// included; an explicit Deny outside this cluster's store and the public `/aws/service/*`
/// parameters overrides it (an explicit Deny wins over any Allow in IAM evaluation).
fn join_store_policy(cluster: &ElasticCluster) -> Value {
    let spec = &cluster.spec;
    let aws = &spec.aws;
    let store = names::join_store(spec, &cluster.metadata.name);
    let arns = Arns::of(aws);
    let public = arns.ssm_public_parameters();
    let ssm_store = arns.ssm_parameter(&store);
    let sm_store = arns.secret(&store);
    let deny = |sid: &str, actions: &[&str], allowed: Vec<String>| json!({ "Sid": sid, "Effect": "Deny", "Action": actions, "NotResource": allowed });
    let mut statements = Vec::new();
    match spec.join.mode {
        JoinMode::Static => {
            statements.push(deny(
                "DenyParametersOutsidePublicOnes",
                &SSM_PARAMETER_READS,
                vec![public],
            ));
        }
        JoinMode::Ssm => {
            statements.push(statement(
                "ReadJoinConfiguration",
                &["ssm:GetParameter"],
                json!(ssm_store),
                None,
            ));
            statements.push(deny(
                "DenyParametersOutsideJoinStore",
                &SSM_PARAMETER_READS,
                vec![ssm_store, public],
            ));
        }
        JoinMode::SecretsManager => {
            statements.push(statement(
                "ReadJoinConfiguration",
                &["secretsmanager:GetSecretValue"],
                json!(sm_store),
                None,
            ));
            statements.push(deny(
                "DenyParametersOutsidePublicOnes",
                &SSM_PARAMETER_READS,
                vec![public],
            ));
            statements.push(deny(
                "DenySecretsOutsideJoinStore",
                &["secretsmanager:GetSecretValue"],
                vec![sm_store],
            ));
        }
    }
    json!({ "Version": "2012-10-17", "Statement": statements })
}

/// The key policy of `join.kms`'s customer-managed key: the account may administer the key
/// but not use it; this cluster's node role may only decrypt, and only through the store's
/// service for this store; the writers may encrypt and decrypt for the store only. (An
/// account-root `kms:*` statement would let any IAM policy in the account grant use.)
fn join_store_kms_key_policy(cluster: &ElasticCluster) -> Option<Value> {
    let spec = &cluster.spec;
    let kms = spec.join.kms.as_ref()?;
    let aws = &spec.aws;
    let r = &aws.region;
    let arns = Arns::of(aws);
    let store = names::join_store(spec, &cluster.metadata.name);
    let node_role = arns.role(&aws.node_role);
    let (service, context) = match spec.join.mode {
        JoinMode::Static => return None,
        JoinMode::Ssm => (
            format!("ssm.{r}.amazonaws.com"),
            json!({ "StringEquals": { "kms:EncryptionContext:PARAMETER_ARN": arns.ssm_parameter(&store) } }),
        ),
        JoinMode::SecretsManager => (
            format!("secretsmanager.{r}.amazonaws.com"),
            json!({ "StringLike": { "kms:EncryptionContext:SecretARN": arns.secret(&store) } }),
        ),
    };
    let mut use_condition = context;
    use_condition["StringEquals"]["kms:ViaService"] = json!(service);
    Some(json!({
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "AccountAdministersButDoesNotUse",
                "Effect": "Allow",
                "Principal": { "AWS": arns.account_root() },
                "Action": [
                    "kms:Create*", "kms:Describe*", "kms:Enable*", "kms:List*", "kms:Put*",
                    "kms:Update*", "kms:Revoke*", "kms:Disable*", "kms:Get*", "kms:Delete*",
                    "kms:TagResource", "kms:UntagResource", "kms:ScheduleKeyDeletion",
                    "kms:CancelKeyDeletion"
                ],
                "Resource": "*"
            },
            {
                "Sid": "NodesDecryptTheJoinStore",
                "Effect": "Allow",
                "Principal": { "AWS": node_role },
                "Action": "kms:Decrypt",
                "Resource": "*",
                "Condition": use_condition
            },
            {
                "Sid": "WritersPublishTheJoinStore",
                "Effect": "Allow",
                "Principal": { "AWS": kms.writer_arns },
                "Action": ["kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey"],
                "Resource": "*",
                "Condition": use_condition
            }
        ]
    }))
}

pub fn render(cluster: &ElasticCluster, bundle: &mut Bundle) -> Result<(), RenderError> {
    let spec = &cluster.spec;
    let aws = &spec.aws;
    bundle.add_json("iam/controller-policy.json", &controller_policy(cluster))?;
    if let Some(policy) = join_store_kms_key_policy(cluster) {
        bundle.add_json("iam/join-store-kms-key-policy.json", &policy)?;
    }
    bundle.add_json(
        "iam/node-role-trust-policy.json",
        &json!({
            "Version": "2012-10-17",
            "Statement": [{
                "Effect": "Allow",
                "Principal": { "Service": "ec2.amazonaws.com" },
                "Action": "sts:AssumeRole"
            }]
        }),
    )?;
    let arns = Arns::of(aws);
    let mut inline = serde_json::Map::new();
    inline.insert("JoinStoreAccess".into(), join_store_policy(cluster));
    bundle.add_json(
        "iam/node-role.json",
        &json!({
            "roleName": aws.node_role,
            "instanceProfileName": aws.node_instance_profile,
            "trustPolicy": "node-role-trust-policy.json",
            // No EKS worker or VPC CNI policies: this is not EKS and the CNI is Kubespray's.
            "managedPolicyArns": [
                arns.managed_policy("AmazonEC2ContainerRegistryPullOnly"),
                arns.managed_policy("AmazonSSMManagedInstanceCore"),
            ],
            "inlinePolicies": inline,
        }),
    )?;
    let controller_identity = match spec.karpenter.credentials.source {
        CredentialSource::InstanceProfile => {
            "attach controller-policy.json to the infra workers' instance profile role"
        }
        CredentialSource::StaticSecret => {
            "attach controller-policy.json to the IAM user whose keys are in the credentials Secret"
        }
    };
    let tag_target = |d: &kk_spec::Discovery, what: &str| match &d.discovery_tag {
        Some(tag) => {
            json!({ "tag": { "key": tag.key, "value": tag.value }, "apply": format!("tag the {what} Karpenter may use in {}", aws.vpc_id) })
        }
        None => json!({ "ids": d.ids, "apply": "selected by ID: no tag needed" }),
    };
    let mut discovery = json!({
        "controllerPolicy": controller_identity,
        "subnets": tag_target(&aws.subnets, "private subnets"),
        "securityGroups": tag_target(&aws.security_groups, "node security group"),
        "controlPlaneSecurityGroup": {
            "id": aws.control_plane_security_group_id,
            "apply": format!(
                "allow TCP {port} from the node security group (and from the load balancer, if it does not preserve client IPs): the apiservers listen on {port} (kube_apiserver_port)",
                port = spec.api_server.port
            ),
        },
        // Karpenter tags what it launches itself (and the EC2NodeClass CEL rules forbid
        // kubernetes.io/cluster tags there); the Kubean-built instances need it by hand.
        "kubeanInstances": {
            "tag": { "key": format!("kubernetes.io/cluster/{}", cluster.metadata.name), "value": "owned" },
            "apply": "tag every Kubean-built instance (control plane, etcd, infra) so the AWS cloud controller manager counts them in this cluster",
        },
        "apiServerLoadBalancer": format!(
            "listen on {dns}:{port} and forward to TCP {port} on every control-plane node",
            dns = spec.api_server.dns_name,
            port = spec.api_server.port
        ),
    });
    // EFA traffic between nodes (NCCL over libfabric) needs every protocol and port open
    // between the EFA interfaces, which carry the node security groups: each group admits all
    // traffic from itself, inbound and outbound (EC2's EFA security-group requirement).
    let efa_pools: Vec<&str> = spec
        .pools
        .iter()
        .filter(|p| p.efa)
        .map(|p| p.name.as_str())
        .collect();
    if !efa_pools.is_empty() {
        discovery["efaSecurityGroups"] = json!({
            "groups": tag_target(&aws.security_groups, "node security group"),
            "pools": efa_pools,
            "apply": "on every node security group: allow all traffic (protocol -1, every port) inbound from itself and outbound to itself",
        });
    }
    bundle.add_json("iam/discovery.json", &discovery)?;
    Ok(())
}
