//! The `interruption/` part of the bundle and what it changes elsewhere: the queue named after
//! the cluster, its policy, the five rules with the detail-types Karpenter parses, Karpenter's
//! setting, and a controller policy whose SQS statement reaches only that queue (evaluated on
//! the rendered document: a look-alike queue's ARN is not covered).

use kk_render::Bundle;
use kk_spec::{EXAMPLE, parse_spec};
use serde_json::Value;

use crate::iam::glob;

fn render(text: &str) -> Bundle {
    let cluster = parse_spec(text, "example").unwrap().spec;
    let ca = kk_render::inline_ca_pem(&cluster)
        .expect("inline CA")
        .unwrap();
    kk_render::render(&cluster, &ca).unwrap()
}

fn json(bundle: &Bundle, path: &str) -> Value {
    serde_json::from_str(&bundle.files[path]).unwrap()
}

fn strings(v: &Value) -> Vec<&str> {
    match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

const QUEUE_ARN: &str = "arn:aws:sqs:us-east-1:111122223333:demo";

#[test]
fn the_example_has_the_queue_its_policy_and_the_five_rules() {
    let bundle = render(EXAMPLE);
    let queue = json(&bundle, "interruption/queue.json");
    assert_eq!(queue["queueName"], "demo");
    assert_eq!(queue["arn"], QUEUE_ARN);
    assert_eq!(queue["attributes"]["MessageRetentionPeriod"], "300");
    assert_eq!(queue["attributes"]["SqsManagedSseEnabled"], "true");

    let policy = json(&bundle, "interruption/queue-policy.json");
    let statements = policy["Statement"].as_array().unwrap();
    assert!(statements.iter().any(|s| s["Effect"] == "Allow"
        && strings(&s["Principal"]["Service"]).contains(&"events.amazonaws.com")
        && strings(&s["Principal"]["Service"]).contains(&"sqs.amazonaws.com")
        && s["Action"] == "sqs:SendMessage"
        && s["Resource"] == QUEUE_ARN));
    assert!(statements.iter().any(|s| s["Effect"] == "Deny"
        && s["Principal"] == "*"
        && s["Action"] == "sqs:*"
        && s["Condition"]["Bool"]["aws:SecureTransport"] == "false"));

    let rules = json(&bundle, "interruption/rules.json");
    let found: Vec<(String, String, String)> = rules
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["target"], QUEUE_ARN);
            let pattern = r["eventPattern"].as_object().unwrap();
            assert_eq!(pattern.len(), 2, "source and detail-type only: {r}");
            (
                r["name"].as_str().unwrap().to_owned(),
                r["eventPattern"]["source"][0].as_str().unwrap().to_owned(),
                r["eventPattern"]["detail-type"][0]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect();
    let expected = [
        ("demo-health", "aws.health", "AWS Health Event"),
        (
            "demo-spot",
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
        ),
        (
            "demo-rebalance",
            "aws.ec2",
            "EC2 Instance Rebalance Recommendation",
        ),
        (
            "demo-state-change",
            "aws.ec2",
            "EC2 Instance State-change Notification",
        ),
        (
            "demo-reservation",
            "aws.ec2",
            "EC2 Capacity Reservation Instance Interruption Warning",
        ),
    ];
    let expected: Vec<(String, String, String)> = expected
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    assert_eq!(found, expected);

    let values: Value = serde_saphyr::from_str(&bundle.files["karpenter/values.yaml"]).unwrap();
    assert_eq!(
        values["settings"]["interruptionQueue"], "demo",
        "the name, not a URL or ARN"
    );
    assert!(
        bundle.files["ORDER.md"].contains("**Interruption queue.** Create the SQS queue `demo`")
    );
}

#[test]
fn the_controller_reaches_only_its_own_queue() {
    let bundle = render(EXAMPLE);
    let policy = json(&bundle, "iam/controller-policy.json");
    let covers = |action: &str, resource: &str| {
        policy["Statement"].as_array().unwrap().iter().any(|s| {
            s["Effect"] == "Allow"
                && strings(&s["Action"])
                    .iter()
                    .any(|a| glob(&a.to_lowercase(), &action.to_lowercase()))
                && strings(&s["Resource"]).iter().any(|r| glob(r, resource))
        })
    };
    for action in ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueUrl"] {
        assert!(covers(action, QUEUE_ARN), "{action} on the queue");
        for other in [
            "arn:aws:sqs:us-east-1:111122223333:demo2",
            "arn:aws:sqs:us-east-1:111122223333:other",
            "arn:aws:sqs:us-west-2:111122223333:demo",
            "arn:aws:sqs:us-east-1:444455556666:demo",
        ] {
            assert!(!covers(action, other), "{action} reaches {other}");
        }
    }
    for write in [
        "sqs:SendMessage",
        "sqs:PurgeQueue",
        "sqs:DeleteQueue",
        "sqs:SetQueueAttributes",
    ] {
        assert!(!covers(write, QUEUE_ARN), "{write} allowed");
    }
}

#[test]
fn turned_off_or_on_demand_only_there_is_no_queue_and_no_sqs_access() {
    let off = EXAMPLE.replace(
        "    isolatedVPC: false\n",
        "    interruptionQueue: \"\"\n    isolatedVPC: false\n",
    );
    // Reserved capacity can be interrupted too: the training pool goes on-demand as well.
    let on_demand: String = EXAMPLE
        .replace(
            "capacityTypes: [spot, on-demand]",
            "capacityTypes: [on-demand]",
        )
        .replace(
            "capacityTypes: [reserved, on-demand]",
            "capacityTypes: [on-demand]",
        )
        .lines()
        .filter(|l| !l.contains("capacityReservationType:"))
        .map(|l| format!("{l}\n"))
        .collect();
    for text in [off, on_demand] {
        let bundle = render(&text);
        assert!(!bundle.files.keys().any(|p| p.starts_with("interruption/")));
        assert!(!bundle.files["iam/controller-policy.json"].contains("sqs:"));
        let values: Value = serde_saphyr::from_str(&bundle.files["karpenter/values.yaml"]).unwrap();
        assert_eq!(values["settings"]["interruptionQueue"], "");
    }
}
