//! Parsing quantity text the way apimachinery's `ParseQuantity` does: the same accepted
//! grammar (including its lenient corners such as `1.`, `.5` and `+1`), the same rounding of
//! anything finer than `1n` up to the next nano-unit (away from zero), the same cap of binary
//! values at 2^63-1 units, and the same formats remembered from the suffix.
//!
//! Where apimachinery falls back to arbitrary precision, kerf keeps an `i128` of nano-units:
//! magnitudes beyond ~1.7e29 units (and exponents beyond `i32`) are rejected with
//! [`QuantityError::OutOfRange`] instead of being carried as big decimals.

use super::quantity::{Format, NANOS_PER_UNIT, Quantity};
use std::str::FromStr;

/// Why a quantity string was rejected. Each variant carries the offending text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("quantity is empty")]
    Empty,
    #[error(
        "quantity {0:?} is malformed: quantities must match '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Malformed(String),
    #[error(
        "quantity {0:?} has an unknown suffix (expected one of n u m k M G T P E Ki Mi Gi Ti Pi Ei or e<exponent>)"
    )]
    Suffix(String),
    #[error("quantity {0:?} is out of the supported range (about ±1.7e29 units)")]
    OutOfRange(String),
}

/// The characters apimachinery's scanner accepts in a suffix before an optional signed
/// exponent.
const SUFFIX_LETTERS: &[u8] = b"eEinumkKMGTP";

/// A quantity split into sign, digits and suffix, as apimachinery's `parseQuantityString`.
struct Parts<'a> {
    positive: bool,
    /// Integer digits with leading zeros stripped (may be empty for zero).
    whole: &'a [u8],
    /// Fractional digits, as written.
    fraction: &'a [u8],
    suffix: &'a str,
}

/// What a suffix means: value = digits × 10^decimal × 2^binary.
struct Scale {
    decimal: i64,
    binary: u32,
    format: Format,
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(text: &str) -> Result<Quantity, QuantityError> {
        parse(text)
    }
}

impl Quantity {
    /// Parses Kubernetes quantity text (`"100m"`, `"1.5Gi"`, `"1e3"`, …).
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        parse(text)
    }
}

fn parse(text: &str) -> Result<Quantity, QuantityError> {
    if text.is_empty() {
        return Err(QuantityError::Empty);
    }
    let parts = split(text).ok_or_else(|| QuantityError::Malformed(text.to_owned()))?;
    let scale = interpret_suffix(parts.suffix, text)?;
    let mut digits: Vec<u8> = parts
        .whole
        .iter()
        .chain(parts.fraction)
        .map(|d| d - b'0')
        .collect();
    if digits.iter().all(|&d| d == 0) {
        return Ok(Quantity::from_nanos(0, scale.format));
    }
    if scale.binary > 0 {
        multiply_digits(&mut digits, 1u64 << scale.binary);
    }
    let shift = scale.decimal - parts.fraction.len() as i64 + 9;
    let magnitude = nanos_from_digits(&digits, shift)
        .ok_or_else(|| QuantityError::OutOfRange(text.to_owned()))?;
    let (magnitude, format) = apply_binary_rules(magnitude, scale.format);
    Ok(Quantity::from_nanos(
        if parts.positive {
            magnitude
        } else {
            -magnitude
        },
        format,
    ))
}

/// apimachinery caps binary quantities at 2^63-1 units and prints binary values below one
/// unit in decimal form.
fn apply_binary_rules(magnitude: i128, format: Format) -> (i128, Format) {
    if format != Format::BinarySI {
        return (magnitude, format);
    }
    let max = i64::MAX as i128 * NANOS_PER_UNIT;
    if magnitude > max {
        (max, format)
    } else if magnitude < NANOS_PER_UNIT {
        (magnitude, Format::DecimalSI)
    } else {
        (magnitude, format)
    }
}

/// The scanner of apimachinery's `parseQuantityString`, with its exact leniency.
fn split(text: &str) -> Option<Parts<'_>> {
    let bytes = text.as_bytes();
    let mut pos = 0;
    let mut positive = true;
    match bytes.first() {
        Some(b'-') => {
            positive = false;
            pos = 1;
        }
        Some(b'+') => pos = 1,
        _ => {}
    }
    while pos < bytes.len() && bytes[pos] == b'0' {
        pos += 1;
    }
    let whole_start = pos;
    pos = skip_digits(bytes, pos);
    let whole = &bytes[whole_start..pos];
    let mut fraction: &[u8] = &[];
    if pos < bytes.len() && bytes[pos] == b'.' {
        let start = pos + 1;
        pos = skip_digits(bytes, start);
        fraction = &bytes[start..pos];
    }
    let suffix_start = pos;
    while pos < bytes.len() && SUFFIX_LETTERS.contains(&bytes[pos]) {
        pos += 1;
    }
    if pos < bytes.len() && matches!(bytes[pos], b'+' | b'-') {
        pos += 1;
    }
    pos = skip_digits(bytes, pos);
    if pos != bytes.len() {
        return None;
    }
    Some(Parts {
        positive,
        whole,
        fraction,
        suffix: &text[suffix_start..],
    })
}

fn skip_digits(bytes: &[u8], mut pos: usize) -> usize {
    while pos < bytes.len() && bytes[pos].is_ascii_digit() {
        pos += 1;
    }
    pos
}

fn interpret_suffix(suffix: &str, text: &str) -> Result<Scale, QuantityError> {
    let decimal = |decimal| {
        Ok(Scale {
            decimal,
            binary: 0,
            format: Format::DecimalSI,
        })
    };
    let binary = |binary| {
        Ok(Scale {
            decimal: 0,
            binary,
            format: Format::BinarySI,
        })
    };
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ => decimal_exponent(suffix, text),
    }
}

fn decimal_exponent(suffix: &str, text: &str) -> Result<Scale, QuantityError> {
    let exponent = match suffix.as_bytes() {
        [b'e' | b'E', _, ..] => &suffix[1..],
        _ => return Err(QuantityError::Suffix(text.to_owned())),
    };
    let exponent: i64 = exponent
        .parse()
        .map_err(|_| QuantityError::Suffix(text.to_owned()))?;
    if i32::try_from(exponent).is_err() {
        return Err(QuantityError::OutOfRange(text.to_owned()));
    }
    Ok(Scale {
        decimal: exponent,
        binary: 0,
        format: Format::DecimalExponent,
    })
}

/// Multiplies a big-endian decimal digit string by `factor` in place.
fn multiply_digits(digits: &mut Vec<u8>, factor: u64) {
    let mut carry: u128 = 0;
    for digit in digits.iter_mut().rev() {
        let product = *digit as u128 * factor as u128 + carry;
        *digit = (product % 10) as u8;
        carry = product / 10;
    }
    while carry > 0 {
        digits.insert(0, (carry % 10) as u8);
        carry /= 10;
    }
}

/// `digits × 10^shift` rounded up (in magnitude) to a whole number, or `None` past `i128`.
fn nanos_from_digits(digits: &[u8], shift: i64) -> Option<i128> {
    let kept = if shift >= 0 {
        digits.len()
    } else {
        usize::try_from(digits.len() as i64 + shift).unwrap_or(0)
    };
    let mut value: i128 = 0;
    for &digit in &digits[..kept] {
        value = value.checked_mul(10)?.checked_add(digit as i128)?;
    }
    if shift > 0 {
        let power = 10i128.checked_pow(u32::try_from(shift).ok()?)?;
        value = value.checked_mul(power)?;
    }
    if digits[kept..].iter().any(|&d| d != 0) {
        value = value.checked_add(1)?;
    }
    Some(value)
}
