//! Reproduces `resource.MustParse(fmt.Sprint(x))` for a float64 `x`, which Karpenter uses for
//! computed thresholds: Go prints the shortest decimal that round-trips (`%v` = `%g` with
//! shortest precision) and switches to exponent notation when the decimal exponent is below
//! -4 or at least 6 (`2147483648` prints `2.147483648e+09`), which then parses as a
//! `DecimalExponent` quantity. Rust's `{:e}` produces the same shortest digits, so the value
//! is exact and the format matches. [`Quantity::percentage`], Karpenter's percentage
//! threshold, is computed here through it.

use super::parse::QuantityError;
use super::quantity::{Format, Quantity};

/// The quantity Go's `resource.MustParse(fmt.Sprint(value))` yields; `None` for NaN and ±Inf
/// (which Go would fail to parse) or values beyond the quantity range.
pub fn quantity_from_go_float(value: f64) -> Option<Quantity> {
    if !value.is_finite() {
        return None;
    }
    if value == 0.0 {
        return Some(Quantity::ZERO);
    }
    let shortest = format!("{value:e}");
    let exponent: i32 = shortest
        .rsplit_once('e')
        .and_then(|(_, e)| e.parse().ok())?;
    let parsed: Result<Quantity, QuantityError> = shortest.parse();
    let quantity = parsed.ok()?;
    let go_uses_exponent = !(-4..6).contains(&exponent);
    Some(quantity.with_format(if go_uses_exponent {
        Format::DecimalExponent
    } else {
        Format::DecimalSI
    }))
}

impl Quantity {
    /// `ceil(self / 100 × percent)` computed in `f64` exactly as Karpenter computes percentage
    /// eviction thresholds (`math.Ceil(q.AsApproximateFloat64() / 100 * p)`), and printed as
    /// Go's `resource.MustParse(fmt.Sprint(x))` would print it.
    pub fn percentage(self, percent: f64) -> Quantity {
        let value = (self.as_approximate_f64() / 100.0 * percent).ceil();
        quantity_from_go_float(value).unwrap_or(Quantity::ZERO)
    }
}
