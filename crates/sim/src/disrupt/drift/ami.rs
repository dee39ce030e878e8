//! AMI drift from a changed `amiSelectorTerms`: the NodeClaim's `status.imageID` is not among
//! the images the new class resolves for its instance type (aws/karpenter-provider-aws v1.14
//! `isAMIDrifted`: an image applies to a type when its requirements are compatible with the
//! type's). Resolving a selector is Karpenter's (and AWS's) business: offline, `id` terms
//! resolve to themselves (their requirements known when the class's status lists them), and
//! two pinned aliases of different releases name different images; any other selector is
//! reported as not checked.

use kk_catalog::InstanceType;
use kk_karpenter::{Operator, Requirement, Requirements};
use serde_json::Value;

fn terms(class: &Value) -> Vec<&Value> {
    class
        .pointer("/spec/amiSelectorTerms")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

/// The value of a term that has exactly one key, `key`.
fn only<'v>(term: &'v Value, key: &str) -> Option<&'v str> {
    let map = term.as_object()?;
    (map.len() == 1).then(|| map.get(key)?.as_str())?
}

fn ids(class: &Value) -> Option<Vec<&str>> {
    terms(class).into_iter().map(|t| only(t, "id")).collect()
}

fn aliases(class: &Value) -> Option<Vec<&str>> {
    terms(class).into_iter().map(|t| only(t, "alias")).collect()
}

/// The requirements `status.amis` gives an image (`None` when it does not list it).
fn status_requirements(class: &Value, id: &str) -> Option<Requirements> {
    let ami = class
        .pointer("/status/amis")?
        .as_array()?
        .iter()
        .find(|a| a.get("id").and_then(Value::as_str) == Some(id))?;
    let mut out = Requirements::new();
    for r in ami
        .get("requirements")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = r.get("key").and_then(Value::as_str)?;
        let op = Operator::parse(r.get("operator").and_then(Value::as_str)?).ok()?;
        let values: Vec<&str> = r
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        out.add(key, Requirement::new(op, &values).ok()?);
    }
    Some(out)
}

fn type_requirements(it: &InstanceType) -> Requirements {
    let mut r = Requirements::new();
    for (k, v) in &it.labels {
        r.add(k, Requirement::single(v));
    }
    r
}

/// The selector change, as the report says it (`None` when the terms are the same).
pub(super) fn describe_change(old: &Value, new: &Value) -> Option<String> {
    let (a, b) = (terms(old), terms(new));
    if same_terms(&a, &b) {
        return None;
    }
    let show = |t: &[&Value]| {
        t.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Some(format!(
        "spec.amiSelectorTerms [{}] → [{}]",
        show(&a),
        show(&b)
    ))
}

fn same_terms(a: &[&Value], b: &[&Value]) -> bool {
    let key = |t: &[&Value]| {
        let mut v: Vec<String> = t.iter().map(|x| x.to_string()).collect();
        v.sort();
        v
    };
    key(a) == key(b)
}

/// Why a node of `class_name` on `image` drifts by AMI under the new class, if it does.
pub(super) fn drifted(
    class_name: &str,
    old: &Value,
    new: &Value,
    image: Option<&str>,
    it: Option<&InstanceType>,
    warnings: &mut Vec<String>,
) -> Option<String> {
    if same_terms(&terms(old), &terms(new)) {
        return None;
    }
    let Some(image) = image else {
        warnings.push(format!(
            "EC2NodeClass {class_name}: a node's NodeClaim has no status.imageID; its AMI drift is not checked"
        ));
        return None;
    };
    if let Some(new_ids) = ids(new) {
        let type_reqs = it.map(type_requirements);
        let fits: Vec<&str> = new_ids
            .iter()
            .copied()
            .filter(|id| {
                let ami_reqs =
                    status_requirements(new, id).or_else(|| status_requirements(old, id));
                match (&type_reqs, ami_reqs) {
                    (Some(t), Some(a)) => t.is_compatible(&a, false),
                    _ => true,
                }
            })
            .collect();
        if fits.len() > 1 {
            warnings.push(format!(
                "EC2NodeClass {class_name}: several new images fit one instance type; Karpenter uses the newest, which plan cannot date (a node on any of them counts as not drifted)"
            ));
        }
        return (!fits.contains(&image)).then(|| {
            format!(
                "image {image} is not among the new amiSelectorTerms ({})",
                fits.join(", ")
            )
        });
    }
    if let (Some(was), Some(now)) = (aliases(old), aliases(new)) {
        let date = |a: &&str| kk_karpenter::ami::alias_release_date(a).map(str::to_owned);
        let pinned = |v: &[&str]| v.iter().map(date).collect::<Option<Vec<_>>>();
        if let (Some(a), Some(b)) = (pinned(&was), pinned(&now))
            && a != b
        {
            return Some(format!(
                "alias {} → {}: another release, other images",
                was.join(", "),
                now.join(", ")
            ));
        }
    }
    warnings.push(format!(
        "EC2NodeClass {class_name}: its new amiSelectorTerms are resolved by Karpenter against AWS (alias @latest, SSM parameter, tags or name); AMI drift is not predicted offline: pin ids (`ami resolve`) or releases"
    ));
    None
}
