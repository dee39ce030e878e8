//! Reads, once, everything the checks judge. Only get/list/describe calls (see
//! `kk_doctor::permissions`). A source that cannot be read is kept as its error, and the checks
//! that need it are skipped with that reason.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use kk_spec::names::instance_id;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use kk_doctor::Facts;
use kk_doctor::snapshot::{
    Binding, Instance, Rbac, Read, ReadError, Snapshot, StoredJoin, VpcEndpoint,
};

use crate::aws_error::AwsCallError;
use crate::aws_read::{PolicyDocumentError, policy_document};
use crate::store::JoinStore;
use crate::token::{self, BootstrapToken};

pub use crate::node_network::{Ingress, SecurityGroup};

/// Why gathering could not read something, typed; the snapshot carries it as a
/// [`ReadError`], whose text is this one, and the checks that need the value are skipped.
#[derive(Debug, thiserror::Error)]
pub enum GatherError {
    // The call error is the source, not hidden: the CLI reads refusal vs outage from it.
    #[error("{0}")]
    Kube(#[from] crate::kube_error::KubeCallError),
    // The call error is the source, not hidden: the CLI reads refusal vs outage from it.
    #[error("{0}")]
    Aws(#[from] AwsCallError),
    #[error("{call}: no {thing}")]
    Missing { call: String, thing: String },
    #[error("no AWS configuration (region/credentials)")]
    NoAwsConfig,
    #[error(transparent)]
    Policy(#[from] PolicyDocumentError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    CaHash(#[from] crate::cahash::CaHashError),
    #[error(transparent)]
    Token(#[from] crate::token::TokenError),
}

impl From<GatherError> for ReadError {
    fn from(error: GatherError) -> Self {
        ReadError::new(error)
    }
}

/// A value for the snapshot: the typed error becomes the [`ReadError`] the checks show.
fn read<T>(gathered: Gathered<T>) -> Read<T> {
    gathered.map_err(ReadError::from)
}

/// A gathered value, or the typed error met reading it.
type Gathered<T> = Result<T, GatherError>;

async fn vpc_endpoints(ec2: &aws_sdk_ec2::Client, vpc: &str) -> Gathered<Vec<VpcEndpoint>> {
    let call = "ec2:DescribeVpcEndpoints";
    let mut found = Vec::new();
    let mut pages = ec2
        .describe_vpc_endpoints()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("vpc-id")
                .values(vpc)
                .build(),
        )
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| AwsCallError::from_sdk(call, &e))?;
        for e in page.vpc_endpoints() {
            // Filtered by VPC already; kept for an API that ignores the filter.
            if e.vpc_id() != Some(vpc) {
                continue;
            }
            found.push(VpcEndpoint {
                service_name: e.service_name().unwrap_or_default().to_owned(),
                kind: e
                    .vpc_endpoint_type()
                    .map(|t| t.as_str().to_owned())
                    .unwrap_or_default(),
                state: e
                    .state()
                    .map(|s| s.as_str().to_lowercase())
                    .unwrap_or_default(),
            });
        }
    }
    Ok(found)
}

fn kube_err(what: &str, e: kube::Error) -> GatherError {
    GatherError::Kube(crate::kube_error::KubeCallError::from_kube(what, e))
}

fn dynamic(client: &Client, group: &str, version: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

async fn list_dynamic(client: &Client, group: &str, kind: &str) -> Gathered<Vec<DynamicObject>> {
    dynamic(client, group, "v1", kind)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|e| kube_err(&format!("list {kind}s"), e))
}

async fn rbac(client: &Client) -> Gathered<Rbac> {
    let mut out = Rbac::default();
    let crbs: Api<ClusterRoleBinding> = Api::all(client.clone());
    for b in crbs
        .list(&ListParams::default())
        .await
        .map_err(|e| kube_err("list ClusterRoleBindings", e))?
    {
        out.bindings.push(Binding {
            namespace: None,
            name: b.metadata.name.unwrap_or_default(),
            role_kind: b.role_ref.kind,
            role: b.role_ref.name,
            subjects: b.subjects.unwrap_or_default(),
        });
    }
    let crs: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    for r in crs
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| kube_err("list ClusterRoles", e))?
    {
        out.roles.insert(format!(
            "ClusterRole/{}",
            r.metadata.name.unwrap_or_default()
        ));
    }
    for ns in ["kube-system", "kube-public"] {
        let rbs: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
        for b in rbs
            .list(&ListParams::default())
            .await
            .map_err(|e| kube_err(&format!("list RoleBindings in {ns}"), e))?
        {
            out.bindings.push(Binding {
                namespace: Some(ns.to_owned()),
                name: b.metadata.name.unwrap_or_default(),
                role_kind: b.role_ref.kind,
                role: b.role_ref.name,
                subjects: b.subjects.unwrap_or_default(),
            });
        }
        let roles: Api<k8s_openapi::api::rbac::v1::Role> = Api::namespaced(client.clone(), ns);
        for r in roles
            .list_metadata(&ListParams::default())
            .await
            .map_err(|e| kube_err(&format!("list Roles in {ns}"), e))?
        {
            out.roles
                .insert(format!("Role/{ns}/{}", r.metadata.name.unwrap_or_default()));
        }
    }
    Ok(out)
}

async fn instances(
    ec2: &aws_sdk_ec2::Client,
    ids: &BTreeSet<String>,
) -> Gathered<BTreeMap<String, Instance>> {
    let mut out = BTreeMap::new();
    if ids.is_empty() {
        return Ok(out);
    }
    // One DescribeInstances with a filter, so that an ID moto or EC2 no longer knows is simply
    // absent from the answer (InstanceIds would refuse the whole call).
    let mut next: Option<String> = None;
    loop {
        let out_page = ec2
            .describe_instances()
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name("instance-id")
                    .set_values(Some(ids.iter().cloned().collect()))
                    .build(),
            )
            .set_next_token(next.clone())
            .send()
            .await
            .map_err(|e| AwsCallError::from_sdk("ec2:DescribeInstances", &e))?;
        for r in out_page.reservations() {
            for i in r.instances() {
                let id = i.instance_id().unwrap_or_default().to_owned();
                out.insert(
                    id,
                    Instance {
                        state: i
                            .state()
                            .and_then(|s| s.name())
                            .map(|n| n.as_str().to_owned())
                            .unwrap_or_default(),
                        tags: i
                            .tags()
                            .iter()
                            .map(|t| {
                                (
                                    t.key().unwrap_or_default().to_owned(),
                                    t.value().unwrap_or_default().to_owned(),
                                )
                            })
                            .collect(),
                        hop_limit: i
                            .metadata_options()
                            .and_then(|m| m.http_put_response_hop_limit()),
                        http_tokens: i
                            .metadata_options()
                            .and_then(|m| m.http_tokens())
                            .map(|t| t.as_str().to_owned()),
                    },
                );
            }
        }
        next = out_page.next_token().map(str::to_owned);
        if next.is_none() {
            return Ok(out);
        }
    }
}

async fn control_plane_sg(ec2: &aws_sdk_ec2::Client, id: &str) -> Gathered<SecurityGroup> {
    let out = ec2
        .describe_security_groups()
        .group_ids(id)
        .send()
        .await
        .map_err(|e| AwsCallError::from_sdk("ec2:DescribeSecurityGroups", &e))?;
    out.security_groups()
        .first()
        .map(crate::node_network::security_group)
        .ok_or_else(|| GatherError::Missing {
            call: "ec2:DescribeSecurityGroups".into(),
            thing: format!("security group {id}"),
        })
}

async fn node_sgs(ec2: &aws_sdk_ec2::Client, facts: &Facts) -> Gathered<Vec<SecurityGroup>> {
    let mut found = Vec::new();
    if !facts.network.node_security_group_ids.is_empty() {
        let out = ec2
            .describe_security_groups()
            .set_group_ids(Some(facts.network.node_security_group_ids.clone()))
            .send()
            .await
            .map_err(|e| AwsCallError::from_sdk("ec2:DescribeSecurityGroups", &e))?;
        found.extend(
            out.security_groups()
                .iter()
                .map(crate::node_network::security_group),
        );
    }
    if let Some((key, value)) = &facts.network.node_security_group_tag {
        found.extend(crate::node_network::security_groups_tagged(ec2, key, value).await?);
    }
    Ok(found)
}

/// The role's inline and attached (default version) policies, by name.
pub async fn role_policies(
    iam: &aws_sdk_iam::Client,
    role: &str,
) -> Gathered<Vec<(String, Value)>> {
    let mut out = Vec::new();
    let inline = iam
        .list_role_policies()
        .role_name(role)
        .send()
        .await
        .map_err(|e| AwsCallError::from_sdk("iam:ListRolePolicies", &e))?;
    for name in inline.policy_names() {
        let p = iam
            .get_role_policy()
            .role_name(role)
            .policy_name(name)
            .send()
            .await
            .map_err(|e| AwsCallError::from_sdk("iam:GetRolePolicy", &e))?;
        out.push((
            format!("{role}/{name}"),
            policy_document(p.policy_document())?,
        ));
    }
    let attached = iam
        .list_attached_role_policies()
        .role_name(role)
        .send()
        .await
        .map_err(|e| AwsCallError::from_sdk("iam:ListAttachedRolePolicies", &e))?;
    for a in attached.attached_policies() {
        let arn = a.policy_arn().unwrap_or_default();
        let policy = iam
            .get_policy()
            .policy_arn(arn)
            .send()
            .await
            .map_err(|e| AwsCallError::from_sdk("iam:GetPolicy", &e))?;
        let version = policy
            .policy()
            .and_then(|p| p.default_version_id())
            .unwrap_or("v1")
            .to_owned();
        let v = iam
            .get_policy_version()
            .policy_arn(arn)
            .version_id(&version)
            .send()
            .await
            .map_err(|e| AwsCallError::from_sdk("iam:GetPolicyVersion", &e))?;
        let doc = v
            .policy_version()
            .and_then(|v| v.document())
            .ok_or_else(|| GatherError::Missing {
                call: format!("iam:GetPolicyVersion {arn}"),
                thing: "document".into(),
            })?;
        out.push((arn.to_owned(), policy_document(doc)?));
    }
    Ok(out)
}

/// Reads the cluster and (with `aws`) the account.
pub async fn gather(
    client: &Client,
    probe: &kube::Config,
    aws: Option<&aws_config::SdkConfig>,
    facts: &Facts,
) -> Snapshot {
    let nodes_api: Api<Node> = Api::all(client.clone());
    let pods_api: Api<Pod> = Api::all(client.clone());
    let pdbs_api: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> = Api::all(client.clone());
    let events_api: Api<Event> = Api::all(client.clone());
    let cm_public: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-public");
    let cm_system: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let all = ListParams::default();
    let warnings = ListParams::default().fields("type=Warning");
    let (server_version, nodes, pods, pdbs, events, nodeclaims, nodepools, nodeclasses) = tokio::join!(
        client.apiserver_version(),
        nodes_api.list(&all),
        pods_api.list(&all),
        pdbs_api.list(&all),
        events_api.list(&warnings),
        list_dynamic(client, "karpenter.sh", "NodeClaim"),
        list_dynamic(client, "karpenter.sh", "NodePool"),
        list_dynamic(client, "karpenter.k8s.aws", "EC2NodeClass"),
    );
    let daemonsets_api: Api<k8s_openapi::api::apps::v1::DaemonSet> = Api::all(client.clone());
    let deployments_api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::all(client.clone());
    let (cluster_info, ccm_config, budget_record, ca_hash, rbac, daemonsets, deployments) = tokio::join!(
        cm_public.get_opt("cluster-info"),
        cm_system.get_opt("aws-cloud-controller-manager-config"),
        cm_system.get_opt(kk_spec::names::BUDGET),
        crate::cahash::from_cluster(client, "kube-system"),
        rbac(client),
        daemonsets_api.list(&all),
        deployments_api.list(&all),
    );
    let nodes = nodes
        .map(|l| l.items)
        .map_err(|e| kube_err("list Nodes", e));
    let store = match &facts.store {
        None => None,
        Some((kind, name)) => Some(match aws {
            None => Err(GatherError::NoAwsConfig),
            Some(sdk) => JoinStore::new(*kind, name, &facts.cluster, sdk)
                .read()
                .await
                .map_err(GatherError::from),
        }),
    };
    let token: Option<BootstrapToken> = match &store {
        Some(Ok(Some(config))) => Some(config.token.clone()),
        Some(_) => None,
        // A malformed static token is judged from the spec (its ID); nothing to authenticate.
        None => facts
            .static_token
            .as_ref()
            .and_then(|t| BootstrapToken::parse(t.expose()).ok()),
    };
    let join_token = match token {
        None => None,
        Some(t) => Some((
            t.id().to_owned(),
            read(
                token::authenticate(probe, &t)
                    .await
                    .map_err(GatherError::from),
            ),
        )),
    };
    // The snapshot holds what the checks judge of the store, never the token's secret.
    let store = store.map(|stored| {
        read(stored.map(|config| {
            config.map(|c| StoredJoin {
                token_id: c.token.id().to_owned(),
                ca_cert_hash: c.ca_cert_hash,
                expiration: c.expiration,
            })
        }))
    });
    let (mut instances_read, mut cp_sg, mut node_sg, mut policies) = (None, None, None, None);
    let mut interruption = None;
    let mut endpoints = None;
    if let Some(sdk) = aws {
        let ec2 = aws_sdk_ec2::Client::new(sdk);
        let mut ids = BTreeSet::new();
        if let Ok(nodes) = &nodes {
            ids.extend(
                nodes
                    .iter()
                    .filter_map(|n| n.spec.as_ref()?.provider_id.as_deref())
                    .filter_map(instance_id)
                    .map(str::to_owned),
            );
        }
        if let Ok(claims) = &nodeclaims {
            ids.extend(
                claims
                    .iter()
                    .filter_map(|c| c.data["status"]["providerID"].as_str())
                    .filter_map(instance_id)
                    .map(str::to_owned),
            );
        }
        let (i, c, n) = tokio::join!(
            instances(&ec2, &ids),
            control_plane_sg(&ec2, &facts.network.control_plane_security_group),
            node_sgs(&ec2, facts),
        );
        instances_read = Some(i);
        cp_sg = Some(c);
        node_sg = Some(n);
        if let Some(role) = &facts.controller_role {
            policies = Some(role_policies(&aws_sdk_iam::Client::new(sdk), role).await);
        }
        interruption = super::gather_interruption::read(sdk, facts).await;
        if !facts.vpc_endpoints.is_empty() {
            endpoints = Some(vpc_endpoints(&ec2, &facts.vpc_id).await);
        }
    }
    Snapshot {
        now: jiff::Timestamp::now(),
        server_version: read(
            server_version
                .map(|v| v.git_version)
                .map_err(|e| kube_err("GET /version", e)),
        ),
        nodes: read(nodes),
        pods: read(pods.map(|l| l.items).map_err(|e| kube_err("list Pods", e))),
        daemonsets: read(
            daemonsets
                .map(|l| l.items)
                .map_err(|e| kube_err("list DaemonSets", e)),
        ),
        deployments: read(
            deployments
                .map(|l| l.items)
                .map_err(|e| kube_err("list Deployments", e)),
        ),
        pdbs: read(
            pdbs.map(|l| l.items)
                .map_err(|e| kube_err("list PodDisruptionBudgets", e)),
        ),
        warning_events: read(
            events
                .map(|l| l.items)
                .map_err(|e| kube_err("list Events", e)),
        ),
        nodeclaims: read(nodeclaims),
        nodepools: read(nodepools),
        nodeclasses: read(nodeclasses),
        cluster_info: read(cluster_info.map_err(|e| kube_err("get kube-public/cluster-info", e))),
        ccm_config: read(
            ccm_config
                .map_err(|e| kube_err("get kube-system/aws-cloud-controller-manager-config", e)),
        ),
        budget_record: read(
            budget_record.map_err(|e| kube_err("get kube-system/kubean-karpenter-budget", e)),
        ),
        cluster_ca_hash: read(ca_hash.map_err(GatherError::from)),
        join_token,
        rbac: read(rbac),
        store,
        instances: instances_read.map(read),
        control_plane_sg: cp_sg.map(read),
        node_sgs: node_sg.map(read),
        controller_policies: policies.map(read),
        interruption: interruption.map(read),
        vpc_endpoints: endpoints.map(read),
    }
}
