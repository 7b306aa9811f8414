//! Gauge families in the Prometheus text format, for series computed from cluster state at
//! scrape time. They are rendered here rather than through the `metrics` recorder because
//! that recorder cannot forget a series: a deleted pod's or NodePool's series must vanish
//! from the scrape, as upstream's metric store deletes them.

use std::fmt::Write as _;

/// One gauge family: its name, help text and series.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    name: &'static str,
    help: &'static str,
    series: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Family {
    pub fn new(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            series: Vec::new(),
        }
    }

    /// Adds one series; labels are written in the order given.
    pub fn push(&mut self, labels: Vec<(&'static str, String)>, value: f64) {
        self.series.push((labels, value));
    }

    pub fn len(&self) -> usize {
        self.series.len()
    }

    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    /// Appends the family to `out`; an empty family writes nothing, as Prometheus clients
    /// leave out gauges without series.
    pub fn render_into(&self, out: &mut String) {
        if self.series.is_empty() {
            return;
        }
        // Writing to a String cannot fail.
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} gauge", self.name);
        for (labels, value) in &self.series {
            out.push_str(self.name);
            if !labels.is_empty() {
                out.push('{');
                for (i, (key, value)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{key}=\"{}\"", escape(value));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {value}");
        }
    }
}

/// Label values escape backslash, double quote and newline.
fn escape(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Upstream's `resource_type` label: the resource name lower-cased, dashes as underscores.
pub fn resource_type(name: &str) -> String {
    name.to_lowercase().replace('-', "_")
}

/// Upstream's value of a quantity: CPU in cores (from millicores), anything else in whole
/// units rounded up.
pub fn quantity_value(resource: &str, quantity: kerf::resources::Quantity) -> f64 {
    #[allow(
        clippy::cast_precision_loss,
        reason = "resource amounts are far below 2^52"
    )]
    if resource == kerf::labels::RESOURCE_CPU {
        quantity.milli_value() as f64 / 1000.0
    } else {
        quantity.value() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_help_type_and_escaped_series() {
        let mut family = Family::new("karpenter_test", "A test gauge.");
        family.push(
            vec![("name", "a\"b\\c".into()), ("phase", "Pending".into())],
            1.0,
        );
        family.push(Vec::new(), 2.5);
        let mut out = String::new();
        family.render_into(&mut out);
        assert_eq!(
            out,
            "# HELP karpenter_test A test gauge.\n# TYPE karpenter_test gauge\n\
             karpenter_test{name=\"a\\\"b\\\\c\",phase=\"Pending\"} 1\nkarpenter_test 2.5\n"
        );
        let mut empty = String::new();
        Family::new("karpenter_none", "Nothing.").render_into(&mut empty);
        assert!(empty.is_empty());
    }

    #[test]
    fn resource_values_follow_upstream() {
        let q = |s: &str| kerf::resources::Quantity::parse(s).expect("valid");
        assert_eq!(quantity_value("cpu", q("1500m")), 1.5);
        assert_eq!(quantity_value("memory", q("1Gi")), 1_073_741_824.0);
        assert_eq!(quantity_value("memory", q("1500m")), 2.0, "rounded up");
        assert_eq!(resource_type("ephemeral-storage"), "ephemeral_storage");
        assert_eq!(resource_type("nvidia.com/gpu"), "nvidia.com/gpu");
    }
}
