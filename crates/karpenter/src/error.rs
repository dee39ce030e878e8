//! Why a word of the Karpenter/Kubernetes API does not parse: an operator, a bound, a taint
//! effect. Callers locate it (file:line:col and field); this type says only what is wrong.

use std::fmt;

/// A requirement operator, requirement values, taint effect or toleration operator that the
/// API does not accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Not one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte.
    Operator(String),
    /// A bound operator's value that is not an integer.
    NotInteger {
        operator: &'static str,
        value: String,
    },
    /// A bound operator with other than one value.
    BoundCount {
        operator: &'static str,
        found: usize,
    },
    /// Not NoSchedule, PreferNoSchedule or NoExecute.
    Effect(String),
    /// Not Equal, Exists, Gt or Lt.
    TolerationOperator(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Operator(op) => write!(
                f,
                "unsupported operator {op:?} (expected In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte)"
            ),
            ParseError::NotInteger { operator, value } => {
                write!(
                    f,
                    "operator {operator} needs one integer value, not {value:?}"
                )
            }
            ParseError::BoundCount { operator, found } => write!(
                f,
                "operator {operator} needs exactly one integer value, found {found}"
            ),
            ParseError::Effect(e) => write!(
                f,
                "unknown taint effect {e:?} (expected NoSchedule, PreferNoSchedule or NoExecute)"
            ),
            ParseError::TolerationOperator(op) => write!(f, "unknown toleration operator {op:?}"),
        }
    }
}

impl std::error::Error for ParseError {}

impl From<ParseError> for String {
    fn from(e: ParseError) -> String {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::ParseError;
    use crate::{Effect, Operator, Requirement, TolerationOp};

    #[test]
    fn each_parser_says_what_is_wrong_in_its_own_variant() {
        assert_eq!(
            Operator::parse("Equals"),
            Err(ParseError::Operator("Equals".into()))
        );
        assert_eq!(
            Requirement::new(Operator::Gt, &["x"]),
            Err(ParseError::NotInteger {
                operator: "Gt",
                value: "x".into()
            })
        );
        assert_eq!(
            Requirement::new(Operator::Lte, &["1", "2"]),
            Err(ParseError::BoundCount {
                operator: "Lte",
                found: 2
            })
        );
        assert_eq!(
            Effect::parse("NoRun"),
            Err(ParseError::Effect("NoRun".into()))
        );
        assert_eq!(
            TolerationOp::parse("Is").unwrap_err().to_string(),
            "unknown toleration operator \"Is\""
        );
    }
}
