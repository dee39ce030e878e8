//! The budget controller on the testbed's real apiserver (#51). Its identity — the rendered
//! service account — writes one limit of a budgeted NodePool and nothing else: every attack a
//! stolen token could try (create or delete a NodeClaim, create, delete or reshape a NodePool,
//! raise a limit past the spec's, touch an unbudgeted pool, read a Secret, run a Pod) is
//! performed and refused. The launch policy holds a budgeted pool's NodeClaims until the
//! controller, running in this process under that identity, has written the pool's limit and
//! recorded it; and, the controller silent past `staleAfter`, refuses them again (with
//! `onControllerDown: allow`, admits them, but still not a pool it never recorded). `apply` of
//! the same NodePool leaves the controller's limit alone, and once the budget is removed it
//! hands the limit back before writing the pool's own.
//! The controller's judge here is a fixed one (its pricing is kk-sim's, tested there and in
//! the CLI's tests); what this test proves is the identity, the policies and the loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use kk_live::controller::LeaseConfig;
use kk_live::controller::budget::{BudgetConfig, BudgetController, Judge, PoolVerdict};
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use serde_json::{Value, json};

use crate::common::*;

const BUDGET: &str = kk_spec::names::BUDGET;

fn forbidden<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>) {
    match result {
        Err(kube::Error::Api(s)) if s.code == 403 => {
            eprintln!("refused as expected: {what}: {}", s.message);
        }
        other => panic!("{what}: expected 403, got {other:?}"),
    }
}

fn api(client: &Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", kind);
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

/// The budgets fixture with pools named for this run, rendered with the fixtures' CA.
fn bundle(suffix: &str) -> (Vec<(String, Value)>, String, String) {
    let lab = format!("budget-lab-{suffix}");
    let gpu = format!("inference-{suffix}");
    let text = std::fs::read_to_string(repo().join("fixtures/specs/budgets.yaml"))
        .unwrap()
        .replace("name: budget-lab", &format!("name: {lab}"))
        .replace("name: inference", &format!("name: {gpu}"));
    let cluster = kk_spec::parse_spec(&text, "budgets.yaml").unwrap().spec;
    let ca = std::fs::read(repo().join("fixtures/specs/pki/ca.crt")).unwrap();
    let manifests = kk_render::render(&cluster, &ca).unwrap().manifests();
    let wanted = [
        format!("namespaces/{BUDGET}.yaml"),
        "rotator/budget.yaml".to_owned(),
        format!("nodepools/{lab}.yaml"),
        format!("nodepools/{gpu}.yaml"),
    ];
    let objects = manifests
        .into_iter()
        .filter(|(path, _)| wanted.contains(path))
        .collect();
    (objects, lab, gpu)
}

async fn install(admin: &Client, objects: &[(String, Value)]) {
    let (namespaces, rest): (Vec<_>, Vec<_>) = objects
        .iter()
        .cloned()
        .partition(|(_, o)| o["kind"] == "Namespace");
    for objects in [namespaces, rest] {
        kk_live::apply::apply_all(
            admin,
            &objects,
            &kk_live::apply::ApplyOptions {
                force_conflicts: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    }
}

async fn budget_token(admin: &Client) -> String {
    let accounts: Api<ServiceAccount> =
        Api::namespaced(admin.clone(), kk_spec::names::controller_namespace(BUDGET));
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(900),
            bound_object_ref: None,
        },
        ..Default::default()
    };
    let issued: TokenRequest = accounts
        .create_subresource("token", BUDGET, &PostParams::default(), &request)
        .await
        .unwrap();
    issued.status.unwrap().token
}

fn node_claim(pool: &str, uid: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {
            "generateName": format!("{pool}-"),
            "labels": { "karpenter.sh/nodepool": pool },
            "ownerReferences": [{ "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": pool, "uid": uid }],
        },
        "spec": {
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "absent" },
            "requirements": [{ "key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"] }],
        },
    }))
    .unwrap()
}

/// A judge with fixed limits (kk-sim's pricing is tested elsewhere).
struct Fixed(Vec<PoolVerdict>);

impl Judge for Fixed {
    fn judge(&self, documents: &[(String, String)]) -> Result<Vec<PoolVerdict>, String> {
        // The uids come from the documents, as the real judge reads them.
        let mut verdicts = self.0.clone();
        for (_, text) in documents {
            let list: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
            for item in list["items"].as_array().into_iter().flatten() {
                for v in &mut verdicts {
                    if item["kind"] == "NodePool" && item["metadata"]["name"] == v.pool.as_str() {
                        v.uid = item["metadata"]["uid"].as_str().unwrap_or("").to_owned();
                    }
                }
            }
        }
        Ok(verdicts)
    }
}

fn verdict(pool: &str, resource: &str, limit: &str) -> PoolVerdict {
    PoolVerdict {
        pool: pool.to_owned(),
        uid: String::new(),
        resource: resource.to_owned(),
        limit: Some(limit.to_owned()),
        budget: 0.2,
        spend: 0.0,
        warn_percent: 80,
        exhausted: None,
        problem: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_controller_writes_one_limit_and_launches_nothing() {
    let Some(testbed) = kk_testkit::testbed::require(&repo(), "the budget controller") else {
        return;
    };
    let admin = admin(&testbed).await;
    let suffix = unique();
    let (objects, lab, gpu) = bundle(&suffix);
    install(&admin, &objects).await;
    let pools_admin = api(&admin, "NodePool", "nodepools");
    let claims_admin = api(&admin, "NodeClaim", "nodeclaims");
    let lab_uid = pools_admin.get(&lab).await.unwrap().metadata.uid.unwrap();
    // An unbudgeted pool beside them.
    let plain = format!("plain-{suffix}");
    let mut plain_pool = objects
        .iter()
        .find(|(p, _)| *p == format!("nodepools/{lab}.yaml"))
        .unwrap()
        .1
        .clone();
    plain_pool["metadata"] = json!({ "name": plain });
    pools_admin
        .create(
            &PostParams::default(),
            &serde_json::from_value(plain_pool).unwrap(),
        )
        .await
        .unwrap();
    let plain_uid = pools_admin.get(&plain).await.unwrap().metadata.uid.unwrap();
    // Rendered without the budget's limit: the controller owns it.
    let rendered = pools_admin.get(&lab).await.unwrap();
    assert!(rendered.data["spec"]["limits"].get("cpu").is_none());

    let token = budget_token(&admin).await;
    let attacker = kk_testkit::clients::bearer(&testbed.kubeconfig, &token).await;
    let pools = api(&attacker, "NodePool", "nodepools");
    let claims = api(&attacker, "NodeClaim", "nodeclaims");
    let ssa = PatchParams::apply(BUDGET).force();
    let limit = |pool: &str, key: &str, value: &str| {
        json!({ "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": { "name": pool },
                "spec": { "limits": { key: value } } })
    };
    // The policy takes effect within moments of being applied (an earlier run's, naming other
    // pools, may still be in force): wait until a dry run shows this one, refusing another
    // limit and admitting the budget's.
    let dry = PatchParams {
        dry_run: true,
        ..PatchParams::apply(BUDGET).force()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let other = pools
            .patch(&lab, &dry, &Patch::Apply(&limit(&lab, "memory", "1Ti")))
            .await;
        let own = pools
            .patch(&lab, &dry, &Patch::Apply(&limit(&lab, "cpu", "4")))
            .await;
        match (&other, &own) {
            (Err(kube::Error::Api(s)), Ok(_)) if s.code == 403 => break,
            _ => assert!(
                Instant::now() < deadline,
                "the policy never took effect: {other:?} {own:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Allowed: its own limit on its own pool.
    pools
        .patch(&lab, &ssa, &Patch::Apply(&limit(&lab, "cpu", "4")))
        .await
        .unwrap();

    // Refused: everything else.
    forbidden(
        "create a NodeClaim",
        claims
            .create(&PostParams::default(), &node_claim(&plain, &plain_uid))
            .await,
    );
    let victim = claims_admin
        .create(&PostParams::default(), &node_claim(&plain, &plain_uid))
        .await
        .unwrap();
    let victim_name = victim.metadata.name.clone().unwrap();
    forbidden(
        "delete a NodeClaim",
        claims.delete(&victim_name, &DeleteParams::default()).await,
    );
    forbidden(
        "patch a NodeClaim",
        claims
            .patch(
                &victim_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
            )
            .await,
    );
    forbidden(
        "delete a NodePool",
        pools.delete(&lab, &DeleteParams::default()).await,
    );
    let fresh = format!("fresh-{suffix}");
    let mut new_pool = rendered.clone();
    new_pool.metadata = kube::api::ObjectMeta {
        name: Some(fresh.clone()),
        ..Default::default()
    };
    forbidden(
        "create a NodePool",
        pools.create(&PostParams::default(), &new_pool).await,
    );
    // A server-side apply of a whole NodePool that does not exist yet is a create.
    let mut whole = serde_json::to_value(&new_pool).unwrap();
    whole["apiVersion"] = json!("karpenter.sh/v1");
    whole["kind"] = json!("NodePool");
    forbidden(
        "create a NodePool by server-side apply",
        pools.patch(&fresh, &ssa, &Patch::Apply(&whole)).await,
    );
    for (what, patch) in [
        (
            "widen the template's requirements",
            json!({"spec": {"template": {"spec": {"requirements": [{"key": "kubernetes.io/arch", "operator": "Exists"}]}}}}),
        ),
        (
            "change the disruption settings",
            json!({"spec": {"disruption": {"consolidateAfter": "1s"}}}),
        ),
        // (`replicas` on a dynamic pool the CRD itself refuses; the policy guards it too.)
        ("change the weight", json!({"spec": {"weight": 100}})),
        (
            "add an annotation",
            json!({"metadata": {"annotations": {"kubean-karpenter.io/budget-per-hour": "999"}}}),
        ),
        ("add a label", json!({"metadata": {"labels": {"x": "y"}}})),
        (
            "write another limit",
            json!({"spec": {"limits": {"memory": "1Ti"}}}),
        ),
    ] {
        forbidden(
            what,
            pools
                .patch(&lab, &PatchParams::default(), &Patch::Merge(&patch))
                .await,
        );
    }
    forbidden(
        "write the limit of an unbudgeted pool",
        pools
            .patch(&plain, &ssa, &Patch::Apply(&limit(&plain, "cpu", "4")))
            .await,
    );
    forbidden(
        "raise a GPU limit past the spec's own (8)",
        pools
            .patch(
                &gpu,
                &ssa,
                &Patch::Apply(&limit(&gpu, "nvidia.com/gpu", "9")),
            )
            .await,
    );
    forbidden(
        "patch a NodePool's status",
        pools
            .patch_status(
                &lab,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"resources": {"cpu": "0"}}})),
            )
            .await,
    );
    let secrets: Api<Secret> = Api::namespaced(attacker.clone(), "kube-system");
    forbidden("list Secrets", secrets.list(&ListParams::default()).await);
    let pods: Api<Pod> = Api::namespaced(
        attacker.clone(),
        kk_spec::names::controller_namespace(BUDGET),
    );
    forbidden(
        "create a Pod",
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "x"}, "spec": {"containers": [{"name": "x", "image": "x"}]}}))
                .unwrap(),
        )
        .await,
    );
    let maps: Api<ConfigMap> = Api::namespaced(attacker.clone(), "kube-system");
    forbidden(
        "read another ConfigMap",
        maps.get("kubean-karpenter-csr-approvals").await,
    );

    // The launch policy: nothing recorded yet, so a budgeted pool's NodeClaim waits; an
    // unbudgeted pool's is admitted.
    let held = claims_admin
        .create(&PostParams::default(), &node_claim(&lab, &lab_uid))
        .await;
    match &held {
        Err(kube::Error::Api(s)) if s.code == 403 => assert!(
            s.message.contains("its spend budget is not enforced yet"),
            "{}",
            s.message
        ),
        other => panic!("a budgeted pool launched before its budget was enforced: {other:?}"),
    }

    // The controller, under its own identity, writes the limits and records them.
    let mut config = kube_config(&testbed).await;
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.clone().into()),
        ..Default::default()
    };
    let judge = Arc::new(Fixed(vec![
        verdict(&lab, "cpu", "4166m"),
        verdict(&gpu, "nvidia.com/gpu", "4"),
    ]));
    let controller = BudgetController::new(
        config,
        BudgetConfig {
            tick: Duration::from_secs(1),
            record_namespace: "kube-system".into(),
            lease: LeaseConfig {
                namespace: "kube-system".into(),
                name: BUDGET.into(),
                identity: format!("test-{suffix}"),
                duration: Duration::from_secs(6),
            },
        },
        judge,
    )
    .unwrap();
    let metrics = controller.metrics();
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(controller.run(async move {
        let _ = stop_rx.changed().await;
    }));
    let records: Api<ConfigMap> = Api::namespaced(admin.clone(), "kube-system");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let record = records.get(BUDGET).await.unwrap();
        let data = record.data.unwrap_or_default();
        if data.get(&format!("enforced.{lab}")) == Some(&lab_uid) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the controller recorded nothing: {data:?} (errors {})",
            metrics.errors()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let written = pools_admin.get(&lab).await.unwrap();
    assert_eq!(written.data["spec"]["limits"]["cpu"], "4166m");
    let owners: Vec<&str> = written
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:spec/f:limits/f:cpu").is_some())
        })
        .filter_map(|m| m.manager.as_deref())
        .collect();
    assert_eq!(owners, [BUDGET], "the limit's field manager");
    assert_eq!(
        pools_admin.get(&gpu).await.unwrap().data["spec"]["limits"]["nvidia.com/gpu"],
        "4"
    );
    let launched = claims_admin
        .create(&PostParams::default(), &node_claim(&lab, &lab_uid))
        .await
        .expect("a launch within an enforced budget is admitted");
    let plain_claim = claims_admin
        .create(&PostParams::default(), &node_claim(&plain, &plain_uid))
        .await
        .expect("an unbudgeted pool launches as ever");

    // Silent controller (deny mode): the heartbeat goes stale and launches wait again.
    let _ = stop_tx.send(true);
    running.await.unwrap();
    records
        .patch(
            BUDGET,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"heartbeat": "2026-01-01T00:00:00Z"}})),
        )
        .await
        .unwrap();
    match claims_admin
        .create(&PostParams::default(), &node_claim(&lab, &lab_uid))
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 403 => assert!(
            s.message.contains("silent since 2026-01-01T00:00:00Z"),
            "{}",
            s.message
        ),
        other => panic!("a silent controller's pool launched: {other:?}"),
    }
    // onControllerDown: allow — the same silence admits launches (within the last limits).
    let allow_text = std::fs::read_to_string(repo().join("fixtures/specs/budgets.yaml"))
        .unwrap()
        .replace("onControllerDown: deny", "onControllerDown: allow")
        .replace("name: budget-lab", &format!("name: {lab}"))
        .replace("name: inference", &format!("name: {gpu}"));
    let allow = kk_spec::parse_spec(&allow_text, "budgets.yaml")
        .unwrap()
        .spec;
    let ca = std::fs::read(repo().join("fixtures/specs/pki/ca.crt")).unwrap();
    let launch_policy: Vec<(String, Value)> = kk_render::render(&allow, &ca)
        .unwrap()
        .manifests()
        .into_iter()
        .filter(|(p, o)| {
            p == "rotator/budget.yaml"
                && o["kind"] == "ValidatingAdmissionPolicy"
                && o["metadata"]["name"] == kk_spec::names::BUDGET_LAUNCH_POLICY
        })
        .collect();
    assert_eq!(launch_policy.len(), 1);
    install(&admin, &launch_policy).await;
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match claims_admin.create(&dry, &node_claim(&lab, &lab_uid)).await {
            Ok(_) => break,
            other => assert!(
                Instant::now() < deadline,
                "allow mode never admitted a launch with a stale heartbeat: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Still not a pool the controller never recorded.
    records
        .patch(
            BUDGET,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {format!("enforced.{lab}"): null}})),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match claims_admin.create(&dry, &node_claim(&lab, &lab_uid)).await {
            Err(kube::Error::Api(s)) if s.code == 403 => break,
            other => assert!(
                Instant::now() < deadline,
                "allow mode launched a pool its controller never recorded: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // apply and the controller share the NodePool: applying the budgeted pool again (without
    // taking conflicts over) succeeds and leaves the controller's limit alone.
    let lab_object = objects
        .iter()
        .find(|(p, _)| *p == format!("nodepools/{lab}.yaml"))
        .unwrap()
        .clone();
    let plain_apply = kk_live::apply::ApplyOptions::default();
    kk_live::apply::apply_all(&admin, std::slice::from_ref(&lab_object), &plain_apply)
        .await
        .expect("apply never fights the budget controller over its limit");
    assert_eq!(
        pools_admin.get(&lab).await.unwrap().data["spec"]["limits"]["cpu"],
        "4166m"
    );
    // The budget removed, the pool's own cpu limit set: the controller's limit would conflict,
    // so apply hands it back first.
    let mut unbudgeted = lab_object.clone();
    unbudgeted.1["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    unbudgeted.1["spec"]["limits"] = json!({ "cpu": "10", "memory": "64Gi" });
    let conflict =
        kk_live::apply::apply_all(&admin, std::slice::from_ref(&unbudgeted), &plain_apply).await;
    assert!(
        matches!(conflict, Err(kk_live::apply::ApplyError::Refused(_))),
        "{conflict:?}"
    );
    let released = kk_live::apply::budget::release(&admin, std::slice::from_ref(&unbudgeted))
        .await
        .unwrap();
    assert_eq!(released, std::slice::from_ref(&lab));
    kk_live::apply::apply_all(&admin, std::slice::from_ref(&unbudgeted), &plain_apply)
        .await
        .unwrap();
    assert_eq!(
        pools_admin.get(&lab).await.unwrap().data["spec"]["limits"]["cpu"],
        "10"
    );

    for claim in [&launched, &plain_claim, &victim] {
        let _ = claims_admin
            .delete(
                claim.metadata.name.as_deref().unwrap(),
                &DeleteParams::default(),
            )
            .await;
    }
    for pool in [&lab, &gpu, &plain] {
        let _ = pools_admin.delete(pool, &DeleteParams::default()).await;
    }
}
