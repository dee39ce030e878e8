//! The requirement algebra: per label key, a set of allowed values that may be a complement
//! (NotIn / Exists) and may carry integer bounds (Gt / Lt), as Karpenter's
//! `pkg/scheduling/requirement.go` and `requirements.go` model node selector requirements.
//!
//! - `In [a b]` is the set {a, b}; `DoesNotExist` is the empty set;
//! - `NotIn [a]` is the complement of {a}; `Exists` is the complement of {} (everything);
//! - `Gt N` / `Lt N` are `Exists` with an inclusive lower bound N+1 / upper bound N−1; values that
//!   are not integers never satisfy a bound.
//!
//! Intersection of two requirements is set intersection (bounds combine, and a concrete set
//! drops its bounds after filtering its values). [`Requirements::compatible`] is Karpenter's
//! `Compatible`: every key the incoming side names must be defined here unless it is a
//! well-known label or the incoming operator is NotIn/DoesNotExist, and every shared key must
//! intersect — where two "negative" requirements (NotIn/DoesNotExist) are always compatible, since
//! a node without the label satisfies both.

use crate::error::ParseError;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::labels;

/// A node selector operator, including Karpenter's `Gte`/`Lte`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    Gte,
    Lte,
}

impl Operator {
    pub fn parse(text: &str) -> Result<Operator, ParseError> {
        Ok(match text {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            "Gte" => Operator::Gte,
            "Lte" => Operator::Lte,
            other => return Err(ParseError::Operator(other.to_owned())),
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
            Operator::Gte => "Gte",
            Operator::Lte => "Lte",
        }
    }
}

/// `Exists`, for borrowing where a key is undefined.
pub static EXISTS: Requirement = Requirement {
    complement: true,
    values: BTreeSet::new(),
    gte: None,
    lte: None,
    min_values: None,
};

/// The allowed values of one label key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Requirement {
    complement: bool,
    values: BTreeSet<String>,
    gte: Option<i64>,
    lte: Option<i64>,
    /// Karpenter's `minValues`: how many distinct values the launch must stay flexible over.
    pub min_values: Option<usize>,
}

impl Requirement {
    /// Builds a requirement. `Gt`/`Lt`/`Gte`/`Lte` need exactly one integer value; `In` at least one.
    pub fn new<S: AsRef<str>>(op: Operator, values: &[S]) -> Result<Requirement, ParseError> {
        let owned = || values.iter().map(|v| v.as_ref().to_owned()).collect();
        let bound = || -> Result<i64, ParseError> {
            match values {
                [one] => one
                    .as_ref()
                    .parse::<i64>()
                    .map_err(|_| ParseError::NotInteger {
                        operator: op.as_str(),
                        value: one.as_ref().to_owned(),
                    }),
                _ => Err(ParseError::BoundCount {
                    operator: op.as_str(),
                    found: values.len(),
                }),
            }
        };
        Ok(match op {
            Operator::In => Requirement::in_values(owned()),
            Operator::NotIn => Requirement {
                complement: true,
                values: owned(),
                ..Requirement::exists()
            },
            Operator::Exists => Requirement::exists(),
            Operator::DoesNotExist => Requirement::does_not_exist(),
            Operator::Gt => match bound()?.checked_add(1) {
                Some(n) => Requirement {
                    gte: Some(n),
                    ..Requirement::exists()
                },
                None => Requirement::does_not_exist(),
            },
            Operator::Lt => match bound()?.checked_sub(1) {
                Some(n) => Requirement {
                    lte: Some(n),
                    ..Requirement::exists()
                },
                None => Requirement::does_not_exist(),
            },
            Operator::Gte => Requirement {
                gte: Some(bound()?),
                ..Requirement::exists()
            },
            Operator::Lte => Requirement {
                lte: Some(bound()?),
                ..Requirement::exists()
            },
        })
    }

    /// `In values`.
    pub fn in_values<I: IntoIterator<Item = S>, S: Into<String>>(values: I) -> Requirement {
        Requirement {
            complement: false,
            values: values.into_iter().map(Into::into).collect(),
            gte: None,
            lte: None,
            min_values: None,
        }
    }

    /// `In [value]`.
    pub fn single(value: &str) -> Requirement {
        Requirement::in_values([value])
    }

    /// `Exists`: any value.
    pub fn exists() -> Requirement {
        Requirement {
            complement: true,
            values: BTreeSet::new(),
            gte: None,
            lte: None,
            min_values: None,
        }
    }

    /// `DoesNotExist`: no value (the empty set).
    pub fn does_not_exist() -> Requirement {
        Requirement {
            complement: false,
            values: BTreeSet::new(),
            gte: None,
            lte: None,
            min_values: None,
        }
    }

    pub fn with_min_values(mut self, min_values: Option<usize>) -> Requirement {
        self.min_values = min_values;
        self
    }

    pub fn is_complement(&self) -> bool {
        self.complement
    }

    /// The concrete values (for `In`), or the excluded ones (for `NotIn`), sorted.
    pub fn values(&self) -> impl Iterator<Item = &str> {
        self.values.iter().map(String::as_str)
    }

    /// Number of allowed values; `None` for a complement (unbounded).
    pub fn len(&self) -> Option<usize> {
        if self.complement {
            None
        } else {
            Some(self.values.len())
        }
    }

    /// True for an `In` set with no value (DoesNotExist).
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }

    /// The single allowed value, when there is exactly one.
    pub fn single_value(&self) -> Option<&str> {
        if !self.complement && self.values.len() == 1 {
            self.values.iter().next().map(String::as_str)
        } else {
            None
        }
    }

    /// The operator this set reads as (bounds read as `Exists`, as upstream).
    pub fn operator(&self) -> Operator {
        match (self.complement, self.values.is_empty()) {
            (true, false) => Operator::NotIn,
            (true, true) => Operator::Exists,
            (false, false) => Operator::In,
            (false, true) => Operator::DoesNotExist,
        }
    }

    fn is_negative(&self) -> bool {
        matches!(self.operator(), Operator::NotIn | Operator::DoesNotExist)
    }

    /// Whether `value` is allowed.
    pub fn has(&self, value: &str) -> bool {
        within(value, self.gte, self.lte) && (self.values.contains(value) != self.complement)
    }

    /// Whether a node whose label is `value` (`None`: the node has no such label) satisfies
    /// this requirement, as Kubernetes evaluates a node selector requirement: only `NotIn` and
    /// `DoesNotExist` hold on a node without the label.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match value {
            Some(v) => self.has(v),
            None => self.is_negative(),
        }
    }

    /// The set intersection.
    pub fn intersection(&self, other: &Requirement) -> Requirement {
        let gte = max_opt(self.gte, other.gte);
        let lte = min_opt(self.lte, other.lte);
        let min_values = max_opt(self.min_values, other.min_values);
        if let (Some(lo), Some(hi)) = (gte, lte)
            && lo > hi
        {
            return Requirement::does_not_exist().with_min_values(min_values);
        }
        let complement = self.complement && other.complement;
        let mut values: BTreeSet<String> = match (self.complement, other.complement) {
            (true, true) => self.values.union(&other.values).cloned().collect(),
            (true, false) => other.values.difference(&self.values).cloned().collect(),
            (false, true) => self.values.difference(&other.values).cloned().collect(),
            (false, false) => self.values.intersection(&other.values).cloned().collect(),
        };
        if gte.is_some() || lte.is_some() {
            values.retain(|v| within(v, gte, lte));
        }
        let (gte, lte) = if complement { (gte, lte) } else { (None, None) };
        Requirement {
            complement,
            values,
            gte,
            lte,
            min_values,
        }
    }

    /// Whether the intersection is non-empty, without building it.
    pub fn has_intersection(&self, other: &Requirement) -> bool {
        let gte = max_opt(self.gte, other.gte);
        let lte = min_opt(self.lte, other.lte);
        if let (Some(lo), Some(hi)) = (gte, lte)
            && lo > hi
        {
            return false;
        }
        match (self.complement, other.complement) {
            (true, true) => true,
            (true, false) => other
                .values
                .iter()
                .any(|v| !self.values.contains(v) && within(v, gte, lte)),
            (false, true) => self
                .values
                .iter()
                .any(|v| !other.values.contains(v) && within(v, gte, lte)),
            (false, false) => {
                let (small, large) = if self.values.len() <= other.values.len() {
                    (&self.values, &other.values)
                } else {
                    (&other.values, &self.values)
                };
                small
                    .iter()
                    .any(|v| large.contains(v) && within(v, gte, lte))
            }
        }
    }
}

fn within(value: &str, gte: Option<i64>, lte: Option<i64>) -> bool {
    if gte.is_none() && lte.is_none() {
        return true;
    }
    let Ok(n) = value.parse::<i64>() else {
        return false;
    };
    gte.is_none_or(|lo| n >= lo) && lte.is_none_or(|hi| n <= hi)
}

fn max_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl fmt::Display for Requirement {
    /// `In [a b]`, `NotIn [a]`, `Exists`, `DoesNotExist`, with ` >=N`/` <=N` bounds.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = self.operator();
        match op {
            Operator::Exists | Operator::DoesNotExist => write!(f, "{}", op.as_str())?,
            _ => {
                let shown: Vec<&str> = self.values.iter().take(5).map(String::as_str).collect();
                write!(f, "{} [{}", op.as_str(), shown.join(" "))?;
                if self.values.len() > 5 {
                    write!(f, " and {} others", self.values.len() - 5)?;
                }
                write!(f, "]")?;
            }
        }
        if let Some(n) = self.gte {
            write!(f, " >={n}")?;
        }
        if let Some(n) = self.lte {
            write!(f, " <={n}")?;
        }
        if let Some(n) = self.min_values {
            write!(f, " minValues {n}")?;
        }
        Ok(())
    }
}

/// Why two sets of requirements cannot both hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// A custom label the other side does not define.
    Undefined { key: String },
    /// Both define `key` and no value satisfies both.
    Disjoint {
        key: String,
        incoming: Box<Requirement>,
        existing: Box<Requirement>,
    },
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Conflict::Undefined { key } => write!(f, "label {key:?} does not have known values"),
            Conflict::Disjoint {
                key,
                incoming,
                existing,
            } => write!(f, "{key} {incoming} not in {existing}"),
        }
    }
}

/// Requirements by label key (keys normalized, as upstream).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Requirements(BTreeMap<String, Requirement>);

impl Requirements {
    pub fn new() -> Requirements {
        Requirements::default()
    }

    /// `key=value` for every label (`NewLabelRequirements`).
    pub fn from_labels<'a, I: IntoIterator<Item = (&'a String, &'a String)>>(
        labels: I,
    ) -> Requirements {
        let mut r = Requirements::new();
        for (k, v) in labels {
            r.add(k, Requirement::single(v));
        }
        r
    }

    /// Intersects `req` into the requirement for `key`.
    pub fn add(&mut self, key: &str, req: Requirement) {
        let key = labels::normalize(key);
        match self.0.get_mut(key) {
            Some(existing) => *existing = req.intersection(existing),
            None => {
                self.0.insert(key.to_owned(), req);
            }
        }
    }

    /// Intersects every requirement of `other` into this one.
    pub fn add_all(&mut self, other: &Requirements) {
        for (k, r) in &other.0 {
            self.add(k, r.clone());
        }
    }

    /// Replaces the requirement for `key`.
    pub fn set(&mut self, key: &str, req: Requirement) {
        self.0.insert(labels::normalize(key).to_owned(), req);
    }

    pub fn remove(&mut self, key: &str) -> Option<Requirement> {
        self.0.remove(key)
    }

    pub fn has(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// The requirement for `key`; `Exists` when undefined.
    pub fn get(&self, key: &str) -> Requirement {
        self.0.get(key).cloned().unwrap_or_else(Requirement::exists)
    }

    pub fn get_ref(&self, key: &str) -> Option<&Requirement> {
        self.0.get(key)
    }

    /// The requirement for `key`, borrowed; `Exists` when undefined.
    pub fn get_or_exists(&self, key: &str) -> &Requirement {
        self.0.get(key).unwrap_or(&EXISTS)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Requirement)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sets `key`'s `minValues` as given, lower or higher (Karpenter's BestEffort policy lowers
    /// a claim's to what its instance types offer); nothing for a key not required.
    pub fn set_min_values(&mut self, key: &str, min_values: usize) {
        if let Some(r) = self.0.get_mut(key) {
            r.min_values = Some(min_values);
        }
    }

    pub fn has_min_values(&self) -> bool {
        self.0.values().any(|r| r.min_values.is_some())
    }

    /// Shared keys intersect (`Intersects`); keys only one side defines are ignored.
    pub fn intersects(&self, incoming: &Requirements) -> Result<(), Conflict> {
        let (small, large, small_is_self) = if self.0.len() <= incoming.0.len() {
            (self, incoming, true)
        } else {
            (incoming, self, false)
        };
        for (key, a) in &small.0 {
            let Some(b) = large.0.get(key) else { continue };
            let (existing, incoming) = if small_is_self { (a, b) } else { (b, a) };
            let negatives = incoming.is_negative() && existing.is_negative();
            if !(existing.has_intersection(incoming) || negatives) {
                return Err(Conflict::Disjoint {
                    key: key.clone(),
                    incoming: Box::new(incoming.clone()),
                    existing: Box::new(existing.clone()),
                });
            }
        }
        Ok(())
    }

    /// Karpenter's `Compatible`: custom keys of `incoming` must be defined here (unless
    /// NotIn/DoesNotExist); with `allow_undefined_well_known`, well-known keys need not be.
    pub fn compatible(
        &self,
        incoming: &Requirements,
        allow_undefined_well_known: bool,
    ) -> Result<(), Conflict> {
        for (key, req) in &incoming.0 {
            if allow_undefined_well_known && labels::is_well_known(key) {
                continue;
            }
            if self.0.contains_key(key) || req.is_negative() {
                continue;
            }
            return Err(Conflict::Undefined { key: key.clone() });
        }
        self.intersects(incoming)
    }

    pub fn is_compatible(&self, incoming: &Requirements, allow_undefined_well_known: bool) -> bool {
        self.compatible(incoming, allow_undefined_well_known)
            .is_ok()
    }
}

impl fmt::Display for Requirements {
    /// `key In [a b], key2 Exists` sorted by key; the hostname placeholder is left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, r) in &self.0 {
            if k == labels::HOSTNAME {
                continue;
            }
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{k} {r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(op: Operator, values: &[&str]) -> Requirement {
        Requirement::new(op, values).unwrap()
    }

    #[test]
    fn operators_read_back() {
        assert_eq!(r(Operator::In, &["a"]).operator(), Operator::In);
        assert_eq!(r(Operator::NotIn, &["a"]).operator(), Operator::NotIn);
        assert_eq!(r(Operator::Exists, &[]).operator(), Operator::Exists);
        assert_eq!(
            r(Operator::DoesNotExist, &[]).operator(),
            Operator::DoesNotExist
        );
        // Bounds read as Exists, as upstream.
        assert_eq!(r(Operator::Gt, &["3"]).operator(), Operator::Exists);
        assert!(Requirement::new(Operator::Gt, &["x"]).is_err());
        assert!(Requirement::new(Operator::Lt, &["1", "2"]).is_err());
        assert!(Operator::parse("Equals").is_err());
    }

    #[test]
    fn intersection_table() {
        let a_b = r(Operator::In, &["a", "b"]);
        let b_c = r(Operator::In, &["b", "c"]);
        let not_b = r(Operator::NotIn, &["b"]);
        let not_c = r(Operator::NotIn, &["c"]);
        let exists = Requirement::exists();
        let dne = Requirement::does_not_exist();
        assert_eq!(a_b.intersection(&b_c), r(Operator::In, &["b"]));
        assert_eq!(a_b.intersection(&not_b), r(Operator::In, &["a"]));
        assert_eq!(not_b.intersection(&a_b), r(Operator::In, &["a"]));
        assert_eq!(not_b.intersection(&not_c), r(Operator::NotIn, &["b", "c"]));
        assert_eq!(a_b.intersection(&exists), a_b);
        assert_eq!(a_b.intersection(&dne), dne);
        assert!(!a_b.has_intersection(&dne));
        assert!(a_b.has_intersection(&b_c));
        assert!(!r(Operator::In, &["b"]).has_intersection(&not_b));
        assert!(not_b.has_intersection(&not_c));
    }

    #[test]
    fn bounds() {
        let gt2 = r(Operator::Gt, &["2"]);
        let lt5 = r(Operator::Lt, &["5"]);
        let both = gt2.intersection(&lt5);
        assert!(both.has("3") && both.has("4"));
        assert!(!both.has("2") && !both.has("5") && !both.has("x"));
        assert_eq!(both.to_string(), "Exists >=3 <=4");
        let concrete = r(Operator::In, &["1", "3", "8", "x"]).intersection(&both);
        assert_eq!(concrete, r(Operator::In, &["3"]));
        assert!(!gt2.has_intersection(&r(Operator::Lt, &["3"])));
        assert_eq!(
            gt2.intersection(&r(Operator::Lt, &["3"])),
            Requirement::does_not_exist()
        );
        assert!(gt2.has_intersection(&r(Operator::In, &["7"])));
        assert!(!gt2.has_intersection(&r(Operator::In, &["1", "abc"])));
        assert_eq!(
            r(Operator::Gt, &[&i64::MAX.to_string()]),
            Requirement::does_not_exist()
        );
    }

    #[test]
    fn matches_a_node_label() {
        assert!(r(Operator::In, &["a"]).matches(Some("a")));
        assert!(!r(Operator::In, &["a"]).matches(None));
        assert!(r(Operator::NotIn, &["a"]).matches(None));
        assert!(!r(Operator::NotIn, &["a"]).matches(Some("a")));
        assert!(r(Operator::DoesNotExist, &[]).matches(None));
        assert!(!r(Operator::DoesNotExist, &[]).matches(Some("a")));
        assert!(!r(Operator::Exists, &[]).matches(None));
        assert!(r(Operator::Gte, &["2"]).matches(Some("2")));
        assert!(!r(Operator::Gt, &["2"]).matches(Some("2")));
        assert!(!r(Operator::Lt, &["2"]).matches(None));
        assert!(r(Operator::Lte, &["2"]).matches(Some("-1")));
    }

    #[test]
    fn compatibility_rules() {
        let mut node = Requirements::new();
        node.add(labels::ZONE, r(Operator::In, &["z1", "z2"]));
        node.add("team", r(Operator::In, &["a"]));

        let mut pod = Requirements::new();
        pod.add(labels::ZONE, r(Operator::In, &["z2"]));
        assert!(node.compatible(&pod, true).is_ok());

        // Well-known keys may be undefined on the node side; custom keys may not.
        let mut pod = Requirements::new();
        pod.add(labels::CAPACITY_TYPE, r(Operator::In, &["spot"]));
        assert!(node.compatible(&pod, true).is_ok());
        assert!(node.compatible(&pod, false).is_err());
        let mut pod = Requirements::new();
        pod.add("gpu", r(Operator::In, &["yes"]));
        assert_eq!(
            node.compatible(&pod, true).unwrap_err().to_string(),
            "label \"gpu\" does not have known values"
        );
        // ...unless the pod only excludes values.
        let mut pod = Requirements::new();
        pod.add("gpu", r(Operator::NotIn, &["yes"]));
        assert!(node.compatible(&pod, true).is_ok());

        // Disjoint values.
        let mut pod = Requirements::new();
        pod.add("team", r(Operator::In, &["b"]));
        assert_eq!(
            node.compatible(&pod, true).unwrap_err().to_string(),
            "team In [b] not in In [a]"
        );

        // Two negative requirements never conflict: an unlabelled node satisfies both.
        let mut a = Requirements::new();
        a.add("k", Requirement::does_not_exist());
        let mut b = Requirements::new();
        b.add("k", r(Operator::NotIn, &["x"]));
        assert!(a.intersects(&b).is_ok());
    }

    #[test]
    fn keys_are_normalized_and_added_by_intersection() {
        let mut reqs = Requirements::new();
        reqs.add(
            "failure-domain.beta.kubernetes.io/zone",
            r(Operator::In, &["z1", "z2"]),
        );
        reqs.add(labels::ZONE, r(Operator::NotIn, &["z1"]));
        assert_eq!(reqs.get(labels::ZONE), r(Operator::In, &["z2"]));
        assert_eq!(reqs.get("absent"), Requirement::exists());
        assert_eq!(reqs.to_string(), "topology.kubernetes.io/zone In [z2]");
    }

    #[test]
    fn min_values_survive_intersection() {
        let a = r(Operator::In, &["a", "b", "c"]).with_min_values(Some(2));
        let b = r(Operator::In, &["a", "b"]);
        assert_eq!(a.intersection(&b).min_values, Some(2));
    }
}
