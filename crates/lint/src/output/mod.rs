//! Printing a [`Report`]: `human` (code frames), `json` (stable, for scripts) and `sarif`
//! (SARIF 2.1.0, for GitHub code scanning). All three are deterministic for equal input.

pub mod human;
pub mod json;
pub mod sarif;

use std::str::FromStr;

use crate::diagnostic::Report;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Human,
    Json,
    Sarif,
}

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "human" => Ok(Format::Human),
            "json" => Ok(Format::Json),
            "sarif" => Ok(Format::Sarif),
            other => Err(format!(
                "unknown format {other:?} (expected human, json or sarif)"
            )),
        }
    }
}

/// The whole output for `report`, ending with a newline.
pub fn render(report: &Report, format: Format) -> String {
    match format {
        Format::Human => human::render(report),
        Format::Json => json::render(report),
        Format::Sarif => sarif::render(report),
    }
}
