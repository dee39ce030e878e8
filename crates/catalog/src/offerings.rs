//! Offerings: zones × capacity types, with prices.
//!
//! - on-demand: the type's on-demand price (us-east-1 Linux, from Karpenter's static table);
//! - spot: `spot_fraction` × on-demand when set; otherwise the data's own spot price where it
//!   has one (KWOK types), else [`DEFAULT_SPOT_FRACTION`] × on-demand (the EC2 table has no spot
//!   prices: Karpenter reads them live);
//! - a [`PriceTable`] (CSV `instance_type,zone,capacity_type,price`) overrides any of these,
//!   per offering, and can price types the table has no on-demand price for.
//!
//! Without a price an offering is left out, as Karpenter's AWS provider leaves out offerings
//! its pricing provider cannot price; a type with no offering cannot be launched.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::types::{CapacityType, InstanceType, Offering};

/// Spot price as a fraction of on-demand when the data has no spot price.
pub const DEFAULT_SPOT_FRACTION: f64 = 0.4;

/// Zones of the EC2 catalog when the caller names none.
pub const DEFAULT_AWS_ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

/// How to build offerings. `Default` = the catalog's default zones, both capacity types,
/// the default spot model, no price file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OfferingConfig {
    /// Zones, in order; empty = the catalog's defaults (us-east-1a/b/c; KWOK: test-zone-a..d).
    pub zones: Vec<String>,
    /// Capacity types, in order; empty = on-demand and spot.
    pub capacity_types: Vec<CapacityType>,
    /// Spot price = this × on-demand, for every type. `None`: the data's spot price, else 0.4.
    pub spot_fraction: Option<f64>,
    /// Explicit prices; they win over the model above.
    pub prices: PriceTable,
}

/// Why offerings cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PriceError {
    #[error("line {line}: {message}")]
    Csv { line: usize, message: String },
    #[error("spot fraction {0} must be a positive finite number")]
    SpotFraction(f64),
    #[error("price for {instance_type}: unknown instance type")]
    UnknownType { instance_type: String },
    #[error(
        "price for {instance_type} in zone {zone}: the zone is not one of the offering zones ({zones})"
    )]
    UnknownZone {
        instance_type: String,
        zone: String,
        zones: String,
    },
    #[error("price for {instance_type} {capacity_type}: that capacity type is not offered")]
    UnofferedCapacityType {
        instance_type: String,
        capacity_type: CapacityType,
    },
}

/// Prices per (instance type, zone, capacity type), in US dollars per hour.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PriceTable {
    /// type → zone → [on-demand, spot].
    prices: BTreeMap<String, BTreeMap<String, [Option<f64>; 2]>>,
    len: usize,
}

/// The table's column for a publicly priced capacity type; reserved offerings are priced from
/// on-demand ([`crate::Catalog::add_reservation`]), never from the table.
fn slot(capacity_type: CapacityType) -> Option<usize> {
    match capacity_type {
        CapacityType::OnDemand => Some(0),
        CapacityType::Spot => Some(1),
        CapacityType::Reserved => None,
    }
}

impl PriceTable {
    /// Parses `instance_type,zone,capacity_type,price` lines. A first line equal to that header
    /// is skipped, as are blank lines and lines starting with `#`. A repeated key is an error.
    pub fn parse_csv(text: &str) -> Result<PriceTable, PriceError> {
        let mut table = PriceTable::default();
        for (i, raw_line) in text.lines().enumerate() {
            let line = i + 1;
            let trimmed = raw_line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let err = |message: String| PriceError::Csv { line, message };
            let fields: Vec<&str> = trimmed.split(',').map(str::trim).collect();
            if table.is_empty() && fields == ["instance_type", "zone", "capacity_type", "price"] {
                continue;
            }
            let [instance_type, zone, capacity_type, price] = fields.as_slice() else {
                return Err(err(format!(
                    "expected 4 fields instance_type,zone,capacity_type,price, found {}",
                    fields.len()
                )));
            };
            if instance_type.is_empty() || zone.is_empty() {
                return Err(err("instance_type and zone must not be empty".into()));
            }
            let capacity_type: CapacityType = capacity_type
                .parse()
                .map_err(|e: crate::types::UnknownValue| err(e.to_string()))?;
            if capacity_type == CapacityType::Reserved {
                return Err(err(
                    "reserved offerings are priced as Karpenter prices them (on-demand ÷ 10⁷), not from a price table".into(),
                ));
            }
            let price: f64 = price
                .parse()
                .ok()
                .filter(|p: &f64| p.is_finite() && *p >= 0.0)
                .ok_or_else(|| err(format!("price {price:?} is not a non-negative number")))?;
            if table
                .insert(instance_type, zone, capacity_type, price)
                .is_some()
            {
                return Err(err(format!(
                    "{instance_type} {zone} {capacity_type} is priced twice"
                )));
            }
        }
        Ok(table)
    }

    /// Sets a price; returns the one it replaces. A `reserved` price is not kept: reserved
    /// offerings are priced from on-demand.
    pub fn insert(
        &mut self,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
        price: f64,
    ) -> Option<f64> {
        let slot = slot(capacity_type)?;
        let old = self
            .prices
            .entry(instance_type.to_owned())
            .or_default()
            .entry(zone.to_owned())
            .or_default()[slot]
            .replace(price);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    pub fn get(&self, instance_type: &str, zone: &str, capacity_type: CapacityType) -> Option<f64> {
        self.prices.get(instance_type)?.get(zone)?[slot(capacity_type)?]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every price, by type, zone, then on-demand before spot.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, CapacityType, f64)> {
        self.prices.iter().flat_map(|(t, zones)| {
            zones.iter().flat_map(move |(z, prices)| {
                CapacityType::ALL
                    .into_iter()
                    .filter_map(move |c| prices[slot(c)?].map(|p| (t.as_str(), z.as_str(), c, p)))
            })
        })
    }
}

/// Checks `config` against the types and default zones; returns the zones and capacity
/// types to use.
pub(crate) fn resolve(
    config: &OfferingConfig,
    default_zones: &[&str],
    has_type: impl Fn(&str) -> bool,
) -> Result<(Vec<String>, Vec<CapacityType>), PriceError> {
    if let Some(f) = config.spot_fraction
        && !(f.is_finite() && f > 0.0)
    {
        return Err(PriceError::SpotFraction(f));
    }
    let mut zones: Vec<String> = Vec::new();
    let wanted: Vec<String> = if config.zones.is_empty() {
        default_zones.iter().map(|z| (*z).to_owned()).collect()
    } else {
        config.zones.clone()
    };
    for z in wanted {
        if !zones.contains(&z) {
            zones.push(z);
        }
    }
    let mut capacity_types: Vec<CapacityType> = Vec::new();
    let wanted = if config.capacity_types.is_empty() {
        CapacityType::ALL.to_vec()
    } else {
        config.capacity_types.clone()
    };
    for c in wanted {
        if !capacity_types.contains(&c) {
            capacity_types.push(c);
        }
    }
    for (t, z, c, _) in config.prices.iter() {
        if !has_type(t) {
            return Err(PriceError::UnknownType {
                instance_type: t.to_owned(),
            });
        }
        if !zones.iter().any(|zone| zone == z) {
            return Err(PriceError::UnknownZone {
                instance_type: t.to_owned(),
                zone: z.to_owned(),
                zones: zones.join(", "),
            });
        }
        if !capacity_types.contains(&c) {
            return Err(PriceError::UnofferedCapacityType {
                instance_type: t.to_owned(),
                capacity_type: c,
            });
        }
    }
    Ok((zones, capacity_types))
}

/// The offerings of one type.
pub(crate) fn offerings_for(
    it: &InstanceType,
    config: &OfferingConfig,
    zones: &[Arc<str>],
    capacity_types: &[CapacityType],
) -> Vec<Offering> {
    let modelled = |c: CapacityType| match c {
        CapacityType::OnDemand => it.on_demand_price,
        CapacityType::Reserved => None,
        CapacityType::Spot => match (config.spot_fraction, it.spot_price) {
            (Some(f), _) => it.on_demand_price.map(|od| od * f),
            (None, Some(spot)) => Some(spot),
            (None, None) => it.on_demand_price.map(|od| od * DEFAULT_SPOT_FRACTION),
        },
    };
    let mut out = Vec::with_capacity(zones.len() * capacity_types.len());
    for zone in zones {
        for &c in capacity_types {
            let price = if config.prices.is_empty() {
                modelled(c)
            } else {
                config.prices.get(&it.name, zone, c).or_else(|| modelled(c))
            };
            if let Some(price) = price {
                out.push(Offering {
                    zone: zone.clone(),
                    capacity_type: c,
                    price,
                    available: true,
                    reservation: None,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_parsing() {
        let t = PriceTable::parse_csv(
            "instance_type,zone,capacity_type,price\n\
             # comment\n\
             m6i.large,us-east-1a,spot,0.031\n\
             \n\
             m6i.large, us-east-1b ,on-demand,0.1\n",
        )
        .unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            t.get("m6i.large", "us-east-1a", CapacityType::Spot),
            Some(0.031)
        );
        assert_eq!(
            t.get("m6i.large", "us-east-1b", CapacityType::OnDemand),
            Some(0.1)
        );
        let e = PriceTable::parse_csv("m6i.large,us-east-1a,reserved,1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 1: reserved offerings are priced as Karpenter prices them (on-demand ÷ 10⁷), not from a price table"
        );
        let e = PriceTable::parse_csv("m6i.large,us-east-1a,dedicated,1").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("line 1: unknown capacity type \"dedicated\""),
            "{e}"
        );
        let e = PriceTable::parse_csv("a,b,spot,1\na,b,spot,2").unwrap_err();
        assert!(e.to_string().starts_with("line 2: "), "{e}");
        assert!(PriceTable::parse_csv("a,b,spot,-1").is_err());
        assert!(PriceTable::parse_csv("a,b,spot").is_err());
        assert!(PriceTable::parse_csv("a,b,spot,NaN").is_err());
    }
}
