//! Spot interruption on the lab (`testbed/lab up`) with the real Karpenter interruption
//! controller: `apply` made the queue and its five EventBridge rules in moto, Karpenter polls
//! the queue (`INTERRUPTION_QUEUE=lab`), and each test puts the event AWS would send onto the
//! default event bus with `PutEvents`. moto matches the rules' patterns and delivers to the
//! queue, so the rules are tested with the queue. moto emits no such events itself (it has no
//! spot market, no instance state-change events and no AWS Health): the test stands in for
//! AWS as the sender, and everything after the bus is the real path.

use crate::harness as lab;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use lab::{Lab, is_true};
use serde_json::{Value, json};

const MIN: Duration = Duration::from_secs(60);
const APP: &str = "reclaimed";
const QUEUE: &str = "lab";
/// AWS's warning comes two minutes before the instance is taken.
const WARNING: Duration = Duration::from_secs(120);

/// The image of the bundle's inflate Deployment (one the lab's nodes run).
fn inflate_image(lab: &Lab) -> String {
    let inflate: Api<Deployment> = Api::namespaced(lab.client.clone(), "default");
    lab.rt
        .block_on(inflate.get("inflate-workload-general"))
        .unwrap()
        .spec
        .and_then(|s| s.template.spec)
        .map(|s| s.containers[0].image.clone().unwrap_or_default())
        .unwrap()
}

/// The workload a reclaim must not break: `replicas` small pods of the CPU pool (on spot
/// capacity when `spot`), and a PodDisruptionBudget keeping `min_available` of them.
fn workload(lab: &Lab, replicas: i32, min_available: i32, spot: bool) {
    let inflate: Api<Deployment> = Api::namespaced(lab.client.clone(), "default");
    let image = inflate_image(lab);
    let mut selector = json!({"karpenter.sh/nodepool": "workload-general"});
    if spot {
        selector["karpenter.sh/capacity-type"] = json!("spot");
    }
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": APP, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": APP}},
            "template": {
                "metadata": {"labels": {"app": APP}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "nodeSelector": selector,
                    "containers": [{"name": "app", "image": image,
                                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
                },
            },
        },
    }))
    .unwrap();
    remove_budget(lab);
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": APP, "namespace": "default"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": APP}}},
    }))
    .unwrap();
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(lab.client.clone(), "default");
    lab.rt
        .block_on(budgets.create(&PostParams::default(), &budget))
        .unwrap();
    lab.rt
        .block_on(inflate.create(&PostParams::default(), &deployment))
        .unwrap();
}

/// The lab's reset removes Deployments, not budgets: each test removes its own.
fn remove_budget(lab: &Lab) {
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(lab.client.clone(), "default");
    let _ = lab
        .rt
        .block_on(budgets.delete(APP, &DeleteParams::default()));
}

fn app_pods(pods: Vec<Pod>) -> Vec<Pod> {
    pods.into_iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .is_some_and(|a| a == APP)
        })
        .collect()
}

fn node_of(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// The app's pods a drain must take through their budget (Ready and Running), by node.
fn ready_on(lab: &Lab, node: &str) -> usize {
    app_pods(lab.pods("default"))
        .iter()
        .filter(|p| lab::pod_available(p) && node_of(p) == node)
        .count()
}

/// One NodeClaim as the tests follow it.
#[derive(Debug, Clone)]
struct Claim {
    name: String,
    provider_id: String,
    /// (instance type, zone, capacity type): what Karpenter marks unavailable on a spot warning.
    offering: (String, String, String),
}

impl Claim {
    fn of(nc: &DynamicObject) -> Claim {
        let label = |k: &str| {
            nc.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(k))
                .cloned()
                .unwrap_or_default()
        };
        Claim {
            name: nc.metadata.name.clone().unwrap_or_default(),
            provider_id: nc.data["status"]["providerID"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
            offering: (
                label("node.kubernetes.io/instance-type"),
                label("topology.kubernetes.io/zone"),
                label("karpenter.sh/capacity-type"),
            ),
        }
    }

    fn instance(&self) -> &str {
        self.provider_id.rsplit('/').next().unwrap_or_default()
    }

    /// The Node's name: the lab's nodes are named after their instance.
    fn node(&self) -> &str {
        self.instance()
    }
}

fn claim_named(lab: &Lab, name: &str) -> Option<DynamicObject> {
    lab.nodeclaims()
        .into_iter()
        .find(|nc| nc.metadata.name.as_deref() == Some(name))
}

fn deleting(nc: &DynamicObject) -> bool {
    nc.metadata.deletion_timestamp.is_some()
}

/// Waits until the app's `replicas` pods are Ready on one initialized NodeClaim; that claim.
fn hosted(lab: &mut Lab, phase: &str, replicas: usize, except: &[&str]) -> Claim {
    lab.wait(phase, 3 * MIN, |l| {
        let claims: Vec<Claim> = l
            .nodeclaims()
            .iter()
            .filter(|nc| is_true(nc, "Initialized") && !deleting(nc))
            .map(Claim::of)
            .filter(|c| !except.contains(&c.name.as_str()))
            .collect();
        claims
            .into_iter()
            .find(|c| ready_on(l, c.node()) == replicas)
    })
}

fn node_named(lab: &Lab, name: &str) -> Option<Node> {
    lab.nodes()
        .into_iter()
        .find(|n| n.metadata.name.as_deref() == Some(name))
}

fn disrupted_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| {
            t.iter()
                .any(|t| t.key == "karpenter.sh/disrupted" && t.effect == "NoSchedule")
        })
}

fn instance_state(lab: &Lab, instance: &str) -> String {
    lab.aws(&format!("print(ec2.describe_instances(InstanceIds=['{instance}'])['Reservations'][0]['Instances'][0]['State']['Name'])"))
}

/// Puts one event on the default bus as AWS would (`PutEvents`); asserts it was accepted.
fn put_event(lab: &Lab, source: &str, detail_type: &str, resources: &[String], detail: Value) {
    // A spot interruption marks its offering unavailable in Karpenter's memory.
    if detail_type == "EC2 Spot Instance Interruption Warning" {
        lab.karpenter_remembers();
    }
    let entry = json!({
        "Source": source,
        "DetailType": detail_type,
        "Resources": resources,
        "Detail": detail.to_string(),
    });
    let out = lab.aws(&format!(
        "from datetime import datetime, timezone
entry = json.loads({entry:?})
entry['Time'] = datetime.now(timezone.utc)
out = boto3.client('events').put_events(Entries=[entry])
print(out['FailedEntryCount'])",
        entry = entry.to_string()
    ));
    assert_eq!(out, "0", "PutEvents refused {entry}");
}

fn instance_arn(instance: &str) -> String {
    format!("arn:aws:ec2:us-east-1:123456789012:instance/{instance}")
}

/// The queue's waiting and in-flight message counts.
fn queue_depth(lab: &Lab) -> (u64, u64) {
    let out = lab.aws(&format!(
        "sqs = boto3.client('sqs')
url = sqs.get_queue_url(QueueName='{QUEUE}')['QueueUrl']
a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'])['Attributes']
print(a['ApproximateNumberOfMessages'], a['ApproximateNumberOfMessagesNotVisible'])"
    ));
    let (visible, in_flight) = out.split_once(' ').unwrap();
    (visible.parse().unwrap(), in_flight.parse().unwrap())
}

/// Events with `reason` about `object` (a NodeClaim or Node name).
fn events_about(lab: &Lab, reason: &str, object: &str) -> usize {
    let events: Api<Event> = Api::all(lab.client.clone());
    lab.rt
        .block_on(events.list(&ListParams::default()))
        .unwrap()
        .items
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason) && e.involved_object.name.as_deref() == Some(object)
        })
        .count()
}

/// Watches, every 200 ms on its own client, the fewest Ready pods of the app (what the
/// PodDisruptionBudget protects) from now until `stop`. A pod that is not Ready because a
/// node other than the reclaimed one stopped reporting (the node lifecycle controller then
/// marks its pods NotReady: an involuntary disruption a PDB does not cover, which a lab
/// kubelet starved of CPU causes) is counted apart. The reclaimed node gets no such excuse:
/// its instance terminated before the drain ended would be exactly the breach to catch.
struct BudgetWatch {
    stop: Arc<AtomicBool>,
    fewest: Arc<AtomicUsize>,
    fewest_but_lost_nodes: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

/// The fewest Ready pods seen, and the fewest when pods on nodes that lost their heartbeat
/// are counted as still available.
struct Fewest {
    ready: usize,
    ready_or_on_lost_node: usize,
}

impl BudgetWatch {
    fn start(client: Client, reclaimed_node: &str) -> BudgetWatch {
        let reclaimed_node = reclaimed_node.to_owned();
        let stop = Arc::new(AtomicBool::new(false));
        let fewest = Arc::new(AtomicUsize::new(usize::MAX));
        let fewest_but_lost_nodes = Arc::new(AtomicUsize::new(usize::MAX));
        let (s, f, g) = (stop.clone(), fewest.clone(), fewest_but_lost_nodes.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
            let nodes: Api<Node> = Api::all(client);
            let selector = ListParams::default().labels(&format!("app={APP}"));
            while !s.load(Ordering::SeqCst) {
                if let (Ok(list), Ok(node_list)) = (
                    rt.block_on(pods.list(&selector)),
                    rt.block_on(nodes.list(&ListParams::default())),
                ) {
                    let lost: Vec<String> = node_list
                        .items
                        .iter()
                        .filter(|n| !node_ready(n))
                        .filter_map(|n| n.metadata.name.clone())
                        .filter(|n| *n != reclaimed_node)
                        .collect();
                    let ready_count = list.items.iter().filter(|p| lab::pod_ready(p)).count();
                    let on_lost = list
                        .items
                        .iter()
                        .filter(|p| {
                            !lab::pod_ready(p)
                                && p.metadata.deletion_timestamp.is_none()
                                && lost.iter().any(|n| *n == node_of(p))
                        })
                        .count();
                    f.fetch_min(ready_count, Ordering::SeqCst);
                    g.fetch_min(ready_count + on_lost, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        BudgetWatch {
            stop,
            fewest,
            fewest_but_lost_nodes,
            thread,
        }
    }

    fn fewest(self) -> Fewest {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap();
        Fewest {
            ready: self.fewest.load(Ordering::SeqCst),
            ready_or_on_lost_node: self.fewest_but_lost_nodes.load(Ordering::SeqCst),
        }
    }
}

/// Whether the node's Ready condition is True (False or Unknown: it stopped reporting).
fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What happens after an event, each step timed from when the event was put: polled together
/// every 500 ms, so each step's time is when it first held, whatever their order.
struct Chain<'a> {
    steps: Vec<(&'a str, Check<'a>)>,
}

/// Whether one step of a [`Chain`] has happened.
type Check<'a> = Box<dyn FnMut(&Lab) -> bool + 'a>;

impl<'a> Chain<'a> {
    fn new() -> Self {
        Chain { steps: Vec::new() }
    }

    fn step(mut self, name: &'a str, check: impl FnMut(&Lab) -> bool + 'a) -> Self {
        self.steps.push((name, Box::new(check)));
        self
    }

    /// Runs until every step held; their times since `from`, printed. Panics after `timeout`
    /// naming the steps still missing.
    fn run(mut self, lab: &Lab, from: Instant, timeout: Duration) -> Vec<(String, Duration)> {
        let mut seen: Vec<Option<Duration>> = vec![None; self.steps.len()];
        loop {
            for (i, (_, check)) in self.steps.iter_mut().enumerate() {
                if seen[i].is_none() && check(lab) {
                    seen[i] = Some(from.elapsed());
                }
            }
            if seen.iter().all(Option::is_some) {
                break;
            }
            if from.elapsed() > timeout {
                let missing: Vec<&str> = self
                    .steps
                    .iter()
                    .zip(&seen)
                    .filter(|(_, s)| s.is_none())
                    .map(|((n, _), _)| *n)
                    .collect();
                panic!(
                    "not within {timeout:?} of the event: {missing:?}\n{}",
                    lab.diagnose()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let mut out: Vec<(String, Duration)> = self
            .steps
            .iter()
            .zip(seen)
            .map(|((n, _), s)| ((*n).to_owned(), s.unwrap()))
            .collect();
        out.sort_by_key(|(_, at)| *at);
        eprintln!("  timings (s since the event was put):");
        for (name, at) in &out {
            eprintln!("    {:>6.1}  {name}", at.as_secs_f64());
        }
        out
    }
}

fn at(timings: &[(String, Duration)], step: &str) -> Duration {
    timings.iter().find(|(n, _)| n == step).unwrap().1
}

/// Steps every disrupting event must lead to for `old`: its NodeClaim deleted, its node
/// tainted and drained, a replacement (a NodeClaim of the CPU pool made after the event was
/// put) launched and registered with the app's pods Ready on it, the instance terminated in
/// moto and the NodeClaim gone.
fn disruption<'a>(
    old: &'a Claim,
    replicas: usize,
    replacement: &'a std::cell::RefCell<Option<Claim>>,
) -> Chain<'a> {
    let since = k8s_openapi::jiff::Timestamp::now().as_second() - 1;
    let find_replacement = move |l: &Lab, condition: &str| {
        l.nodeclaims()
            .iter()
            .filter(|nc| nc.metadata.name.as_deref() != Some(old.name.as_str()))
            .filter(|nc| lab::pool_of(nc) == "workload-general")
            .filter(|nc| {
                nc.metadata
                    .creation_timestamp
                    .as_ref()
                    .is_some_and(|t| t.0.as_second() >= since)
            })
            .find(|nc| is_true(nc, condition))
            .map(Claim::of)
    };
    Chain::new()
        .step("NodeClaim deleted (deletionTimestamp)", move |l| {
            claim_named(l, &old.name).is_none_or(|nc| deleting(&nc))
        })
        .step("node tainted karpenter.sh/disrupted:NoSchedule", move |l| {
            node_named(l, old.node()).is_some_and(|n| disrupted_taint(&n))
        })
        .step("replacement NodeClaim Launched", move |l| {
            find_replacement(l, "Launched").is_some()
        })
        .step("replacement NodeClaim Registered", move |l| {
            find_replacement(l, "Registered").is_some()
        })
        .step("old node drained (no pod of the app on it)", move |l| {
            app_pods(l.pods("default"))
                .iter()
                .all(|p| node_of(p) != old.node())
        })
        .step("pods Ready on the replacement", move |l| {
            let Some(c) = find_replacement(l, "Registered") else {
                return false;
            };
            let done = ready_on(l, c.node()) == replicas;
            if done {
                *replacement.borrow_mut() = Some(c);
            }
            done
        })
        .step("old instance terminated in moto", move |l| {
            matches!(
                instance_state(l, old.instance()).as_str(),
                "shutting-down" | "terminated"
            )
        })
        .step("old NodeClaim gone", move |l| {
            claim_named(l, &old.name).is_none()
        })
}

#[test]
fn interruption_spot_warning_drains_onto_another_offering_within_the_two_minutes() {
    let Some((mut lab, _, _)) = Lab::deployed("interruption: spot warning", |s| s) else {
        return;
    };
    workload(&lab, 3, 2, true);
    let old = hosted(&mut lab, "3 pods Ready on one spot node", 3, &[]);
    assert_eq!(old.offering.2, "spot", "{old:?}");
    assert_eq!(queue_depth(&lab), (0, 0), "the queue starts empty");
    let watch = BudgetWatch::start(lab.client.clone(), old.node());
    let replacement = std::cell::RefCell::new(None);
    let chain = disruption(&old, 3, &replacement);
    let put = Instant::now();
    put_event(
        &lab,
        "aws.ec2",
        "EC2 Spot Instance Interruption Warning",
        &[instance_arn(old.instance())],
        json!({"instance-id": old.instance(), "instance-action": "terminate"}),
    );
    let timings = chain.run(&lab, put, 3 * MIN);
    let fewest = watch.fewest();
    let new = replacement.into_inner().unwrap();
    eprintln!(
        "  reclaimed {old:?}\n  replaced by {new:?}\n  fewest Ready pods: {} ({} counting pods on nodes that lost their heartbeat)",
        fewest.ready, fewest.ready_or_on_lost_node
    );
    // The drain respects the PodDisruptionBudget; a node that stops reporting is not the drain.
    assert!(
        fewest.ready_or_on_lost_node >= 2,
        "the drain took the app to {} Ready pods, below its budget of 2",
        fewest.ready_or_on_lost_node
    );
    assert_ne!(
        new.offering, old.offering,
        "Karpenter marks the reclaimed spot offering unavailable: the replacement is another"
    );
    assert_eq!(new.offering.2, "spot", "the app asks for spot");
    assert!(events_about(&lab, "SpotInterrupted", &old.name) > 0);
    assert_eq!(queue_depth(&lab), (0, 0), "Karpenter deleted the message");
    let terminated = at(&timings, "old instance terminated in moto");
    assert!(
        terminated <= WARNING,
        "warning to termination took {terminated:?}, longer than the two-minute warning"
    );
    remove_budget(&lab);
}

#[test]
fn interruption_rebalance_and_malformed_messages_disrupt_nothing_then_stopping_and_scheduled_change_do()
 {
    let Some((mut lab, _, _)) = Lab::deployed("interruption: other messages", |s| s) else {
        return;
    };
    // Two pods, one may be evicted at a time (one replica under a budget of one could never be
    // evicted: the drain would wait forever).
    workload(&lab, 2, 1, false);
    let first = hosted(&mut lab, "the 2 pods Ready on one node", 2, &[]);
    let id = first.instance().to_owned();

    // Nothing to act on: a rebalance recommendation (an event only), a Health event of another
    // category, a state change to `running`, and a message that is no event at all.
    let logged_before = lab
        .log("karpenter")
        .matches("failed parsing interruption message")
        .count();
    put_event(
        &lab,
        "aws.ec2",
        "EC2 Instance Rebalance Recommendation",
        &[instance_arn(&id)],
        json!({"instance-id": id}),
    );
    put_event(
        &lab,
        "aws.health",
        "AWS Health Event",
        &[instance_arn(&id)],
        health(&id, "issue"),
    );
    put_event(
        &lab,
        "aws.ec2",
        "EC2 Instance State-change Notification",
        &[instance_arn(&id)],
        json!({"instance-id": id, "state": "running"}),
    );
    lab.aws(&format!(
        "sqs = boto3.client('sqs')
sqs.send_message(QueueUrl=sqs.get_queue_url(QueueName='{QUEUE}')['QueueUrl'], MessageBody='{{\"version\": \"0\", not json')"
    ));
    lab.wait("the four messages consumed (queue empty)", MIN, |l| {
        (queue_depth(l) == (0, 0)).then_some(())
    });
    lab.wait(
        "the rebalance recommendation recorded as an event",
        MIN,
        |l| (events_about(l, "SpotRebalanceRecommendation", &first.name) > 0).then_some(()),
    );
    assert!(
        lab.log("karpenter")
            .matches("failed parsing interruption message")
            .count()
            > logged_before,
        "Karpenter logs the malformed message"
    );
    lab.never(
        "a disruption after messages that ask for none",
        Duration::from_secs(15),
        |l| {
            claim_named(l, &first.name)
                .filter(deleting)
                .map(|nc| nc.metadata.name)
        },
    );

    // An instance stopping: the NodeClaim is deleted and replaced.
    let replacement = std::cell::RefCell::new(None);
    let chain = disruption(&first, 2, &replacement);
    let put = Instant::now();
    put_event(
        &lab,
        "aws.ec2",
        "EC2 Instance State-change Notification",
        &[instance_arn(&id)],
        json!({"instance-id": id, "state": "stopping"}),
    );
    chain.run(&lab, put, 3 * MIN);
    let second = replacement.into_inner().unwrap();
    assert!(events_about(&lab, "InstanceStopping", &first.name) > 0);

    // An EC2 scheduled change (AWS Health) for the replacement: deleted and replaced too.
    let id = second.instance().to_owned();
    let replacement = std::cell::RefCell::new(None);
    let chain = disruption(&second, 2, &replacement);
    let put = Instant::now();
    put_event(
        &lab,
        "aws.health",
        "AWS Health Event",
        &[instance_arn(&id)],
        health(&id, "scheduledChange"),
    );
    chain.run(&lab, put, 3 * MIN);
    assert!(events_about(&lab, "InstanceUnhealthy", &second.name) > 0);
    assert_eq!(queue_depth(&lab), (0, 0));
    remove_budget(&lab);
}

/// An AWS Health event about EC2 instance `id`, of `category` (`scheduledChange`, `issue`,
/// `accountNotification`).
fn health(id: &str, category: &str) -> Value {
    let code = if category == "scheduledChange" {
        "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED"
    } else {
        "AWS_EC2_OPERATIONAL_ISSUE"
    };
    json!({
        "eventArn": format!("arn:aws:health:us-east-1::event/EC2/{code}/lab-{id}"),
        "service": "EC2",
        "eventTypeCode": code,
        "eventTypeCategory": category,
        "startTime": "Wed, 02 Dec 2026 12:00:00 GMT",
        "endTime": "Wed, 02 Dec 2026 13:00:00 GMT",
        "eventDescription": [{"language": "en_US", "latestDescription": "The instance is scheduled for retirement."}],
        "affectedEntities": [{"entityValue": id}],
    })
}

/// Several spot warnings at once (a spot pool reclaimed in one go): three spot nodes, each
/// holding one of the app's pods (a hostname spread), get their two-minute warnings together.
/// Karpenter drains all three and launches replacements; every pod runs again, no reclaimed
/// instance outlives its warning, and nothing is left without its NodeClaim.
#[test]
fn several_spot_warnings_at_once_drain_every_node_and_lose_no_pod() {
    let Some((mut lab, _, _)) = Lab::deployed("interruption: three spot warnings at once", |s| s)
    else {
        return;
    };
    let inflate: Api<Deployment> = Api::namespaced(lab.client.clone(), "default");
    let image = inflate_image(&lab);
    let spread: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": APP, "namespace": "default"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": APP}},
            "template": {
                "metadata": {"labels": {"app": APP}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "nodeSelector": {"karpenter.sh/nodepool": "workload-general", "karpenter.sh/capacity-type": "spot"},
                    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": APP}}}],
                    "containers": [{"name": "app", "image": image,
                                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
                },
            },
        },
    }))
    .unwrap();
    remove_budget(&lab);
    lab.rt
        .block_on(inflate.create(&PostParams::default(), &spread))
        .unwrap();
    let old: Vec<Claim> = lab.wait("3 pods Ready, one on each of 3 spot nodes", 4 * MIN, |l| {
        let claims: Vec<Claim> = l
            .nodeclaims()
            .iter()
            .filter(|nc| is_true(nc, "Initialized") && !deleting(nc))
            .map(Claim::of)
            .filter(|c| ready_on(l, c.node()) == 1)
            .collect();
        (claims.len() == 3).then_some(claims)
    });
    assert!(old.iter().all(|c| c.offering.2 == "spot"), "{old:?}");
    let put = Instant::now();
    for c in &old {
        put_event(
            &lab,
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            &[instance_arn(c.instance())],
            json!({"instance-id": c.instance(), "instance-action": "terminate"}),
        );
    }
    let reclaimed: Vec<String> = old.iter().map(|c| c.node().to_owned()).collect();
    lab.wait(
        "3 pods Ready again, none on a reclaimed node",
        4 * MIN,
        |l| {
            let pods = app_pods(l.pods("default"));
            (pods.len() == 3
                && pods
                    .iter()
                    .all(|p| lab::pod_available(p) && !reclaimed.iter().any(|n| n == node_of(p))))
            .then_some(())
        },
    );
    let ready = put.elapsed();
    lab.wait(
        "the reclaimed claims gone and their instances terminated",
        2 * MIN,
        |l| {
            old.iter()
                .all(|c| {
                    claim_named(l, &c.name).is_none()
                        && matches!(
                            instance_state(l, c.instance()).as_str(),
                            "shutting-down" | "terminated"
                        )
                })
                .then_some(())
        },
    );
    let terminated = put.elapsed();
    eprintln!(
        "  3 warnings: pods Ready elsewhere after {ready:?}, the 3 instances terminated after {terminated:?}"
    );
    assert!(
        terminated <= WARNING,
        "warning to termination took {terminated:?}, longer than the two-minute warning"
    );
    for c in &old {
        assert!(
            events_about(&lab, "SpotInterrupted", &c.name) > 0,
            "no SpotInterrupted event for {}",
            c.name
        );
    }
    assert_eq!(queue_depth(&lab), (0, 0), "Karpenter deleted every message");
    lab::assert_no_orphan_no_duplicate(&lab);
}
