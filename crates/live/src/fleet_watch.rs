//! What `top` watches: the kinds [`crate::cluster_state`] lists, kept current by one watch
//! stream per kind (list once, then follow changes from its resourceVersion; list again when
//! the server says the version is too old). Read-only.
//!
//! [`FleetWatch::documents`] hands out the same `List` documents as
//! [`crate::cluster_state::read_state`], so the planner's reader serves both.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use kube::Client;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, WatchEvent, WatchParams,
};
use serde_json::Value;
use tokio::sync::watch;

use crate::cluster_state::{KINDS, list_document, typed};

/// Objects of one kind by namespace/name.
type Objects = BTreeMap<String, Value>;

/// The watched objects, and a counter that moves on each change.
pub struct FleetWatch {
    store: Arc<Mutex<BTreeMap<&'static str, Objects>>>,
    changes: watch::Receiver<u64>,
    errors: Arc<Mutex<Vec<String>>>,
}

/// Seconds a watch request stays open before it is renewed from its last version.
const WATCH_SECONDS: u32 = 240;

fn key(v: &Value) -> String {
    let ns = v
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    format!("{ns}/{name}")
}

impl FleetWatch {
    /// Lists every kind once (errors other than "not served" fail here, so a wrong
    /// kubeconfig says so at once), then follows each in the background.
    pub async fn start(client: Client) -> Result<FleetWatch, kube::Error> {
        let store: Arc<Mutex<BTreeMap<&'static str, Objects>>> = Arc::default();
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, rx) = watch::channel(0u64);
        let tx = Arc::new(tx);
        for (group, version, kind, plural) in KINDS {
            let gvk = GroupVersionKind::gvk(group, version, kind);
            let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            let Some(rv) = relist(&api, &resource.api_version, kind, &store).await? else {
                continue;
            };
            let (store, errors, tx) = (store.clone(), errors.clone(), tx.clone());
            let api_version = resource.api_version.clone();
            tokio::spawn(async move {
                follow(api, api_version, kind, rv, store, errors, tx).await;
            });
        }
        Ok(FleetWatch {
            store,
            changes: rx,
            errors,
        })
    }

    /// The watched objects as `List` documents (name, JSON text).
    pub fn documents(&self) -> Vec<(String, String)> {
        let store = self
            .store
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = Vec::new();
        for (_, _, kind, plural) in KINDS {
            if let Some(objects) = store.get(kind) {
                let items: Vec<Value> = objects.values().cloned().collect();
                out.extend(list_document(plural, items));
            }
        }
        out
    }

    /// Waits for the next change (returns at once when one came since the last call).
    pub async fn changed(&mut self) {
        if self.changes.changed().await.is_err() {
            // Every follower ended; nothing will change again.
            std::future::pending::<()>().await;
        }
    }

    /// Watch errors since the last call (each follower retries on its own).
    pub fn take_errors(&self) -> Vec<String> {
        std::mem::take(
            &mut *self
                .errors
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// Lists `kind` into the store; `None` when the cluster does not serve it.
async fn relist(
    api: &Api<DynamicObject>,
    api_version: &str,
    kind: &'static str,
    store: &Mutex<BTreeMap<&'static str, Objects>>,
) -> Result<Option<String>, kube::Error> {
    let list = match api.list(&ListParams::default()).await {
        Ok(l) => l,
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
        Err(e) => return Err(e),
    };
    let rv = list.metadata.resource_version.clone().unwrap_or_default();
    let objects: Objects = list
        .items
        .into_iter()
        .filter_map(|o| typed(o, api_version, kind))
        .map(|v| (key(&v), v))
        .collect();
    store
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(kind, objects);
    Ok(Some(rv))
}

async fn follow(
    api: Api<DynamicObject>,
    api_version: String,
    kind: &'static str,
    mut rv: String,
    store: Arc<Mutex<BTreeMap<&'static str, Objects>>>,
    errors: Arc<Mutex<Vec<String>>>,
    tx: Arc<watch::Sender<u64>>,
) {
    let note = |e: String| {
        errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(format!("{kind}: {e}"));
    };
    let bump = || tx.send_modify(|n| *n += 1);
    let params = WatchParams::default().timeout(WATCH_SECONDS);
    loop {
        let mut stream = match api.watch(&params, &rv).await {
            Ok(s) => s.boxed(),
            Err(e) => {
                note(e.to_string());
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
        };
        let (mut too_old, mut failed) = (false, false);
        while let Some(event) = stream.next().await {
            let change = match event {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => Some((o, true)),
                Ok(WatchEvent::Deleted(o)) => Some((o, false)),
                Ok(WatchEvent::Bookmark(b)) => {
                    rv = b.metadata.resource_version;
                    None
                }
                Ok(WatchEvent::Error(status)) => {
                    too_old = status.code == 410;
                    if !too_old {
                        note(status.message.clone());
                        failed = true;
                    }
                    break;
                }
                Err(e) => {
                    note(e.to_string());
                    failed = true;
                    break;
                }
            };
            let Some((o, present)) = change else { continue };
            if let Some(v) = o.metadata.resource_version.clone() {
                rv = v;
            }
            let Some(value) = typed(o, &api_version, kind) else {
                continue;
            };
            {
                let mut store = store
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let objects = store.entry(kind).or_default();
                if present {
                    objects.insert(key(&value), value);
                } else {
                    objects.remove(&key(&value));
                }
            }
            bump();
        }
        if failed {
            // A server that keeps failing the watch is not asked again at once.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        if too_old {
            match relist(&api, &api_version, kind, &store).await {
                Ok(Some(v)) => {
                    rv = v;
                    bump();
                }
                Ok(None) => return,
                Err(e) => {
                    note(e.to_string());
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        }
    }
}
