//! The rows of the IAM-join attack table that a running aws-iam-authenticator does not refuse
//! itself, proven on the rendered documents (moto enforces no IAM; the lab's STS trusts what it
//! is given). With the mapping `system:node:{{SessionName}}` a token is worth the role session
//! name it carries, so what must hold is who can create sessions of the node role and with which
//! names, and what happens to a Node whose instance is gone.

use std::path::PathBuf;

use crate::iam::glob;

use kk_model::yaml::{LoadLimits, load_documents};
use kk_render::{Bundle, render};
use kk_spec::parse_spec;
use serde_json::Value;

fn bundle() -> Bundle {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/specs");
    let text = std::fs::read_to_string(dir.join("iam-eks.yaml")).unwrap();
    let spec = parse_spec(&text, "iam-eks.yaml").unwrap().spec;
    render(&spec, &std::fs::read(dir.join("pki/ca.crt")).unwrap()).unwrap()
}

fn json(bundle: &Bundle, path: &str) -> Value {
    serde_json::from_str(&bundle.files[path]).unwrap()
}

fn list(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a.iter().map(|x| x.as_str().unwrap().to_owned()).collect(),
        Value::Null => Vec::new(),
        other => panic!("not a string or list: {other}"),
    }
}

/// Whether an identity policy has an Allow statement for `action` on `resource` (conditions
/// ignored, i.e. assumed satisfiable: the pessimistic reading for an attack).
fn allows(policy: &Value, action: &str, resource: &str) -> bool {
    policy["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["Effect"] == "Allow")
        .any(|s| {
            let action_ok = if s.get("NotAction").is_some() {
                !list(&s["NotAction"])
                    .iter()
                    .any(|a| glob(&a.to_lowercase(), &action.to_lowercase()))
            } else {
                list(&s["Action"])
                    .iter()
                    .any(|a| glob(&a.to_lowercase(), &action.to_lowercase()))
            };
            let resource_ok = if s.get("NotResource").is_some() {
                !list(&s["NotResource"]).iter().any(|r| glob(r, resource))
            } else {
                list(&s["Resource"]).iter().any(|r| glob(r, resource))
            };
            action_ok && resource_ok
        })
}

/// Attack: "the right role with another instance's session name". Whoever can call
/// `sts:AssumeRole` on the node role picks the RoleSessionName, and `{{SessionName}}` makes it
/// the Node name. Refused: the node role trusts only the EC2 service (which names each session
/// after its instance), and no policy the bundle grants lets anyone else assume it.
#[test]
fn no_principal_but_ec2_can_name_a_node_role_session() {
    let b = bundle();
    let trust = json(&b, "iam/node-role-trust-policy.json");
    let statements = trust["Statement"].as_array().unwrap();
    for s in statements {
        assert_eq!(s["Effect"], "Allow");
        let principal = s["Principal"].as_object().unwrap();
        assert_eq!(
            principal.keys().collect::<Vec<_>>(),
            ["Service"],
            "only a service principal: {s}"
        );
        assert_eq!(list(&s["Principal"]["Service"]), ["ec2.amazonaws.com"]);
        // No sts:SetSourceIdentity / TagSession / AssumeRoleWithWebIdentity for anyone.
        assert_eq!(list(&s["Action"]), ["sts:AssumeRole"]);
    }
    let role_arn = "arn:aws:iam::123456789012:role/lab-node";
    let mut checked = 0;
    for (path, text) in &b.files {
        if !path.starts_with("iam/") || !path.ends_with("-policy.json") || path.contains("trust") {
            continue;
        }
        let policy: Value = serde_json::from_str(text).unwrap();
        if policy.get("Statement").is_none() {
            continue;
        }
        for action in [
            "sts:AssumeRole",
            "sts:AssumeRoleWithWebIdentity",
            "iam:UpdateAssumeRolePolicy",
        ] {
            assert!(
                !allows(&policy, action, role_arn),
                "{path} allows {action} on the node role: its holder could name a session after any instance"
            );
        }
        checked += 1;
    }
    let inline = json(&b, "iam/node-role.json");
    for (name, policy) in inline["inlinePolicies"].as_object().unwrap() {
        assert!(
            !allows(policy, "sts:AssumeRole", role_arn),
            "node role inline policy {name} lets a node assume the node role again"
        );
        checked += 1;
    }
    assert!(
        checked >= 3,
        "controller, rotator and node policies checked ({checked})"
    );
    // The evaluator itself sees the attack when the grant exists.
    let leaky =
        serde_json::json!({"Statement": [{"Effect": "Allow", "Action": "sts:*", "Resource": "*"}]});
    assert!(allows(&leaky, "sts:AssumeRole", role_arn));
}

/// Attack: "a terminated instance". Its role credentials stay valid until they expire (hours),
/// and the authenticator checks no instance state under `{{SessionName}}`, so a token made from
/// them still authenticates. What cannot survive is its Node: the rendered CCM runs every
/// default controller, among them cloud-node-lifecycle (k8s.io/cloud-provider v0.36.0
/// app/controllermanager.go: none disabled by default; controllers/nodelifecycle deletes a Node
/// whose instance no longer exists), and Karpenter deletes the NodeClaim's Node.
#[test]
fn the_ccm_removes_the_node_of_a_terminated_instance() {
    let b = bundle();
    let docs = load_documents(
        &b.files["cloud/aws-cloud-controller-manager.yaml"],
        LoadLimits::default(),
    )
    .unwrap();
    let ds = docs
        .iter()
        .map(|d| &d.value)
        .find(|v| v["kind"] == "DaemonSet" || v["kind"] == "Deployment")
        .expect("the CCM workload");
    let args = list(&ds["spec"]["template"]["spec"]["containers"][0]["args"]);
    let controllers: Vec<&String> = args
        .iter()
        .filter(|a| a.starts_with("--controllers="))
        .collect();
    let lifecycle_on = controllers.is_empty()
        || controllers.iter().any(|c| {
            let list = c.trim_start_matches("--controllers=");
            let items: Vec<&str> = list.split(',').collect();
            (items.contains(&"*") || items.contains(&"cloud-node-lifecycle"))
                && !items.contains(&"-cloud-node-lifecycle")
        });
    assert!(
        lifecycle_on,
        "the CCM must run cloud-node-lifecycle: {args:?}"
    );
    // The node's own credentials cannot resurrect another instance's Node (NodeRestriction,
    // performed on the lab: lab_iam.rs), and the role cannot be assumed by anyone but EC2
    // (above): the window is the stolen instance's own name until its credentials expire.
}
