//! Kubernetes resource quantities (`500m`, `1000Gi`, `1.5`, `2e3`).
//!
//! Held as milli-units in an i128 so that comparisons and sums are exact for every
//! value the resources we deal with can take (cpu, memory, pods, nvidia.com/gpu).

use std::fmt;

/// A quantity in thousandths of its base unit (cores, bytes, devices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity {
    pub milli: i128,
}

/// Why a quantity string is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a Kubernetes quantity (examples: 500m, 4, 16Gi, 1.5)")]
pub struct QuantityError {
    /// The text as given.
    pub text: String,
}

impl Quantity {
    pub fn from_units(units: i128) -> Self {
        Self {
            milli: units * 1000,
        }
    }

    pub fn is_negative(&self) -> bool {
        self.milli < 0
    }

    /// Whole units, rounded up (a request of 1.2 cores needs 2 to be safe).
    pub fn ceil_units(&self) -> i128 {
        (self.milli + 999).div_euclid(1000)
    }

    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let err = || QuantityError {
            text: text.to_owned(),
        };
        let text_trim = text.trim();
        if text_trim.is_empty() || text_trim != text {
            return Err(err());
        }
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
            .unwrap_or(text.len());
        let (number, suffix) = text.split_at(split);
        let (negative, digits) = match number.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, number.strip_prefix('+').unwrap_or(number)),
        };
        if digits.is_empty() || digits.contains(['+', '-']) || digits.matches('.').count() > 1 {
            return Err(err());
        }
        let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if whole.is_empty() && frac.is_empty() {
            return Err(err());
        }
        // Scale = value × 10^exp10 × 2^exp2, computed in milli-units.
        let (exp10, exp2): (i32, u32) = match suffix {
            "" => (0, 0),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            "Ki" => (0, 10),
            "Mi" => (0, 20),
            "Gi" => (0, 30),
            "Ti" => (0, 40),
            "Pi" => (0, 50),
            "Ei" => (0, 60),
            s if s.starts_with(['e', 'E']) => {
                let exp: i32 = s[1..].parse().map_err(|_| err())?;
                if !(-30..=30).contains(&exp) {
                    return Err(err());
                }
                (exp, 0)
            }
            _ => return Err(err()),
        };
        let mantissa_digits = format!("{whole}{frac}");
        let mantissa: i128 = if mantissa_digits.is_empty() {
            0
        } else {
            mantissa_digits.parse().map_err(|_| err())?
        };
        // value = mantissa × 10^(exp10 - frac.len()) × 2^exp2; milli adds 3 to the exponent.
        let mut milli = mantissa.checked_mul(1i128 << exp2).ok_or_else(err)?;
        let shift = exp10 + 3 - frac.len() as i32;
        if shift >= 0 {
            milli = milli
                .checked_mul(10i128.checked_pow(shift as u32).ok_or_else(err)?)
                .ok_or_else(err)?;
        } else {
            let divisor = 10i128.checked_pow((-shift) as u32).ok_or_else(err)?;
            // Kubernetes rounds sub-milli fractions up.
            milli = (milli + divisor - 1) / divisor;
        }
        Ok(Self {
            milli: if negative { -milli } else { milli },
        })
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.milli % 1000 == 0 {
            write!(f, "{}", self.milli / 1000)
        } else {
            write!(f, "{}m", self.milli)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> i128 {
        Quantity::parse(text).unwrap().milli
    }

    #[test]
    fn parses_the_usual_forms() {
        assert_eq!(q("500m"), 500);
        assert_eq!(q("2"), 2000);
        assert_eq!(q("1.5"), 1500);
        assert_eq!(q("1Ki"), 1024 * 1000);
        assert_eq!(q("1000Gi"), 1000 * (1i128 << 30) * 1000);
        assert_eq!(q("2k"), 2_000_000);
        assert_eq!(q("1e3"), 1_000_000);
        assert_eq!(q("-1"), -1000);
        assert_eq!(q("100Mi"), 100 * (1 << 20) * 1000);
        assert_eq!(q(".5"), 500);
    }

    #[test]
    fn refuses_garbage() {
        for bad in ["", "abc", "1.2.3", "1Qi", " 1", "1 ", "--1", "1e99", "."] {
            assert!(Quantity::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn orders_across_suffixes() {
        assert!(Quantity::parse("1Gi").unwrap() > Quantity::parse("1G").unwrap());
        assert!(Quantity::parse("999m").unwrap() < Quantity::parse("1").unwrap());
    }
}
