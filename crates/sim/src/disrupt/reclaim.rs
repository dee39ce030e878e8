//! `plan --disrupt --reclaim SELECTOR`: capacity AWS takes back (a spot reclaim, a zone lost)
//! and cannot give again for a while.
//!
//! Karpenter's interruption controller deletes the NodeClaim of an interrupted instance and
//! marks that instance's offering (type × zone × capacity type) unavailable in its
//! unavailable-offerings cache for 3 minutes, so the replacement is launched elsewhere. The
//! selector names the capacity that is gone: every node on it is removed at once (forcefully,
//! like expiration: AWS does not wait for budgets or PDBs), every catalog offering it matches
//! is unavailable, and the displaced pods are provisioned again with plan's scheduler.
//!
//! Grammar: comma-separated terms, all of which must match —
//! `spot`, `on-demand` or `reserved` (the capacity type), optionally `:<instance-type>`
//! (`spot:g6.xlarge`); `type:<instance-type>`; `zone:<zone>`.

use std::fmt;

use kk_catalog::CapacityType;

/// The capacity a reclaim takes away.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    pub capacity_type: Option<String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    text: String,
}

const CAPACITY_TYPES: [&str; 3] = ["spot", "on-demand", "reserved"];

impl Selector {
    /// Parses `SELECTOR`; the error names the term that is wrong and what would be right.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let mut s = Selector {
            text: text.to_owned(),
            ..Selector::default()
        };
        if text.trim().is_empty() {
            return Err("empty selector; say what is reclaimed, e.g. spot, spot:g6.xlarge or zone:us-east-1a".into());
        }
        for term in text.split(',').map(str::trim) {
            let (head, value) = match term.split_once(':') {
                Some((h, v)) => (h, Some(v)),
                None => (term, None),
            };
            let slot = match head {
                "type" => &mut s.instance_type,
                "zone" => &mut s.zone,
                c if CAPACITY_TYPES.contains(&c) => {
                    set_once(&mut s.capacity_type, c, term)?;
                    &mut s.instance_type
                }
                _ => {
                    return Err(format!(
                        "{term:?}: expected spot, on-demand or reserved (optionally :<instance-type>), type:<instance-type> or zone:<zone>"
                    ));
                }
            };
            match value {
                Some("") => return Err(format!("{term:?}: the value after ':' is empty")),
                Some(v) => set_once(slot, v, term)?,
                None if matches!(head, "type" | "zone") => {
                    return Err(format!("{term:?}: say which, e.g. {head}:<value>"));
                }
                None => {}
            }
        }
        Ok(s)
    }

    /// The catalog's offerings this selector makes unavailable: (type, zone, capacity type).
    pub fn offerings(&self, catalog: &kk_catalog::Catalog) -> Vec<(String, String, CapacityType)> {
        let mut out = Vec::new();
        for t in catalog.types() {
            for o in &t.offerings {
                if self.matches(&t.name, &o.zone, o.capacity_type.as_str()) {
                    out.push((t.name.clone(), o.zone.to_string(), o.capacity_type));
                }
            }
        }
        out
    }

    /// Whether an instance (or an offering) of this type, zone and capacity type is reclaimed.
    pub fn matches(&self, instance_type: &str, zone: &str, capacity_type: &str) -> bool {
        let is = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        is(&self.instance_type, instance_type)
            && is(&self.zone, zone)
            && is(&self.capacity_type, capacity_type)
    }
}

fn set_once(slot: &mut Option<String>, value: &str, term: &str) -> Result<(), String> {
    match slot {
        Some(old) if old != value => Err(format!(
            "{term:?}: conflicts with {old:?} named earlier; one selector names one of each"
        )),
        _ => {
            *slot = Some(value.to_owned());
            Ok(())
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::Selector;

    #[test]
    fn terms_combine_and_match() {
        let s = Selector::parse("spot:g6.xlarge").unwrap();
        assert!(s.matches("g6.xlarge", "us-east-1a", "spot"));
        assert!(!s.matches("g6.xlarge", "us-east-1a", "on-demand"));
        assert!(!s.matches("g6.2xlarge", "us-east-1a", "spot"));
        let z = Selector::parse("zone:us-east-1a, on-demand").unwrap();
        assert!(z.matches("m7i.large", "us-east-1a", "on-demand"));
        assert!(!z.matches("m7i.large", "us-east-1b", "on-demand"));
        let any_spot = Selector::parse("spot").unwrap();
        assert!(any_spot.matches("c7i.large", "us-east-1c", "spot"));
        assert_eq!(any_spot.to_string(), "spot");
    }

    #[test]
    fn bad_selectors_say_which_term() {
        for (bad, says) in [
            ("", "empty selector"),
            ("spots", "\"spots\": expected spot"),
            ("zone", "\"zone\": say which"),
            ("type:", "the value after ':' is empty"),
            ("spot,on-demand", "conflicts with \"spot\""),
            (
                "spot:g6.xlarge,type:g5.xlarge",
                "conflicts with \"g6.xlarge\"",
            ),
        ] {
            let e = Selector::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
