//! The rotator's leader killed mid-rotation with a standby running (issue #30): the standby
//! takes the lease over within its duration, the store holds a token that authenticates at
//! every moment, the rotation completes, and nodes that join afterwards join.
//!
//! "Mid-rotation" is made to last: moto answers the store's PutParameter 503 after 4 s (the
//! lab's `unavailable` fault), so the leader has created the new token and is still trying
//! to publish it when it is killed (SIGKILL, no shutdown).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};

use crate::harness::{Lab, assert_no_orphan_no_duplicate, edit_store, live, pod_available};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::harness::JOIN_STORE as STORE;
const LEADER: &str = "lab-controller";
const STANDBY: &str = "lab-controller-standby";
/// The rendered controller's lease (`--lease-duration` default).
const LEASE: Duration = Duration::from_secs(15);

fn holder(lab: &Lab) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(lab.client.clone(), "kube-system");
    lab.rt
        .block_on(leases.get_opt("kubean-karpenter-rotator"))
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
}

/// The ID of the token the store holds (the part of KK_TOKEN before the dot).
fn stored_token_id(lab: &Lab) -> String {
    lab.aws(&format!(
        "v = ssm.get_parameter(Name='{STORE}', WithDecryption=True)['Parameter']['Value']\n\
         print(next(l for l in v.splitlines() if l.startswith('KK_TOKEN='))[9:].split('.')[0])"
    ))
}

/// The IDs of the bootstrap tokens in the cluster that are not being deleted.
fn token_ids(lab: &Lab) -> Vec<String> {
    let secrets: Api<Secret> = Api::namespaced(lab.client.clone(), "kube-system");
    lab.rt
        .block_on(secrets.list(&ListParams::default().fields("type=bootstrap.kubernetes.io/token")))
        .unwrap()
        .items
        .into_iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .filter_map(|s| {
            s.metadata
                .name?
                .strip_prefix("bootstrap-token-")
                .map(str::to_owned)
        })
        .collect()
}

#[test]
fn leader_killed_mid_rotation_the_standby_completes_it_and_the_store_always_works() {
    let Some((mut lab, _spec, bundle)) =
        Lab::deployed("faults: rotator leader killed mid-rotation", |s| s)
    else {
        return;
    };
    lab.lab(&[
        "controller-standby",
        bundle.to_str().unwrap(),
        env!("CARGO_BIN_EXE_kubean-karpenter"),
    ]);
    lab.wait(
        "the first replica leading, the standby up",
        Duration::from_secs(60),
        |l| (holder(l).as_deref() == Some(LEADER)).then_some(()),
    );
    let old = stored_token_id(&lab);
    let before = token_ids(&lab);
    assert!(
        before.contains(&old),
        "the stored token {old} is not in the cluster: {before:?}"
    );

    // Due (50 min left of a 2 h token rotated at half its life), then the store's writes
    // refused: the leader creates a token and cannot publish it.
    let due = (Timestamp::now() + SignedDuration::from_mins(50)).strftime("%Y-%m-%dT%H:%M:%SZ");
    edit_store(&lab, STORE, "KK_EXPIRATION", &due.to_string());
    // Each refusal after 4 s: the new token exists unpublished for the three attempts' 12 s.
    lab.fault_with("unavailable", "PutParameter 4\n");
    let unpublished = lab.wait(
        "the leader's new token created, its publication refused",
        Duration::from_secs(90),
        |l| token_ids(l).into_iter().find(|id| !before.contains(id)),
    );
    lab.signal("controller", "KILL");
    let killed = Instant::now();
    std::fs::remove_file(std::path::Path::new(&lab.var("KK_LAB_FAULTS")).join("unavailable"))
        .unwrap();
    assert_eq!(
        stored_token_id(&lab),
        old,
        "the store changed while its writes were refused"
    );
    live(&format!(
        "   killed the leader with token {unpublished} created and not published"
    ));

    // Until the standby has published: at every look, the stored token is in the cluster.
    let mut took_over = None;
    let mut looks = 0;
    let published = loop {
        let stored = stored_token_id(&lab);
        let ids = token_ids(&lab);
        looks += 1;
        assert!(
            ids.contains(&stored),
            "the store holds {stored}, which is not in the cluster ({ids:?}) {:.1}s after the kill",
            killed.elapsed().as_secs_f64()
        );
        if took_over.is_none() && holder(&lab).as_deref() == Some(STANDBY) {
            took_over = Some(killed.elapsed());
        }
        if stored != old {
            break stored;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(120),
            "the standby published no token in 120s (lease holder {:?})",
            holder(&lab)
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let took_over = took_over.unwrap_or_else(|| killed.elapsed());
    live(&format!(
        "   standby leading {:.1}s after the kill, token {published} published at {:.1}s ({looks} looks, the store's token in the cluster at each)",
        took_over.as_secs_f64(),
        killed.elapsed().as_secs_f64()
    ));
    assert_eq!(holder(&lab).as_deref(), Some(STANDBY));
    // The lease lapses `LEASE` after the dead leader's last renewal; the standby looks every
    // third of it.
    assert!(
        took_over <= LEASE + LEASE / 3 + Duration::from_secs(5),
        "the standby took {took_over:?} to lead (lease {LEASE:?})"
    );
    assert_ne!(
        published, unpublished,
        "the standby published the dead leader's token"
    );
    // The replaced token still works for the nodes booting with it (the overlap).
    assert!(
        token_ids(&lab).contains(&old),
        "the replaced token {old} was deleted at once"
    );

    // Nodes that boot now join with the published token.
    lab.scale("inflate-workload-general", 2);
    lab.wait(
        "every inflate pod Running and ready",
        Duration::from_secs(240),
        |l| {
            let pods = l.general_pods();
            (pods.len() == 2 && pods.iter().all(pod_available)).then_some(())
        },
    );
    assert_no_orphan_no_duplicate(&lab);
    lab.print_phases();
}
