//! Moving a controller of ours to another namespace without a moment where neither the old
//! nor the new Deployment can lead. The rotator and the CSR approver left Karpenter's
//! namespace for namespaces of their own (issue 47, finding 8); an install made before runs
//! them in Karpenter's, and `apply` moves them.
//!
//! Both Deployments use one Lease (kube-system, named like the controller), so at most one
//! of them leads. The move, for each controller the bundle places elsewhere than it runs:
//! 1. the new Deployment starts while the old keeps its rights: the bindings that name the
//!    controller's service account are applied naming the old account too (the admission
//!    policies render both accounts, so neither is ever unconstrained), and a Secret the new
//!    pods read (the rotator's own AWS keys) is copied from the old namespace;
//! 2. apply waits until the new Deployment has an available pod: a standby that reaches the
//!    apiserver, ready to take the Lease the moment it is free;
//! 3. the old Deployment is deleted and apply waits until its pods are gone (the leader
//!    releases the Lease as it stops; the standby takes it at its next try);
//! 4. the rest of apply applies the bindings as rendered (the new account alone), then
//!    [`retire`] deletes the old service account and the copied Secret's original.
//!
//! A failure before step 3 leaves the old controller running with its rights and the new one
//! inert beside it; re-running apply resumes.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kk_spec::names::{CONTROLLER_LEASE_NAMESPACE as LEASE_NAMESPACE, MANAGED_BY, is_managed};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use serde_json::{Value, json};

/// How long apply waits, by default, for a moved controller's new Deployment to have an
/// available pod (an image pull on a fresh infra worker takes a minute or two).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// How long it waits for the old pods to stop: their grace period (30 s) and some.
const STOP_TIMEOUT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_secs(2);
/// How often a long wait says how it stands.
const PROGRESS_EVERY: Duration = Duration::from_secs(15);

/// One controller the bundle places in `to` while it runs in `from`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The Deployment's and its service account's name.
    pub name: String,
    pub from: String,
    pub to: String,
    /// Secrets the new pods read (`secretKeyRef`, `envFrom`), copied when `to` lacks them.
    pub secrets: Vec<String>,
    /// Whether the old Deployment still runs; `false`: an earlier move stopped it and only its
    /// account (and the Secrets copied from beside it) are left to retire.
    pub running: bool,
}

impl std::fmt::Display for Move {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.running {
            "Deployment"
        } else {
            "what is left of"
        };
        write!(
            f,
            "{what} {} from namespace {} to {}",
            self.name, self.from, self.to
        )
    }
}

/// A move that stopped; the old controller still runs with its rights.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error(
        "{what}: its new Deployment has no available pod after {waited}s (kubectl -n {namespace} describe pods -l app.kubernetes.io/name={name}); the controller keeps running in namespace {from} with its rights"
    )]
    NotAvailable {
        what: String,
        name: String,
        namespace: String,
        from: String,
        waited: u64,
    },
}

/// Our controllers' shape: a Deployment with our label whose service account is named like it.
fn controller_of(value: &Value) -> Option<(String, String, Vec<String>)> {
    if value["apiVersion"] != "apps/v1" || value["kind"] != "Deployment" {
        return None;
    }
    let meta = &value["metadata"];
    if meta["labels"][MANAGED_BY.0] != MANAGED_BY.1 {
        return None;
    }
    let name = meta["name"].as_str()?;
    let namespace = meta["namespace"].as_str()?;
    let pod = &value["spec"]["template"]["spec"];
    if pod["serviceAccountName"].as_str() != Some(name) {
        return None;
    }
    let mut secrets: Vec<String> = Vec::new();
    for container in pod["containers"].as_array().into_iter().flatten() {
        for env in container["env"].as_array().into_iter().flatten() {
            if let Some(s) = env["valueFrom"]["secretKeyRef"]["name"].as_str() {
                secrets.push(s.to_owned());
            }
        }
        for from in container["envFrom"].as_array().into_iter().flatten() {
            if let Some(s) = from["secretRef"]["name"].as_str() {
                secrets.push(s.to_owned());
            }
        }
    }
    secrets.sort();
    secrets.dedup();
    Some((name.to_owned(), namespace.to_owned(), secrets))
}

/// The controllers among `objects` that run today, under the same name and our label, in
/// another namespace, and a note for each look-alike left alone.
///
/// A Deployment is moved only when binding its account for a moment grants nothing new and
/// nothing unconstrained: the live RoleBinding in kube-system that the move widens (the
/// controller's Lease binding, named like it) already names that account, and an admission
/// policy among `objects` constrains it. Anyone may create a Deployment with our name and label
/// in a namespace of theirs; it is never bound, copied from or deleted.
pub async fn find(
    client: &Client,
    objects: &[(String, Value)],
) -> Result<(Vec<Move>, Vec<String>), kube::Error> {
    let deployments: Api<Deployment> = Api::all(client.clone());
    let lease_bindings: Api<RoleBinding> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let mut moves = Vec::new();
    let mut left_alone = Vec::new();
    for (_, value) in objects {
        let Some((name, to, secrets)) = controller_of(value) else {
            continue;
        };
        let params = ListParams::default()
            .fields(&format!("metadata.name={name}"))
            .labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1));
        let mut running_in: Vec<String> = Vec::new();
        for running in deployments.list(&params).await? {
            let from = running.metadata.namespace.clone().unwrap_or_default();
            if from == to || !is_managed(running.metadata.labels.as_ref()) {
                continue;
            }
            running_in.push(from.clone());
            let bound = lease_bindings
                .get_opt(&name)
                .await?
                .and_then(|b| b.subjects)
                .unwrap_or_default()
                .iter()
                .any(|s| {
                    s.kind == "ServiceAccount"
                        && s.name == name
                        && s.namespace.as_deref() == Some(from.as_str())
                });
            let why = if !bound {
                Some(format!(
                    "the RoleBinding {LEASE_NAMESPACE}/{name} does not name its account"
                ))
            } else if !constrained(objects, &from, &name) {
                Some("no admission policy being applied constrains its account".to_owned())
            } else {
                None
            };
            match why {
                Some(why) => left_alone.push(format!(
                    "handover: Deployment {from}/{name} is named and labelled like ours but left alone: {why}"
                )),
                None => moves.push(Move {
                    name: name.clone(),
                    from,
                    to: to.clone(),
                    secrets: secrets.clone(),
                    running: true,
                }),
            }
        }
        // An earlier move that stopped after deleting the old Deployment left its account (and
        // the original of a copied Secret): retire them now. Only where no Deployment of that
        // name runs any more and a policy being applied names the account, as for a move.
        let accounts: Api<ServiceAccount> = Api::all(client.clone());
        for account in accounts.list(&params).await? {
            let from = account.metadata.namespace.clone().unwrap_or_default();
            if from != to
                && !running_in.contains(&from)
                && is_managed(account.metadata.labels.as_ref())
                && constrained(objects, &from, &name)
            {
                moves.push(Move {
                    name: name.clone(),
                    from,
                    to: to.clone(),
                    secrets: secrets.clone(),
                    running: false,
                });
            }
        }
    }
    Ok((moves, left_alone))
}

/// Whether an admission policy of ours among `objects` names the account `namespace`/`name`
/// (as the CEL string literal render writes).
fn constrained(objects: &[(String, Value)], namespace: &str, name: &str) -> bool {
    let literal = format!("'system:serviceaccount:{namespace}:{name}'");
    objects.iter().any(|(_, o)| {
        o["apiVersion"] == "admissionregistration.k8s.io/v1"
            && o["kind"] == "ValidatingAdmissionPolicy"
            && o["metadata"]["labels"][MANAGED_BY.0] == MANAGED_BY.1
            && o["spec"].to_string().contains(&literal)
    })
}

/// `objects` with every binding that names a moved controller's new account naming its old
/// one too (step 1).
pub fn with_old_accounts(objects: &[(String, Value)], moves: &[Move]) -> Vec<(String, Value)> {
    objects
        .iter()
        .map(|(source, value)| {
            let mut value = value.clone();
            let binding = value["apiVersion"] == "rbac.authorization.k8s.io/v1"
                && matches!(value["kind"].as_str(), Some("RoleBinding" | "ClusterRoleBinding"));
            if binding && let Some(subjects) = value["subjects"].as_array_mut() {
                let mut old = Vec::new();
                for s in subjects.iter() {
                    for m in moves.iter().filter(|m| m.running) {
                        if s["kind"] == "ServiceAccount" && s["name"] == *m.name && s["namespace"] == *m.to {
                            old.push(json!({ "kind": "ServiceAccount", "name": m.name, "namespace": m.from }));
                        }
                    }
                }
                subjects.extend(old);
            }
            (source.clone(), value)
        })
        .collect()
}

/// Copies the Secrets a moved controller's pods read into its new namespace, where it lacks
/// them. Only their type and data travel; nothing of them is printed.
pub async fn copy_secrets(
    client: &Client,
    moves: &[Move],
    progress: &mut dyn FnMut(String),
) -> Result<(), kube::Error> {
    for m in moves {
        let old: Api<Secret> = Api::namespaced(client.clone(), &m.from);
        let new: Api<Secret> = Api::namespaced(client.clone(), &m.to);
        for name in &m.secrets {
            if new.get_opt(name).await?.is_some() {
                continue;
            }
            let Some(found) = old.get_opt(name).await? else {
                // The Deployment will wait for it (its pods say which); apply times out saying so.
                progress(format!(
                    "handover: Secret {name} is in neither namespace {} nor {}: create it in {}",
                    m.from, m.to, m.to
                ));
                continue;
            };
            let copy = Secret {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(m.to.clone()),
                    labels: found.metadata.labels.clone(),
                    ..ObjectMeta::default()
                },
                type_: found.type_.clone(),
                data: found.data.clone(),
                immutable: found.immutable,
                string_data: None,
            };
            new.create(&PostParams::default(), &copy).await?;
            progress(format!(
                "handover: copied Secret {name} from namespace {} to {}",
                m.from, m.to
            ));
        }
    }
    Ok(())
}

fn available(d: &Deployment) -> i32 {
    let fresh = match (&d.status, d.metadata.generation) {
        (Some(s), Some(generation)) => s.observed_generation.unwrap_or(0) >= generation,
        _ => false,
    };
    if !fresh {
        return 0;
    }
    d.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

/// Step 2: waits until each moved controller's new Deployment has an available pod.
pub async fn wait_available(
    client: &Client,
    moves: &[Move],
    timeout: Duration,
    progress: &mut dyn FnMut(String),
) -> Result<(), HandoverError> {
    let started = Instant::now();
    for m in moves.iter().filter(|m| m.running) {
        let api: Api<Deployment> = Api::namespaced(client.clone(), &m.to);
        let mut said = Instant::now();
        loop {
            let ready = api.get_opt(&m.name).await?.as_ref().map_or(0, available);
            if ready > 0 {
                progress(format!(
                    "handover: {}/{} has {ready} available pod(s)",
                    m.to, m.name
                ));
                break;
            }
            if started.elapsed() >= timeout {
                return Err(HandoverError::NotAvailable {
                    what: m.to_string(),
                    name: m.name.clone(),
                    namespace: m.to.clone(),
                    from: m.from.clone(),
                    waited: started.elapsed().as_secs(),
                });
            }
            if said.elapsed() >= PROGRESS_EVERY {
                said = Instant::now();
                progress(format!(
                    "handover: waiting for {}/{} to have an available pod ({}s of {}s)",
                    m.to,
                    m.name,
                    started.elapsed().as_secs(),
                    timeout.as_secs()
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }
    Ok(())
}

/// Step 3: deletes each old Deployment and waits (within a bound) until its pods are gone.
pub async fn stop_old(
    client: &Client,
    moves: &[Move],
    progress: &mut dyn FnMut(String),
) -> Result<(), kube::Error> {
    for m in moves.iter().filter(|m| m.running) {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &m.from);
        match deployments
            .delete(&m.name, &DeleteParams::background())
            .await
        {
            Ok(_) => progress(format!(
                "handover: deleted Deployment {}/{}",
                m.from, m.name
            )),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
        let pods: Api<Pod> = Api::namespaced(client.clone(), &m.from);
        let selector = ListParams::default().labels(&format!("app.kubernetes.io/name={}", m.name));
        let started = Instant::now();
        loop {
            let left = pods.list(&selector).await?.items.len();
            if left == 0 {
                break;
            }
            if started.elapsed() >= STOP_TIMEOUT {
                progress(format!(
                    "handover: {left} pod(s) of {}/{} still stopping after {}s; going on (the new Deployment takes the Lease when it expires)",
                    m.from,
                    m.name,
                    STOP_TIMEOUT.as_secs()
                ));
                break;
            }
            tokio::time::sleep(POLL).await;
        }
    }
    Ok(())
}

/// Step 4, after the bindings name the new accounts alone: deletes each old service account
/// and the originals of the Secrets copied from its namespace.
pub async fn retire(
    client: &Client,
    moves: &[Move],
    progress: &mut dyn FnMut(String),
) -> Result<(), kube::Error> {
    for m in moves {
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &m.from);
        if let Some(account) = accounts.get_opt(&m.name).await?
            && is_managed(account.metadata.labels.as_ref())
        {
            accounts.delete(&m.name, &DeleteParams::default()).await?;
            progress(format!(
                "handover: deleted ServiceAccount {}/{}",
                m.from, m.name
            ));
        }
        let old: Api<Secret> = Api::namespaced(client.clone(), &m.from);
        let new: Api<Secret> = Api::namespaced(client.clone(), &m.to);
        for name in &m.secrets {
            // Only once the copy exists: the keys must not be lost.
            if new.get_opt(name).await?.is_some() && old.get_opt(name).await?.is_some() {
                old.delete(name, &DeleteParams::default()).await?;
                progress(format!(
                    "handover: deleted Secret {}/{name} (now in namespace {})",
                    m.from, m.to
                ));
            }
        }
    }
    Ok(())
}

/// The moves, for messages.
pub fn summary(moves: &[Move]) -> String {
    moves
        .iter()
        .map(Move::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered() -> Vec<(String, Value)> {
        vec![
            (
                "a".into(),
                json!({
                    "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": { "name": "ctl", "namespace": "ctl", "labels": { MANAGED_BY.0: MANAGED_BY.1 } },
                    "spec": { "template": { "spec": { "serviceAccountName": "ctl", "containers": [{
                        "name": "c",
                        "env": [{ "name": "K", "valueFrom": { "secretKeyRef": { "name": "keys", "key": "K" } } }],
                    }] } } },
                }),
            ),
            (
                "b".into(),
                json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": { "name": "ctl" },
                    "subjects": [{ "kind": "ServiceAccount", "name": "ctl", "namespace": "ctl" }],
                }),
            ),
        ]
    }

    #[test]
    fn a_controller_is_ours_named_deployment_and_names_the_secrets_it_reads() {
        let objects = rendered();
        assert_eq!(
            controller_of(&objects[0].1),
            Some(("ctl".into(), "ctl".into(), vec!["keys".into()]))
        );
        let mut foreign = objects[0].1.clone();
        foreign["metadata"]["labels"] = json!({});
        assert_eq!(controller_of(&foreign), None);
        let mut other_account = objects[0].1.clone();
        other_account["spec"]["template"]["spec"]["serviceAccountName"] = json!("default");
        assert_eq!(controller_of(&other_account), None);
    }

    #[test]
    fn only_an_account_one_of_our_policies_names_counts_as_constrained() {
        let policy = json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": { "name": "ctl", "labels": { MANAGED_BY.0: MANAGED_BY.1 } },
            "spec": { "validations": [{ "expression": "!(request.userInfo.username in ['system:serviceaccount:ctl:ctl', 'system:serviceaccount:karpenter:ctl']) || true" }] },
        });
        let objects = vec![("p".to_owned(), policy.clone())];
        assert!(constrained(&objects, "karpenter", "ctl"));
        assert!(!constrained(&objects, "evil", "ctl"));
        assert!(!constrained(&objects, "karpenter", "ct"));
        let mut foreign = policy;
        foreign["metadata"]["labels"] = json!({});
        assert!(!constrained(
            &[("p".to_owned(), foreign)],
            "karpenter",
            "ctl"
        ));
    }

    #[test]
    fn during_a_move_the_bindings_name_the_old_account_as_well() {
        let moves = [Move {
            name: "ctl".into(),
            from: "karpenter".into(),
            to: "ctl".into(),
            secrets: vec![],
            running: true,
        }];
        let both = with_old_accounts(&rendered(), &moves);
        assert_eq!(
            both[1].1["subjects"],
            json!([
                { "kind": "ServiceAccount", "name": "ctl", "namespace": "ctl" },
                { "kind": "ServiceAccount", "name": "ctl", "namespace": "karpenter" },
            ])
        );
        assert_eq!(both[0].1, rendered()[0].1);
        assert_eq!(with_old_accounts(&rendered(), &[]), rendered());
    }
}
