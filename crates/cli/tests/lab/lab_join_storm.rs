//! A join storm (issue #30): 30 nodes launched at once while the join token is rotated twice
//! (`token create --publish` when a third and when two thirds of the nodes have registered:
//! the others are still booting or joining, some with a token that has just been replaced).
//! Every node must join: no claim left unregistered, none replaced, no orphan, no duplicate.
//! Reports each node's join time (Launched → Registered) at p50 and p99.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::DynamicObject;

use crate::harness::{Lab, assert_no_orphan_no_duplicate, claims_of, is_true, live};

const NODES: usize = 30;
const MIN: Duration = Duration::from_secs(60);

/// The pool the storm scales (the bundle's GPU smoke pod has a claim of its own pool).
const POOL: &str = "workload-general";

/// The storm pool's claims with `condition`.
fn count(lab: &Lab, condition: &str) -> usize {
    claims_of(lab, POOL)
        .iter()
        .filter(|nc| is_true(nc, condition))
        .count()
}

/// When a condition of the claim last changed, in Unix seconds.
fn transition(nc: &DynamicObject, kind: &str) -> Option<i64> {
    let condition = nc.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)?;
    let at: Time = serde_json::from_value(condition["lastTransitionTime"].clone()).ok()?;
    Some(at.0.as_second())
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[test]
fn join_storm_of_30_nodes_while_the_token_rotates_twice_loses_no_join() {
    let Some(mut lab) = Lab::require("faults: 30 nodes join while the token rotates twice") else {
        return;
    };
    // One size, three one-CPU pods to a node: the replicas say how many nodes.
    let (spec, bundle) = lab.render(|s| s.replace("sizes: [large, xlarge]", "sizes: [xlarge]"));
    lab.deploy(&spec, &bundle);
    lab.scale("inflate-workload-general", (NODES * 3) as i32);
    let mut joined_at_rotation = Vec::new();
    // Early enough that the joins outlast both rotations under CI's load (at 10 and 20 of 30 the
    // second came after the last join once).
    for registered in [NODES / 4, NODES / 2] {
        lab.wait(
            &format!("{registered} NodeClaims registered"),
            5 * MIN,
            |l| (count(l, "Registered") >= registered).then_some(()),
        );
        lab.cli(&[
            "token",
            "create",
            "--publish",
            "--spec",
            spec.to_str().unwrap(),
        ]);
        let registered = count(&lab, "Registered");
        live(&format!(
            "   rotated the join token with {} launched, {registered} registered",
            count(&lab, "Launched")
        ));
        joined_at_rotation.push(registered);
    }
    lab.wait("every inflate pod Running", 15 * MIN, |l| {
        let pods = l.general_pods();
        (pods.len() == NODES * 3
            && pods
                .iter()
                .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")))
        .then_some(())
    });
    lab.wait("every NodeClaim Initialized", 3 * MIN, |l| {
        let claims = l.nodeclaims();
        claims
            .iter()
            .all(|nc| is_true(nc, "Initialized"))
            .then_some(())
    });
    let claims = claims_of(&lab, POOL);
    assert_eq!(
        claims.len(),
        NODES,
        "one workload-general claim per three pods, none replaced after a failed join"
    );
    assert!(
        joined_at_rotation.iter().all(|r| *r < NODES),
        "each rotation came while nodes were still joining: {joined_at_rotation:?}"
    );
    let mut joins: Vec<i64> = claims
        .iter()
        .map(|nc| {
            let launched = transition(nc, "Launched").expect("Launched time");
            let registered = transition(nc, "Registered").expect("Registered time");
            registered - launched
        })
        .collect();
    joins.sort_unstable();
    live(&format!(
        "   {NODES} of {NODES} nodes joined; Launched → Registered p50 {} s, p99 {} s, max {} s",
        percentile(&joins, 50.0),
        percentile(&joins, 99.0),
        joins[joins.len() - 1]
    ));
    assert_no_orphan_no_duplicate(&lab);
    lab.print_phases();
}
