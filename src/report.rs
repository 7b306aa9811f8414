//! The vocabulary the core's reports share: the offering a launch would pick ([`Launch`]),
//! a requirement as reported ([`RequirementReport`]), price rounding, and the plain-text
//! table layout. The plan report ([`crate::plan::report`]) and the disruption report
//! ([`crate::disruption::report`]) both print through it, so neither imports the other's
//! pieces.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequirementReport {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<i64>,
}

/// The offering a launch would pick: the cheapest one the NodeClaim's requirements allow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Launch {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    /// US dollars per hour.
    pub price: f64,
}

/// Prices are quoted to six decimals; rounding the sum keeps float noise
/// (0.057800000000000004) out of the report.
pub fn round_price(price: f64) -> f64 {
    (price * 1e6).round() / 1e6
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub fn table(headers: &[&str], rows: impl Iterator<Item = Vec<String>>) -> String {
    let rows: Vec<Vec<String>> = std::iter::once(headers.iter().map(|h| h.to_string()).collect())
        .chain(rows)
        .collect();
    let widths: Vec<usize> = (0..headers.len())
        .map(|column| {
            rows.iter()
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &rows {
        let last = row.len() - 1;
        for (column, cell) in row.iter().enumerate() {
            if column == last {
                out.push_str(cell);
            } else {
                let _ = write!(out, "{cell:<width$}  ", width = widths[column]);
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    }
    out
}
