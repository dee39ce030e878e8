//! KK028: `reserved` capacity in a NodePool whose EC2NodeClass selects no reservation.

use crate::context::Context;
use crate::diagnostic::{Diagnostic, Severity};
use crate::reservations::{class_has_reservations, reserved_value};
use crate::rule::{Rule, RuleMeta};

pub const DOC: &str = r#"
## What
Reports a NodePool whose `karpenter.sh/capacity-type` requirement lists `reserved` (`In`)
while its EC2NodeClass has no `spec.capacityReservationSelectorTerms`. Runs only when the
EC2NodeClass is among the linted objects.

## Why
Karpenter makes a `reserved` offering only for a capacity reservation (an On-Demand Capacity
Reservation or a capacity block) that the node class's selector terms select
(aws/karpenter-provider-aws `pkg/providers/instancetype/offering/reserved_capacity_resolver.go`).
Without terms there is none: a pool that allows only `reserved` launches nothing and its pods
stay Pending; a pool that also allows on-demand launches at list price, and the reservation
the team pays for sits idle. The apiserver accepts both objects.

## Example
```yaml
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: training
spec:
  amiFamily: Custom
  amiSelectorTerms: [{id: ami-0123456789abcdef0}]
  role: demo-node
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: training
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: training}
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["reserved", "on-demand"]
```

## Fix
Select the reservations on the EC2NodeClass (in the ElasticCluster spec:
`capacityReservations` on the pool):
```yaml
  capacityReservationSelectorTerms:
    - id: cr-0123456789abcdef0
    - tags: {team: ml}
      instanceMatchCriteria: targeted
```
or drop `reserved` from the pool.
"#;

pub const META: RuleMeta = RuleMeta {
    code: "KK028",
    name: "reserved-without-reservations",
    severity: Severity::Warning,
    summary: "NodePool asks for reserved capacity but its EC2NodeClass selects no reservation",
    doc: DOC,
    advice: None,
};

pub struct ReservedWithoutReservations;

impl Rule for ReservedWithoutReservations {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Diagnostic>) {
        for view in &ctx.node_pools {
            let Some(path) = reserved_value(view) else {
                continue;
            };
            if class_has_reservations(ctx, view) != Some(false) {
                continue;
            }
            let only_reserved = !view.allows_capacity("on-demand") && !view.allows_capacity("spot");
            let outcome = if only_reserved {
                "the pool can launch nothing and its pods stay Pending"
            } else {
                "every node launches at its spot or on-demand price instead"
            };
            out.push(
                ctx.diag(
                    &META,
                    view.obj,
                    &path,
                    format!(
                        "capacity type reserved, but EC2NodeClass {:?} has no \
                         capacityReservationSelectorTerms: Karpenter has no reserved offering \
                         for this pool, so {outcome}",
                        view.node_class_name()
                    ),
                )
                .with_help(
                    "select the reservations in the EC2NodeClass's \
                     spec.capacityReservationSelectorTerms (by id, or by tags and \
                     instanceMatchCriteria), or remove reserved",
                ),
            );
        }
    }
}
