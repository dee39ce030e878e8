//! IAM policy evaluation for one question: may this identity perform `action` on `resource`?
//! moto has no policy simulator (and enforces no IAM), so `doctor` reads the policy documents
//! and evaluates them itself, the way IAM does for identity policies: an explicit Deny wins,
//! otherwise any Allow whose Action and Resource match (NotAction/NotResource inverted)
//! allows. Conditions are reported, not evaluated: a conditional Allow counts as an Allow
//! "under conditions", which `doctor` shows as evidence.

use serde_json::Value;

/// The answer for one action on one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed by the statement with this Sid (or index) — with its conditions, if any.
    Allowed {
        statement: String,
        conditional: bool,
    },
    /// Denied by this statement.
    Denied { statement: String },
    /// No statement allows it (IAM's implicit deny).
    NotAllowed,
}

/// IAM's wildcard match for actions and ARNs: `*` any run, `?` one character; actions
/// compare case-insensitively (IAM does), ARNs case-sensitively.
pub fn glob(pattern: &str, text: &str, case_insensitive: bool) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = if case_insensitive {
        (
            pattern.to_lowercase().chars().collect(),
            text.to_lowercase().chars().collect(),
        )
    } else {
        (pattern.chars().collect(), text.chars().collect())
    };
    // Iterative wildcard matching with backtracking to the last `*`.
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

fn strings(v: &Value) -> Vec<&str> {
    match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// Whether the statement's Action/NotAction (`key` = "Action") or Resource/NotResource covers
/// `target`; a statement with neither covers nothing.
fn covers(statement: &Value, key: &str, target: &str, case_insensitive: bool) -> bool {
    let not_key = format!("Not{key}");
    if let Some(v) = statement.get(key) {
        strings(v).iter().any(|p| glob(p, target, case_insensitive))
    } else if let Some(v) = statement.get(&not_key) {
        !strings(v).iter().any(|p| glob(p, target, case_insensitive))
    } else {
        false
    }
}

fn statements(document: &Value) -> Vec<&Value> {
    match &document["Statement"] {
        Value::Array(a) => a.iter().collect(),
        v @ Value::Object(_) => vec![v],
        _ => Vec::new(),
    }
}

fn statement_name(s: &Value, index: usize, policy: &str) -> String {
    match s["Sid"].as_str() {
        Some(sid) => format!("{policy}#{sid}"),
        None => format!("{policy}#statement[{index}]"),
    }
}

/// Evaluates `action` on `resource` against every (name, document) policy of one identity.
pub fn evaluate(policies: &[(String, Value)], action: &str, resource: &str) -> Verdict {
    let mut allowed = None;
    for (policy, document) in policies {
        for (i, s) in statements(document).into_iter().enumerate() {
            if !(covers(s, "Action", action, true) && covers(s, "Resource", resource, false)) {
                continue;
            }
            let name = statement_name(s, i, policy);
            match s["Effect"].as_str() {
                Some("Deny") if s.get("Condition").is_none() => {
                    return Verdict::Denied { statement: name };
                }
                Some("Allow") if allowed.is_none() => {
                    allowed = Some(Verdict::Allowed {
                        statement: name,
                        conditional: s.get("Condition").is_some(),
                    })
                }
                _ => {}
            }
        }
    }
    allowed.unwrap_or(Verdict::NotAllowed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ROLE: &str = "arn:aws:iam::111122223333:role/KarpenterNodeRole-demo";

    fn pass_role(resource: Value) -> Value {
        json!({"Version": "2012-10-17", "Statement": [
            {"Sid": "AllowPassingInstanceRole", "Effect": "Allow", "Action": ["iam:PassRole"], "Resource": resource,
             "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}}
        ]})
    }

    #[test]
    fn glob_matches_like_iam() {
        assert!(glob("iam:*", "iam:PassRole", true));
        assert!(glob("IAM:passrole", "iam:PassRole", true));
        assert!(glob("arn:aws:iam::*:role/Karpenter*", ROLE, false));
        assert!(!glob("arn:aws:iam::*:role/karpenter*", ROLE, false));
        assert!(glob(
            "arn:aws:iam::111122223333:role/?arpenterNodeRole-demo",
            ROLE,
            false
        ));
        assert!(!glob("arn:aws:iam::111122223333:role/Other", ROLE, false));
        assert!(glob("*", "", false));
    }

    #[test]
    fn pass_role_on_the_node_role_is_allowed_under_its_condition() {
        let p = vec![("controller".to_owned(), pass_role(json!(ROLE)))];
        assert_eq!(
            evaluate(&p, "iam:PassRole", ROLE),
            Verdict::Allowed {
                statement: "controller#AllowPassingInstanceRole".into(),
                conditional: true
            }
        );
    }

    #[test]
    fn pass_role_on_another_role_or_no_statement_is_not_allowed() {
        let other = vec![(
            "controller".to_owned(),
            pass_role(json!("arn:aws:iam::111122223333:role/Other")),
        )];
        assert_eq!(evaluate(&other, "iam:PassRole", ROLE), Verdict::NotAllowed);
        let none = vec![(
            "controller".to_owned(),
            json!({"Statement": [{"Effect": "Allow", "Action": "ec2:*", "Resource": "*"}]}),
        )];
        assert_eq!(evaluate(&none, "iam:PassRole", ROLE), Verdict::NotAllowed);
    }

    #[test]
    fn an_explicit_deny_in_any_policy_wins_and_not_resource_inverts() {
        let p = vec![
            ("allow".to_owned(), pass_role(json!("*"))),
            (
                "deny".to_owned(),
                json!({"Statement": {"Effect": "Deny", "Action": "iam:*", "NotResource": "arn:aws:iam::*:role/Safe"}}),
            ),
        ];
        assert_eq!(
            evaluate(&p, "iam:PassRole", ROLE),
            Verdict::Denied {
                statement: "deny#statement[0]".into()
            }
        );
        assert!(matches!(
            evaluate(&p, "iam:PassRole", "arn:aws:iam::1:role/Safe"),
            Verdict::Allowed { .. }
        ));
    }
}
