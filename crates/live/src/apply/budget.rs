//! A pool whose spend budget is gone: the budget controller's field manager still owns the
//! limit it last wrote, so applying the pool's own limit on that resource would conflict.
//! Before it applies, `apply` hands such limits back (a server-side apply of nothing as that
//! manager drops the fields only it owned); pools with a budget are left to the controller.

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

use crate::kube_error::KubeCallError;

const MANAGER: &str = kk_spec::names::BUDGET;

/// Whether the budget controller's manager owns any of `np`'s limits.
fn owns_a_limit(np: &DynamicObject) -> bool {
    np.metadata.managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() == Some(MANAGER)
            && m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:spec/f:limits").is_some())
    })
}

/// Releases the limits the budget controller owns on the NodePools among `objects` that no
/// longer carry a budget; returns their names.
pub async fn release(
    client: &Client,
    objects: &[(String, Value)],
) -> Result<Vec<String>, KubeCallError> {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool");
    let pools: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "nodepools"),
    );
    let mut released = Vec::new();
    for (_, object) in objects {
        if object["kind"] != "NodePool"
            || object["metadata"]["annotations"]
                .get(kk_model::spend::annotation::RESOURCE)
                .is_some()
        {
            continue;
        }
        let Some(name) = object["metadata"]["name"].as_str() else {
            continue;
        };
        let live = pools
            .get_opt(name)
            .await
            .map_err(|e| KubeCallError::from_kube(format!("get NodePool {name}"), e))?;
        if !live.as_ref().is_some_and(owns_a_limit) {
            continue;
        }
        let nothing = json!({ "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": { "name": name } });
        pools
            .patch(name, &PatchParams::apply(MANAGER), &Patch::Apply(&nothing))
            .await
            .map_err(|e| {
                KubeCallError::from_kube(
                    format!("release the budget controller's limits of NodePool {name}"),
                    e,
                )
            })?;
        released.push(name.to_owned());
    }
    Ok(released)
}
