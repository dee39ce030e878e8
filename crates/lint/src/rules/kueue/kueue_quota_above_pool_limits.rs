//! KK032: a Kueue ClusterQueue whose quota on a pool's flavor exceeds that NodePool's limits.

use std::collections::BTreeMap;

use kk_karpenter::labels::NODEPOOL;
use kk_model::FieldPath;
use kk_model::quantity::Quantity;
use serde_json::Value;

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::input::Object;
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports a `nominalQuota` in a Kueue ClusterQueue that is larger than the NodePool limit on the
same resource, where the quota's ResourceFlavor stands for that NodePool's nodes (its
`nodeLabels` name `karpenter.sh/nodepool`). Both objects must be among the linted ones.

## Why
Kueue admits jobs up to the quota; Karpenter launches nodes only up to the pool's limits. A
quota above the limit lets Kueue admit jobs the pool can never hold: their pods sit Pending
(Karpenter logs that the NodePool's limits are exceeded) while holding the quota, so the queue
stops doing its one job, making training jobs wait in line instead of half-starting. A
multi-node job whose first pods landed keeps its GPUs idle, billed, waiting for the rest.

## Example
```yaml
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: training}
spec:
  nodeLabels: {karpenter.sh/nodepool: training}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: training}
spec:
  resourceGroups:
    - coveredResources: [nvidia.com/gpu]
      flavors:
        - name: training
          resources:
            - {name: nvidia.com/gpu, nominalQuota: 128}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: training}
spec:
  limits: {nvidia.com/gpu: "64"}
```

## Fix
Make the quota at most the pool's limit (the ElasticCluster spec renders the quota from the
limits, so they agree), or raise the limit.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK032",
    name: "kueue-quota-above-pool-limits",
    severity: Severity::Warning,
    summary: "Kueue ClusterQueue quota larger than the NodePool limit of the flavor's pool",
    doc: DOC,
    advice: None,
};

pub struct KueueQuotaAbovePoolLimits;

fn is_kueue(obj: &Object, kind: &str) -> bool {
    obj.kind == kind && obj.api_version.starts_with("kueue.x-k8s.io/")
}

fn quantity(value: &Value) -> Option<Quantity> {
    match value {
        Value::String(s) => Quantity::parse(s).ok(),
        Value::Number(n) => Quantity::parse(&n.to_string()).ok(),
        _ => None,
    }
}

impl Rule for KueueQuotaAbovePoolLimits {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        // ResourceFlavor name → the NodePool its nodes belong to.
        let flavors: BTreeMap<&str, &str> = ctx
            .objects
            .iter()
            .filter(|o| is_kueue(o, "ResourceFlavor"))
            .filter_map(|o| {
                let pool = o.doc.value["spec"]["nodeLabels"][NODEPOOL].as_str()?;
                Some((o.name.as_str(), pool))
            })
            .collect();
        for queue in ctx.objects.iter().filter(|o| is_kueue(o, "ClusterQueue")) {
            let groups = queue.doc.value["spec"]["resourceGroups"].as_array();
            for (i, group) in groups.into_iter().flatten().enumerate() {
                let group_flavors = group["flavors"].as_array();
                for (j, flavor) in group_flavors.into_iter().flatten().enumerate() {
                    let Some(pool_name) = flavor["name"].as_str().and_then(|f| flavors.get(f))
                    else {
                        continue;
                    };
                    let Some(pool) = ctx.node_pools.iter().find(|p| p.name() == *pool_name) else {
                        continue;
                    };
                    let resources = flavor["resources"].as_array();
                    for (k, resource) in resources.into_iter().flatten().enumerate() {
                        let Some(name) = resource["name"].as_str() else {
                            continue;
                        };
                        let Some(limit_value) = pool.pool.spec.limits.get(name) else {
                            continue;
                        };
                        let (Some(quota), Some(limit)) =
                            (quantity(&resource["nominalQuota"]), quantity(limit_value))
                        else {
                            continue;
                        };
                        if quota.milli <= limit.milli {
                            continue;
                        }
                        let path = FieldPath::parse("spec.resourceGroups")
                            .index(i)
                            .key("flavors")
                            .index(j)
                            .key("resources")
                            .index(k)
                            .key("nominalQuota");
                        let shown = |v: &Value| match v {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        out.push(
                            ctx.diag(
                                &META,
                                queue,
                                &path,
                                format!(
                                    "quota {name} {} on flavor {:?} is above NodePool {pool_name}'s \
                                     limit {}: Kueue admits jobs the pool can never hold, and \
                                     their pods sit Pending holding the quota",
                                    shown(&resource["nominalQuota"]),
                                    flavor["name"].as_str().unwrap_or_default(),
                                    shown(limit_value)
                                ),
                            )
                            .with_help("lower nominalQuota to the pool's limit, or raise the limit"),
                        );
                    }
                }
            }
        }
    }
}
