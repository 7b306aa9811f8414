//! The `Quantity` value type: an exact count of nano-units plus the presentation format
//! apimachinery remembers from the text it was parsed from. Arithmetic and comparison are
//! integer-only (`i128` nano-units), so the scheduler's fits checks never touch floats.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

/// Nano-units per unit: apimachinery never keeps more precision than `1n`.
pub(crate) const NANOS_PER_UNIT: i128 = 1_000_000_000;

/// How a quantity prints, remembered from its suffix like apimachinery's `Format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Format {
    /// `n u m "" k M G T P E` (powers of 1000), e.g. `100m`, `5G`.
    #[default]
    DecimalSI,
    /// `Ki Mi Gi Ti Pi Ei` (powers of 1024), e.g. `1536Mi`.
    BinarySI,
    /// `e<exponent>`, e.g. `1e3`, `12e6`.
    DecimalExponent,
}

/// A Kubernetes resource quantity (`resource.Quantity`), exact to the nano-unit.
///
/// Equality, ordering and hashing look at the value only: `1Gi == 1073741824`, as with
/// apimachinery's `Cmp`. The format only decides how the value prints. Values range over
/// ±1.7e29 units; arithmetic saturates at those bounds instead of overflowing.
#[derive(Clone, Copy, Default)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

impl Quantity {
    /// Zero, printed as `0`.
    pub const ZERO: Quantity = Quantity {
        nanos: 0,
        format: Format::DecimalSI,
    };

    /// `value` whole units (apimachinery `NewQuantity`).
    pub const fn new(value: i64, format: Format) -> Quantity {
        Quantity {
            nanos: value as i128 * NANOS_PER_UNIT,
            format,
        }
    }

    /// `millis` thousandths of a unit (apimachinery `NewMilliQuantity`), e.g. CPU millicores.
    pub const fn from_milli(millis: i64, format: Format) -> Quantity {
        Quantity {
            nanos: millis as i128 * 1_000_000,
            format,
        }
    }

    /// An exact nano-unit count.
    pub const fn from_nanos(nanos: i128, format: Format) -> Quantity {
        Quantity { nanos, format }
    }

    /// `n` mebibytes, printed in binary form (as `resource.MustParse("<n>Mi")`).
    pub const fn mebibytes(n: i64) -> Quantity {
        Quantity::new(n.saturating_mul(1 << 20), Format::BinarySI)
    }

    /// `n` gibibytes, printed in binary form (as `resource.MustParse("<n>Gi")`).
    pub const fn gibibytes(n: i64) -> Quantity {
        Quantity::new(n.saturating_mul(1 << 30), Format::BinarySI)
    }

    /// The exact value in nano-units.
    pub const fn nanos(self) -> i128 {
        self.nanos
    }

    pub const fn format(self) -> Format {
        self.format
    }

    /// The same value printed with another format.
    pub const fn with_format(self, format: Format) -> Quantity {
        Quantity {
            nanos: self.nanos,
            format,
        }
    }

    pub const fn is_zero(self) -> bool {
        self.nanos == 0
    }

    /// -1, 0 or 1.
    pub const fn signum(self) -> i32 {
        if self.nanos < 0 {
            -1
        } else if self.nanos > 0 {
            1
        } else {
            0
        }
    }

    /// Whole units, rounded away from zero (apimachinery `Value`), saturating at `i64`.
    pub fn value(self) -> i64 {
        scaled_away_from_zero(self.nanos, NANOS_PER_UNIT)
    }

    /// Thousandths of a unit, rounded away from zero (apimachinery `MilliValue`).
    pub fn milli_value(self) -> i64 {
        scaled_away_from_zero(self.nanos, 1_000_000)
    }

    /// The value rounded up (away from zero) to a whole milli-unit, as `MilliValue` sees it.
    pub fn round_up_to_milli(self) -> Quantity {
        Quantity {
            nanos: self.milli_value() as i128 * 1_000_000,
            format: self.format,
        }
    }

    /// The value as a float (apimachinery `AsApproximateFloat64`): exact for whole units up
    /// to 2^53, otherwise within float rounding.
    pub fn as_approximate_f64(self) -> f64 {
        if self.nanos % NANOS_PER_UNIT == 0 {
            (self.nanos / NANOS_PER_UNIT) as f64
        } else {
            self.nanos as f64 / NANOS_PER_UNIT as f64
        }
    }

    /// `self + other`; the result keeps `self`'s format unless `self` is zero, in which case
    /// it takes `other`'s (apimachinery `Add`). Saturates at the representable bounds.
    pub fn saturating_add(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos),
            format: self.result_format(other),
        }
    }

    /// `self - other` with apimachinery's format rule (see [`Quantity::saturating_add`]).
    pub fn saturating_sub(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_sub(other.nanos),
            format: self.result_format(other),
        }
    }

    /// `self + other`, or `None` on overflow.
    pub fn checked_add(self, other: Quantity) -> Option<Quantity> {
        let nanos = self.nanos.checked_add(other.nanos)?;
        Some(Quantity {
            nanos,
            format: self.result_format(other),
        })
    }

    /// `self - other`, or `None` on overflow.
    pub fn checked_sub(self, other: Quantity) -> Option<Quantity> {
        let nanos = self.nanos.checked_sub(other.nanos)?;
        Some(Quantity {
            nanos,
            format: self.result_format(other),
        })
    }

    /// `max(self - other, 0)`: what is left of a budget, never negative.
    pub fn sub_or_zero(self, other: Quantity) -> Quantity {
        let left = self.saturating_sub(other);
        if left.nanos < 0 {
            Quantity {
                nanos: 0,
                format: left.format,
            }
        } else {
            left
        }
    }

    /// `self × factor` (apimachinery `Mul`), saturating.
    pub fn saturating_mul(self, factor: i64) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_mul(factor as i128),
            format: self.format,
        }
    }

    fn result_format(self, other: Quantity) -> Format {
        if self.nanos == 0 {
            other.format
        } else {
            self.format
        }
    }
}

/// `nanos / per`, rounded away from zero like apimachinery's `AsScaledInt64`, saturating.
fn scaled_away_from_zero(nanos: i128, per: i128) -> i64 {
    let quotient = nanos / per;
    let rounded = match nanos % per {
        0 => quotient,
        _ if nanos > 0 => quotient + 1,
        _ => quotient - 1,
    };
    i64::try_from(rounded).unwrap_or(if rounded > 0 { i64::MAX } else { i64::MIN })
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Quantity) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Quantity) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Quantity) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl Hash for Quantity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.nanos.hash(state);
    }
}

impl std::ops::Add for Quantity {
    type Output = Quantity;
    fn add(self, other: Quantity) -> Quantity {
        self.saturating_add(other)
    }
}

impl std::ops::Sub for Quantity {
    type Output = Quantity;
    fn sub(self, other: Quantity) -> Quantity {
        self.saturating_sub(other)
    }
}

impl std::ops::AddAssign for Quantity {
    fn add_assign(&mut self, other: Quantity) {
        *self = self.saturating_add(other);
    }
}

impl std::ops::SubAssign for Quantity {
    fn sub_assign(&mut self, other: Quantity) {
        *self = self.saturating_sub(other);
    }
}

impl std::ops::Neg for Quantity {
    type Output = Quantity;
    fn neg(self) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_neg(),
            format: self.format,
        }
    }
}

impl fmt::Debug for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Quantity({self})")
    }
}
