//! The fields of a NodePool or an EC2NodeClass that Karpenter's static-drift hashes cover
//! (which ones: [`kk_karpenter::drift`]), normalized as the hash's options see them, and where
//! two versions of an object differ in them.

use kk_karpenter::drift::{
    NODECLASS_HASHED, NODECLASS_METADATA_DEFAULTS, NODECLASS_UNHASHED, NODEPOOL_DEFAULTS,
    NODEPOOL_DURATIONS, NODEPOOL_HASHED, NODEPOOL_UNHASHED, resolved_ami_family,
};
use serde_json::{Map, Value};

/// `a.b.c` of a value.
fn at<'v>(v: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(v, |cur, key| cur.get(key))
}

/// The object at `a.b` (created when absent) and the last key `c`.
fn parent_mut<'v>(v: &'v mut Value, path: &str) -> Option<(&'v mut Map<String, Value>, String)> {
    let (head, last) = match path.rsplit_once('.') {
        Some((h, l)) => (Some(h), l),
        None => (None, path),
    };
    let mut cur = v;
    for key in head.into_iter().flat_map(|h| h.split('.')) {
        let map = cur.as_object_mut()?;
        cur = map
            .entry(key.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    Some((cur.as_object_mut()?, last.to_owned()))
}

fn remove(v: &mut Value, path: &str) {
    if let Some((map, last)) = parent_mut(v, path) {
        map.remove(&last);
    }
}

/// A default as the CRD writes it: a number when it is one.
fn default_value(text: &str) -> Value {
    text.parse::<i64>()
        .map(Value::from)
        .unwrap_or_else(|_| Value::from(text))
}

fn set_default(v: &mut Value, path: &str, text: &str) {
    if let Some((map, last)) = parent_mut(v, path) {
        map.entry(last).or_insert_with(|| default_value(text));
    }
}

/// The hash's view: absent, null, `""` and empty lists or maps alike (`IgnoreZeroValue`,
/// `ZeroNil`); lists as sets (`SlicesAsSets`: sorted here).
fn normalize(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::Array(items) => {
            let mut out: Vec<Value> = items.iter().filter_map(normalize).collect();
            out.sort_by_cached_key(|x| x.to_string());
            out.dedup();
            (!out.is_empty()).then_some(Value::Array(out))
        }
        Value::Object(map) => {
            let out: Map<String, Value> = map
                .iter()
                .filter_map(|(k, x)| normalize(x).map(|x| (k.clone(), x)))
                .collect();
            (!out.is_empty()).then_some(Value::Object(out))
        }
        other => Some(other.clone()),
    }
}

/// What a NodePool's hash covers: `spec.template` less requirements, CRD defaults filled in,
/// durations as seconds.
pub(super) fn node_pool(pool: &Value) -> Value {
    let mut t = at(pool, NODEPOOL_HASHED).cloned().unwrap_or(Value::Null);
    if !t.is_object() {
        t = Value::Object(Map::new());
    }
    for path in NODEPOOL_UNHASHED {
        remove(&mut t, path);
    }
    for (path, text) in NODEPOOL_DEFAULTS {
        set_default(&mut t, path, text);
    }
    for path in NODEPOOL_DURATIONS {
        let seconds = at(&t, path)
            .and_then(Value::as_str)
            .and_then(kk_karpenter::duration::parse);
        if let (Some(s), Some((map, last))) = (seconds, parent_mut(&mut t, path)) {
            map.insert(last, Value::from(s));
        }
    }
    normalize(&t).unwrap_or(Value::Null)
}

/// What an EC2NodeClass's hash covers: `spec` less selectors, `amiFamily` and
/// `ipPrefixCount`, with the resolved AMI family and the CRD's `metadataOptions` defaults.
pub(super) fn node_class(class: &Value) -> Value {
    let spec = at(class, NODECLASS_HASHED).cloned().unwrap_or(Value::Null);
    let mut s = if spec.is_object() {
        spec.clone()
    } else {
        Value::Object(Map::new())
    };
    for key in NODECLASS_UNHASHED {
        remove(&mut s, key);
    }
    for (key, text) in NODECLASS_METADATA_DEFAULTS {
        set_default(&mut s, &format!("metadataOptions.{key}"), text);
    }
    let alias = spec
        .get("amiSelectorTerms")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find_map(|t| t.get("alias").and_then(Value::as_str));
    let family = resolved_ami_family(spec.get("amiFamily").and_then(Value::as_str), alias);
    if let Some(map) = s.as_object_mut() {
        // Not a spec key (it cannot collide): the family as Karpenter resolves it.
        map.insert("(resolved amiFamily)".into(), Value::from(family));
    }
    normalize(&s).unwrap_or(Value::Null)
}

/// The dotted paths (under `root`) where two normalized values differ, shallowest first.
pub(super) fn differences(root: &str, old: &Value, new: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff(root, old, new, &mut out);
    out
}

fn diff(path: &str, old: &Value, new: &Value, out: &mut Vec<String>) {
    if old == new {
        return;
    }
    match (old.as_object(), new.as_object()) {
        (Some(a), Some(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let child = format!("{path}.{k}");
                diff(
                    &child,
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        _ => out.push(path.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pool_fields_skip_requirements_and_budgets_and_read_durations_by_value() {
        let old = json!({"spec": {"template": {"spec": {
            "requirements": [{"key": "a", "operator": "Exists"}],
            "nodeClassRef": {"name": "x"}, "expireAfter": "720h",
            "taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]}},
            "disruption": {"budgets": [{"nodes": "1"}]}}});
        let new = json!({"spec": {"template": {"spec": {
            "requirements": [],
            "nodeClassRef": {"name": "x"},
            "taints": [{"key": "b", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"}]}},
            "disruption": {"budgets": [{"nodes": "5"}]}}});
        assert_eq!(node_pool(&old), node_pool(&new));
        let mut grace = new.clone();
        grace["spec"]["template"]["spec"]["terminationGracePeriod"] = json!("1h");
        assert_eq!(
            differences("spec.template", &node_pool(&new), &node_pool(&grace)),
            ["spec.template.spec.terminationGracePeriod"]
        );
    }

    #[test]
    fn class_fields_skip_selectors_and_fill_metadata_defaults() {
        let old = json!({"spec": {"amiSelectorTerms": [{"id": "ami-1"}], "amiFamily": "Custom",
            "subnetSelectorTerms": [{"id": "subnet-1"}], "userData": "a",
            "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1,
                "httpEndpoint": "enabled", "httpProtocolIPv6": "disabled"}}});
        let new = json!({"spec": {"amiSelectorTerms": [{"id": "ami-2"}], "amiFamily": "Custom",
            "subnetSelectorTerms": [{"id": "subnet-2"}], "userData": "a"}});
        assert_eq!(node_class(&old), node_class(&new));
        let user_data = json!({"spec": {"amiSelectorTerms": [{"id": "ami-2"}],
            "amiFamily": "Custom", "userData": "b"}});
        assert_eq!(
            differences("spec", &node_class(&new), &node_class(&user_data)),
            ["spec.userData"]
        );
        let family = json!({"spec": {"amiSelectorTerms": [{"id": "ami-2"}],
            "amiFamily": "AL2023", "userData": "a"}});
        assert_eq!(
            differences("spec", &node_class(&new), &node_class(&family)),
            ["spec.(resolved amiFamily)"]
        );
    }
}
