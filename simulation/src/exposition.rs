//! Reads the controller's counters out of its Prometheus exposition text
//! (`kerf_actors::metrics::render`), for the summary's figures: one reader of samples and
//! labels, so each figure only names the series and label it counts.

/// The samples of `text` (comments skipped): name, labels (`a="x",b="y"`, empty when it has
/// none) and value as a counter.
pub fn samples(text: &str) -> impl Iterator<Item = (&str, &str, u64)> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.strip_suffix('}')?),
                None => (series, ""),
            };
            Some((name, labels, counter_value(value)))
        })
}

/// The value of label `key` in `labels` as [`samples`] gives them.
pub fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split("\",").find_map(|pair| {
        let (k, v) = pair.split_once("=\"")?;
        (k == key).then(|| v.trim_end_matches('"'))
    })
}

/// A counter's value as the exposition text writes it (`12`, `1e3`); 0 if unreadable.
fn counter_value(text: &str) -> u64 {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "counters are non-negative integers"
    )]
    let value = text.trim().parse::<f64>().unwrap_or(0.0) as u64;
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_give_names_labels_and_counter_values() {
        let text =
            "# TYPE a_total counter\na_total{x=\"1\",y=\"two, words\"} 1e3\nb_total 4\nbad line\n";
        let read: Vec<_> = samples(text).collect();
        assert_eq!(
            read,
            [
                ("a_total", "x=\"1\",y=\"two, words\"", 1000),
                ("b_total", "", 4),
                ("bad", "", 0)
            ]
        );
        assert_eq!(label(read[0].1, "y"), Some("two, words"));
        assert_eq!(label(read[0].1, "x"), Some("1"));
        assert_eq!(label(read[0].1, "z"), None);
        assert_eq!(label("", "x"), None);
    }
}
