//! Dense resource vectors. Every resource name seen in a solve gets an index; quantities are
//! held as exact milli-units in `i64` (a millicore, a thousandth of a byte), so fit checks are
//! a few integer comparisons instead of map lookups and decimal arithmetic.

use crate::resources::{Format, Quantity, Resources};

/// Index of a resource name within a solve.
pub type ResId = usize;

pub const CPU: ResId = 0;
pub const MEMORY: ResId = 1;
pub const PODS: ResId = 2;

/// The resource names of a solve, in index order (cpu, memory, pods first).
#[derive(Clone, Debug)]
pub struct ResNames {
    names: Vec<String>,
}

impl Default for ResNames {
    fn default() -> Self {
        ResNames {
            names: vec!["cpu".into(), "memory".into(), "pods".into()],
        }
    }
}

impl ResNames {
    pub fn id(&mut self, name: &str) -> ResId {
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return i;
        }
        self.names.push(name.to_string());
        self.names.len() - 1
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Converts a resource list, registering new names.
    pub fn vector(&mut self, list: &Resources) -> Vec<(ResId, i64)> {
        list.iter()
            .map(|(name, q)| (self.id(name), q.milli_value()))
            .collect()
    }

    /// Converts a Kubernetes resource list, registering new names; `Err` names the
    /// unparsable entry.
    pub fn k8s_vector(
        &mut self,
        list: &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    ) -> Result<Vec<(ResId, i64)>, String> {
        let mut out = Vec::with_capacity(list.len());
        for (name, q) in list {
            let milli = parse_milli(&q.0).ok_or_else(|| format!("{name}={}", q.0))?;
            out.push((self.id(name), milli));
        }
        Ok(out)
    }

    /// Renders a vector the way upstream prints resource lists: `{"cpu":"1500m",...}`,
    /// omitting zero entries.
    /// The name of resource `id`.
    pub fn name(&self, id: ResId) -> &str {
        &self.names[id]
    }

    pub fn render(&self, v: &[i64]) -> String {
        let mut parts: Vec<(String, String)> = v
            .iter()
            .enumerate()
            .filter(|(_, q)| **q != 0)
            .map(|(i, q)| (self.names[i].clone(), format_milli(&self.names[i], *q)))
            .collect();
        parts.sort();
        let body: Vec<String> = parts.iter().map(|(k, q)| format!("{k:?}:{q:?}")).collect();
        format!("{{{}}}", body.join(","))
    }

    /// The public resource list of a vector, omitting zero entries.
    pub fn to_resources(&self, v: &[i64]) -> Resources {
        let mut out = Resources::new();
        for (i, q) in v.iter().enumerate() {
            if *q != 0 {
                out.insert(&self.names[i], quantity(&self.names[i], *q));
            }
        }
        out
    }
}

/// Fills a zeroed vector of `len` from sparse entries.
pub fn dense(len: usize, entries: &[(ResId, i64)]) -> Vec<i64> {
    let mut v = vec![0; len];
    for (i, q) in entries {
        v[*i] += q;
    }
    v
}

/// Whether `requests` fit in `available`, resource by resource.
#[inline]
pub fn fits(requests: &[i64], available: &[i64]) -> bool {
    requests.iter().zip(available).all(|(r, a)| r <= a)
}

#[inline]
pub fn add_assign(acc: &mut [i64], v: &[i64]) {
    for (a, b) in acc.iter_mut().zip(v) {
        *a = a.saturating_add(*b);
    }
}

#[inline]
pub fn sub_assign(acc: &mut [i64], v: &[i64]) {
    for (a, b) in acc.iter_mut().zip(v) {
        *a = a.saturating_sub(*b);
    }
}

/// Parses a Kubernetes quantity into milli-units, rounding up like `Quantity.MilliValue`.
pub fn parse_milli(s: &str) -> Option<i64> {
    Quantity::parse(s.trim()).ok().map(Quantity::milli_value)
}

/// A quantity of `milli` thousandths of `name`'s unit, in the format upstream prints it in.
fn quantity(name: &str, milli: i64) -> Quantity {
    let binary = name == "memory" || name == "ephemeral-storage" || name.starts_with("hugepages-");
    Quantity::from_milli(
        milli,
        if binary {
            Format::BinarySI
        } else {
            Format::DecimalSI
        },
    )
}

/// Formats milli-units as a canonical quantity for `name`.
pub fn format_milli(name: &str, milli: i64) -> String {
    quantity(name, milli).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_quantities_to_milli_units() {
        assert_eq!(parse_milli("100m"), Some(100));
        assert_eq!(parse_milli("1.5"), Some(1500));
        assert_eq!(parse_milli("2"), Some(2000));
        assert_eq!(parse_milli("1Gi"), Some((1 << 30) * 1000));
        assert_eq!(parse_milli("512Mi"), Some(512 * (1 << 20) * 1000));
        assert_eq!(parse_milli("1k"), Some(1_000_000));
        assert_eq!(parse_milli("1e3"), Some(1_000_000));
        assert_eq!(parse_milli("1n"), Some(1), "rounds up to a milli");
        assert_eq!(parse_milli("bogus"), None);
        assert_eq!(parse_milli("1.5Gi"), Some(1536 * (1 << 20) * 1000));
        assert_eq!(parse_milli("1Qi"), None);
    }

    #[test]
    fn formats_like_upstream() {
        assert_eq!(format_milli("cpu", 1500), "1500m");
        assert_eq!(format_milli("cpu", 2000), "2");
        assert_eq!(format_milli("memory", (1 << 30) * 1000), "1Gi");
        assert_eq!(format_milli("pods", 5000), "5");
        let names = ResNames::default();
        assert_eq!(
            names.render(&[1500, 0, 1000]),
            r#"{"cpu":"1500m","pods":"1"}"#
        );
    }

    #[test]
    fn fits_compares_every_resource() {
        assert!(fits(&[1, 2, 3], &[1, 2, 3]));
        assert!(!fits(&[1, 3, 3], &[1, 2, 3]));
    }
}
