//! Printing quantities in apimachinery's canonical form (`Quantity.String`,
//! `CanonicalizeBytes`): no fractional digits, the largest suffix that loses no precision,
//! binary values printed in binary only when they are whole and at least 1024 (`1.5Gi` →
//! `1536Mi`, `512Mi`… but `0.5Ki` → `512`), decimal values with the largest exponent that is a
//! multiple of three (`1000m` → `1`, `0.5` → `500m`, `1e3` stays `1e3`).
//!
//! Two deliberate differences from apimachinery, both on inputs it mishandles: it echoes some
//! non-canonical spellings verbatim when it deems them canonical (`+1`, `01`, `1.`,
//! `1.500k`), which kerf prints canonically (`1`, `1`, `1`, `1500`); and it prints decimal
//! values of 1000E and more without any suffix (`1000E` → `1`), which kerf prints with the
//! `E` suffix (`1000E`).

use super::quantity::{Format, NANOS_PER_UNIT, Quantity};
use std::fmt;

const DECIMAL_SUFFIXES: [&str; 10] = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];
const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
const LARGEST_DECIMAL_EXPONENT: i32 = 18;

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.nanos();
        if nanos == 0 {
            return f.write_str("0");
        }
        let sign = if nanos < 0 { "-" } else { "" };
        let magnitude = nanos.unsigned_abs();
        if let Some((units, suffix)) = binary_form(self.format(), magnitude) {
            return write!(f, "{sign}{units}{suffix}");
        }
        let (mantissa, exponent) = decimal_form(magnitude, self.format());
        match self.format() {
            Format::DecimalExponent if exponent != 0 => write!(f, "{sign}{mantissa}e{exponent}"),
            Format::DecimalExponent => write!(f, "{sign}{mantissa}"),
            _ => write!(
                f,
                "{sign}{mantissa}{}",
                DECIMAL_SUFFIXES[((exponent + 9) / 3) as usize]
            ),
        }
    }
}

/// The base-1024 form, when the format is binary and the value is a whole number of at least
/// 1024 units; otherwise apimachinery prints the value in decimal.
fn binary_form(format: Format, magnitude: u128) -> Option<(u128, &'static str)> {
    let per_unit = NANOS_PER_UNIT as u128;
    if format != Format::BinarySI
        || magnitude < 1024 * per_unit
        || !magnitude.is_multiple_of(per_unit)
    {
        return None;
    }
    let mut units = magnitude / per_unit;
    let mut power = 0;
    while power + 1 < BINARY_SUFFIXES.len() && units.is_multiple_of(1024) {
        units /= 1024;
        power += 1;
    }
    Some((units, BINARY_SUFFIXES[power]))
}

/// `magnitude` nano-units as `mantissa × 10^exponent`, the exponent a multiple of three and
/// as large as possible without fractional digits (capped at `E` for decimal SI).
fn decimal_form(magnitude: u128, format: Format) -> (u128, i32) {
    let mut mantissa = magnitude;
    let mut exponent: i32 = -9;
    while mantissa.is_multiple_of(10) {
        mantissa /= 10;
        exponent += 1;
    }
    while exponent.rem_euclid(3) != 0 {
        mantissa *= 10;
        exponent -= 1;
    }
    if format != Format::DecimalExponent {
        while exponent > LARGEST_DECIMAL_EXPONENT {
            mantissa *= 1000;
            exponent -= 3;
        }
    }
    (mantissa, exponent)
}
