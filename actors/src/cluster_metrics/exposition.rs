//! Gauge families in the Prometheus text format, for series computed from cluster state at
//! scrape time. They are rendered here rather than through the `metrics` recorder because
//! that recorder cannot forget a series: a deleted pod's or NodePool's series must vanish
//! from the scrape, as upstream's metric store deletes them.
//!
//! The text is written into an [`Exposition`], which hands it on in chunks of about
//! [`CHUNK_BYTES`] as it fills: the text grows with every pod, Node and NodeClaim (a series
//! per pod, several per Node and resource), and `/metrics` streams it to the scraper rather
//! than hold it. Families with a series per pod, Node or NodeClaim write each series as they
//! compute it ([`Exposition::gauge`]); those bounded by the NodePools and instance types
//! collect theirs first ([`Family`]).

use std::fmt::Write as _;

/// About how much text an [`Exposition`] gathers before handing it on: large enough that a
/// chunk is one write to the socket among few, small enough that a scrape's text in flight
/// (the chunks queued for the response and hyper's write buffer) stays well under a megabyte.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// The exposition being written: the text gathered so far, handed to `sink` each time it
/// reaches [`CHUNK_BYTES`] (a chunk ends at a line's end) and at [`Exposition::finish`].
pub struct Exposition<'s> {
    text: String,
    sink: &'s mut dyn FnMut(String),
}

impl<'s> Exposition<'s> {
    pub fn new(sink: &'s mut dyn FnMut(String)) -> Self {
        Self {
            text: String::with_capacity(CHUNK_BYTES),
            sink,
        }
    }

    /// Appends text already in the exposition format (whole lines).
    pub fn push_text(&mut self, text: &str) {
        self.text.push_str(text);
        self.hand_on_full();
    }

    /// A gauge family whose series are written as they are given: its header goes out with
    /// the first, and a family given none writes nothing, as Prometheus clients leave out
    /// gauges without series. Its series must all be given before the next family starts.
    pub fn gauge(&mut self, name: &'static str, help: &'static str) -> Gauge<'_, 's> {
        Gauge {
            out: self,
            name,
            help,
            started: false,
        }
    }

    /// Hands on what is left.
    pub fn finish(mut self) {
        if !self.text.is_empty() {
            (self.sink)(std::mem::take(&mut self.text));
        }
    }

    fn hand_on_full(&mut self) {
        if self.text.len() >= CHUNK_BYTES {
            let full = std::mem::replace(&mut self.text, String::with_capacity(CHUNK_BYTES));
            (self.sink)(full);
        }
    }
}

/// One gauge family being written into an [`Exposition`].
pub struct Gauge<'e, 's> {
    out: &'e mut Exposition<'s>,
    name: &'static str,
    help: &'static str,
    started: bool,
}

impl Gauge<'_, '_> {
    /// Writes one series; labels are written in the order given.
    pub fn series<K: AsRef<str>, V: AsRef<str>>(&mut self, labels: &[(K, V)], value: f64) {
        let text = &mut self.out.text;
        // Writing to a String cannot fail.
        if !self.started {
            self.started = true;
            let _ = writeln!(text, "# HELP {} {}", self.name, self.help);
            let _ = writeln!(text, "# TYPE {} gauge", self.name);
        }
        text.push_str(self.name);
        if !labels.is_empty() {
            text.push('{');
            for (i, (key, value)) in labels.iter().enumerate() {
                if i > 0 {
                    text.push(',');
                }
                text.push_str(key.as_ref());
                text.push_str("=\"");
                escape_into(text, value.as_ref());
                text.push('"');
            }
            text.push('}');
        }
        let _ = writeln!(text, " {value}");
        self.out.hand_on_full();
    }
}

/// One gauge family whose series are collected before it is written: for families bounded
/// by the NodePools and instance types, built in one pass beside others.
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

    /// Writes the family into `out` (nothing when it has no series).
    pub fn write(&self, out: &mut Exposition) {
        let mut gauge = out.gauge(self.name, self.help);
        for (labels, value) in &self.series {
            gauge.series(labels, *value);
        }
    }

    /// The family's text alone.
    #[cfg(test)]
    pub fn text(&self) -> String {
        collect(|out| self.write(out))
    }
}

/// The whole text `write` puts into an exposition, in one String: for tests and callers
/// that need it all at once.
pub fn collect(write: impl FnOnce(&mut Exposition)) -> String {
    let mut all = String::new();
    let mut sink = |chunk: String| all.push_str(&chunk);
    let mut out = Exposition::new(&mut sink);
    write(&mut out);
    out.finish();
    all
}

/// Label values escape backslash, double quote and newline.
fn escape_into(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str(r"\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
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
        assert_eq!(
            family.text(),
            "# HELP karpenter_test A test gauge.\n# TYPE karpenter_test gauge\n\
             karpenter_test{name=\"a\\\"b\\\\c\",phase=\"Pending\"} 1\nkarpenter_test 2.5\n"
        );
        assert!(Family::new("karpenter_none", "Nothing.").text().is_empty());
    }

    #[test]
    fn text_is_handed_on_in_chunks_of_whole_lines() {
        let mut chunks = Vec::new();
        let mut sink = |chunk: String| chunks.push(chunk);
        let mut out = Exposition::new(&mut sink);
        let mut gauge = out.gauge("karpenter_test", "A test gauge.");
        let series = 10_000;
        for i in 0..series {
            gauge.series(&[("name", format!("pod-{i}"))], 1.0);
        }
        out.finish();
        assert!(chunks.len() > 2, "{} chunks", chunks.len());
        let longest_line = chunks
            .iter()
            .flat_map(|c| c.lines())
            .map(str::len)
            .max()
            .unwrap_or(0);
        for chunk in &chunks {
            assert!(chunk.ends_with('\n'), "a chunk ends mid-line");
            assert!(chunk.len() <= CHUNK_BYTES + longest_line, "{}", chunk.len());
        }
        let all = chunks.concat();
        assert_eq!(all.matches("# TYPE karpenter_test gauge\n").count(), 1);
        assert_eq!(all.lines().filter(|l| !l.starts_with('#')).count(), series);
        assert!(all.ends_with("karpenter_test{name=\"pod-9999\"} 1\n"));
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
