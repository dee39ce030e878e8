//! Taints and tolerations: Kubernetes' `Toleration.ToleratesTaint` (every operator, Gt/Lt
//! included, and every effect), and "does the pod tolerate these taints", written once.

use crate::error::ParseError;
use std::fmt;

/// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Effect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl Effect {
    pub fn parse(text: &str) -> Result<Effect, ParseError> {
        match text {
            "NoSchedule" => Ok(Effect::NoSchedule),
            "PreferNoSchedule" => Ok(Effect::PreferNoSchedule),
            "NoExecute" => Ok(Effect::NoExecute),
            other => Err(ParseError::Effect(other.to_owned())),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Effect::NoSchedule => "NoSchedule",
            Effect::PreferNoSchedule => "PreferNoSchedule",
            Effect::NoExecute => "NoExecute",
        }
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: Effect,
}

impl Taint {
    /// `NoSchedule` and `NoExecute` keep untolerating pods off; `PreferNoSchedule` only steers.
    pub fn is_hard(&self) -> bool {
        matches!(self.effect, Effect::NoSchedule | Effect::NoExecute)
    }
}

impl fmt::Display for Taint {
    /// `key=value:Effect` (`key:Effect` without a value).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect.as_str())
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect.as_str())
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TolerationOp {
    Equal,
    Exists,
    Gt,
    Lt,
}

impl TolerationOp {
    /// `Equal` (also the empty default), `Exists`, `Gt` or `Lt`.
    pub fn parse(text: &str) -> Result<TolerationOp, ParseError> {
        match text {
            "Equal" | "" => Ok(TolerationOp::Equal),
            "Exists" => Ok(TolerationOp::Exists),
            "Gt" => Ok(TolerationOp::Gt),
            "Lt" => Ok(TolerationOp::Lt),
            other => Err(ParseError::TolerationOperator(other.to_owned())),
        }
    }
}

/// Which field of a toleration is malformed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TolerationError {
    /// `operator` or `effect`.
    pub field: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Toleration {
    /// Empty with `Exists`: every key.
    pub key: String,
    pub operator: TolerationOp,
    pub value: String,
    /// `None`: every effect.
    pub effect: Option<Effect>,
}

impl Toleration {
    /// A toleration from its fields as written (`None` or empty: unset).
    pub fn from_fields(
        key: Option<&str>,
        operator: Option<&str>,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> Result<Toleration, TolerationError> {
        let operator =
            TolerationOp::parse(operator.unwrap_or("")).map_err(|e| TolerationError {
                field: "operator",
                message: e.to_string(),
            })?;
        let effect = match effect.unwrap_or("") {
            "" => None,
            e => Some(Effect::parse(e).map_err(|e| TolerationError {
                field: "effect",
                message: e.to_string(),
            })?),
        };
        Ok(Toleration {
            key: key.unwrap_or_default().to_owned(),
            operator,
            value: value.unwrap_or_default().to_owned(),
            effect,
        })
    }

    /// `- operator: Exists` with no key and no effect: tolerates every taint.
    pub fn tolerates_everything(&self) -> bool {
        self.key.is_empty() && self.operator == TolerationOp::Exists && self.effect.is_none()
    }

    /// Kubernetes' `Toleration.ToleratesTaint` (including the Gt/Lt numeric operators).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOp::Exists => true,
            TolerationOp::Equal => self.value == taint.value,
            TolerationOp::Gt | TolerationOp::Lt => {
                match (self.value.parse::<i64>(), taint.value.parse::<i64>()) {
                    (Ok(t), Ok(v)) => {
                        if self.operator == TolerationOp::Gt {
                            v > t
                        } else {
                            v < t
                        }
                    }
                    _ => false,
                }
            }
        }
    }
}

/// Whether some toleration of `tolerations` tolerates `taint`.
pub fn tolerated(taint: &Taint, tolerations: &[Toleration]) -> bool {
    tolerations.iter().any(|tol| tol.tolerates(taint))
}

/// The `NoSchedule`/`NoExecute` taints of `taints` that no toleration tolerates: what keeps a
/// pod off a node for good (a `PreferNoSchedule` taint is relaxed away).
pub fn untolerated_hard<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
) -> impl Iterator<Item = &'a Taint> {
    taints
        .iter()
        .filter(move |t| t.is_hard() && !tolerated(t, tolerations))
}

/// The first taint of `taints` that no toleration tolerates (Karpenter checks every effect,
/// PreferNoSchedule included; relaxation later adds a toleration for it).
pub fn untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints.iter().find(|t| !tolerated(t, tolerations))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: Effect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }

    fn tol(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        Toleration::from_fields(
            opt(key).as_deref(),
            opt(op).as_deref(),
            opt(value).as_deref(),
            opt(effect).as_deref(),
        )
        .unwrap()
    }

    #[test]
    fn toleration_matching_follows_kubernetes() {
        let gpu = taint("gpu", "true", Effect::NoSchedule);
        assert!(tol("gpu", "", "true", "NoSchedule").tolerates(&gpu));
        assert!(tol("gpu", "Exists", "", "").tolerates(&gpu));
        assert!(tol("", "Exists", "", "").tolerates(&gpu));
        assert!(tol("", "Exists", "", "").tolerates_everything());
        assert!(!tol("", "Exists", "", "NoExecute").tolerates(&gpu));
        assert!(!tol("gpu", "", "false", "").tolerates(&gpu));
        assert!(!tol("gpu", "", "", "").tolerates(&gpu));
        let level = taint("level", "5", Effect::NoExecute);
        assert!(tol("level", "Gt", "4", "").tolerates(&level));
        assert!(!tol("level", "Gt", "5", "").tolerates(&level));
        assert!(tol("level", "Lt", "6", "").tolerates(&level));
        assert!(!tol("level", "Lt", "x", "").tolerates(&level));
        let err = Toleration::from_fields(None, Some("Near"), None, None).unwrap_err();
        assert_eq!(err.field, "operator");
        let err = Toleration::from_fields(None, None, None, Some("Never")).unwrap_err();
        assert_eq!(err.field, "effect");
    }

    #[test]
    fn hard_taints_only_keep_pods_off() {
        let taints = [
            taint("a", "", Effect::PreferNoSchedule),
            taint("b", "", Effect::NoSchedule),
        ];
        assert_eq!(untolerated(&taints, &[]).unwrap().key, "a");
        let hard: Vec<&Taint> = untolerated_hard(&taints, &[]).collect();
        assert_eq!(hard.len(), 1);
        assert_eq!(hard[0].to_string(), "b:NoSchedule");
        assert_eq!(
            untolerated_hard(&taints, &[tol("b", "Exists", "", "")]).count(),
            0
        );
    }
}
