//! Judging a scenario's expectations on what was measured ([`super::invariants`]), and the
//! table the terminal ends with. `allPodsBound.within` is measured from the end of the last
//! step that added or displaced pods (the workload's creation when no step did) to the last
//! time every workload pod became bound; it fails outright when pods are still pending at
//! the end. Pods the controller reported it cannot place are left out of both, and the
//! measured value says how many.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use tokio::time::Instant;

use super::super::install::RbacUsage;
use super::super::report::ExpectationResult;
use super::format::Expect;
use super::invariants::Measures;

/// Facts read at the end of the run.
pub struct End<'a> {
    pub measures: &'a Measures,
    pub last_displaced: Instant,
    pub leaked: &'a [String],
    pub double_launched: &'a [String],
    /// Nodes not being deleted, by their `karpenter.sh/nodepool` label.
    pub pool_nodes: &'a BTreeMap<String, u64>,
}

/// Judged in every scenario: the chart's RBAC refused none of the controller's requests (a
/// refusal is a rule an installed controller lacks, whatever the scenario expects).
pub fn chart_rbac(usage: &RbacUsage) -> ExpectationResult {
    let measured = match usage.refused.as_slice() {
        [] => "none refused".to_owned(),
        [first, ..] => format!("{} refused, first: {first}", usage.refused.len()),
    };
    ExpectationResult {
        name: "chartRbac".to_owned(),
        wanted: "no request refused".to_owned(),
        measured,
        held: usage.refused.is_empty(),
    }
}

/// One result per expectation given, in the file format's order.
pub fn judge(expect: &Expect, end: &End<'_>) -> Vec<ExpectationResult> {
    let m = end.measures;
    let mut results = Vec::new();
    let mut push = |name: &str, wanted: String, measured: String, held: bool| {
        results.push(ExpectationResult {
            name: name.to_owned(),
            wanted,
            measured,
            held,
        });
    };
    if let Some(within) = &expect.all_pods_bound {
        let wanted = format!("within {within}", within = within.within);
        let excluded = m.excluded().map_or(String::new(), |e| format!("; {e}"));
        if m.waiting() > 0 {
            push(
                "allPodsBound",
                wanted,
                format!("{} pods pending at the end{excluded}", m.waiting()),
                false,
            );
        } else {
            let took = m.last_all_bound.map_or(Duration::ZERO, |t| {
                t.saturating_duration_since(end.last_displaced)
            });
            push(
                "allPodsBound",
                wanted,
                format!("{:.1}s{excluded}", took.as_secs_f64()),
                took <= within.within.as_std(),
            );
        }
    }
    let mut count = |name: &str, wanted: Option<u64>, found: &[String]| {
        if let Some(wanted) = wanted {
            let measured = if found.is_empty() {
                "0".to_owned()
            } else {
                format!("{} ({})", found.len(), found.join(", "))
            };
            push(
                name,
                format!("≤ {wanted}"),
                measured,
                found.len() as u64 <= wanted,
            );
        }
    };
    count("leakedInstances", expect.leaked_instances, end.leaked);
    count(
        "doubleLaunches",
        expect.double_launches,
        end.double_launched,
    );
    if let Some(wanted) = expect.pdb_violations {
        push(
            "pdbViolations",
            format!("≤ {wanted}"),
            m.pdb_violations.to_string(),
            m.pdb_violations <= wanted,
        );
    }
    if let Some(wanted) = expect.max_nodes {
        push(
            "maxNodes",
            format!("≤ {wanted}"),
            m.max_nodes.to_string(),
            m.max_nodes as u64 <= wanted,
        );
    }
    if let Some(wanted) = expect.max_hourly_cost {
        push(
            "maxHourlyCost",
            format!("≤ ${wanted:.2}/h"),
            format!("${:.2}/h", m.max_hourly_cost),
            m.max_hourly_cost <= wanted,
        );
    }
    for (pool, &wanted) in expect.node_pool_nodes.iter().flatten() {
        let found = end.pool_nodes.get(pool).copied().unwrap_or(0);
        push(
            &format!("nodePoolNodes.{pool}"),
            wanted.to_string(),
            found.to_string(),
            found == wanted,
        );
    }
    results
}

/// The expectations table: each column as wide as its widest cell, so a long measurement
/// (a refusal named, pods left out) pushes the columns after it instead of breaking them.
pub fn table(results: &[ExpectationResult]) -> String {
    let rows: Vec<[&str; 4]> = std::iter::once(["EXPECTATION", "WANTED", "MEASURED", "RESULT"])
        .chain(results.iter().map(|r| {
            [
                r.name.as_str(),
                r.wanted.as_str(),
                r.measured.as_str(),
                if r.held { "held" } else { "FAILED" },
            ]
        }))
        .collect();
    let width = |column: usize| {
        rows.iter()
            .map(|row| row[column].chars().count())
            .max()
            .unwrap_or(0)
    };
    let widths = [width(0), width(1), width(2)];
    let mut out = String::new();
    for [name, wanted, measured, result] in rows {
        let _ = writeln!(
            out,
            "{name:<w0$}  {wanted:<w1$}  {measured:<w2$}  {result}",
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::format::Within;
    use super::*;

    fn expect_all() -> Expect {
        Expect {
            all_pods_bound: Some(Within {
                within: kerf::api::duration::Duration::from_secs(60),
            }),
            leaked_instances: Some(0),
            double_launches: Some(0),
            pdb_violations: Some(0),
            max_nodes: Some(3),
            max_hourly_cost: Some(1.0),
            node_pool_nodes: Some(BTreeMap::from([("fixed".to_owned(), 2)])),
        }
    }

    #[test]
    fn the_table_keeps_its_columns_aligned_whatever_a_cell_holds() {
        let result = |name: &str, wanted: &str, measured: &str, held| ExpectationResult {
            name: name.to_owned(),
            wanted: wanted.to_owned(),
            measured: measured.to_owned(),
            held,
        };
        let table = table(&[
            result(
                "allPodsBound",
                "≤ 1m0s",
                "41.2s (3 left out: default/a, default/b, …)",
                true,
            ),
            result(
                "chartRbac",
                "0 refused",
                "1 refused: list leases in API group",
                false,
            ),
            result("maxHourlyCost", "≤ $200.00/h", "$12.34/h", true),
        ]);
        let lines: Vec<&str> = table.lines().collect();
        let column = |line: &str, word: &str| line.find(word).map(|at| line[..at].chars().count());
        let result_column = column(lines[0], "RESULT");
        assert!(result_column.is_some(), "{table}");
        for (line, word) in lines[1..].iter().zip(["held", "FAILED", "held"]) {
            assert_eq!(column(line, word), result_column, "{table}");
        }
        let measured_column = column(lines[0], "MEASURED");
        for (line, word) in lines[1..].iter().zip(["41.2s", "1 refused", "$12.34/h"]) {
            assert_eq!(column(line, word), measured_column, "{table}");
        }
    }

    #[test]
    fn a_refused_request_fails_the_chart_rbac_check_and_is_named() {
        let clean = chart_rbac(&RbacUsage::default());
        assert!(clean.held, "{clean:?}");
        let refused = chart_rbac(&RbacUsage {
            refused: vec![
                "get services \"x\" in API group \"\" in the namespace \"y\"".to_owned(),
                "list leases in API group \"coordination.k8s.io\"".to_owned(),
            ],
            unused: Vec::new(),
        });
        assert!(!refused.held);
        assert_eq!(
            refused.measured,
            "2 refused, first: get services \"x\" in API group \"\" in the namespace \"y\""
        );
    }

    #[test]
    fn each_expectation_is_judged_on_its_measure() {
        let now = Instant::now();
        let measures = Measures {
            pods: 10,
            bound: 10,
            max_nodes: 4,
            max_hourly_cost: 0.5,
            last_all_bound: Some(now + Duration::from_secs(12)),
            ..Measures::default()
        };
        let leaked = ["i-1".to_owned()];
        let pool_nodes = BTreeMap::from([("fixed".to_owned(), 3), ("other".to_owned(), 2)]);
        let results = judge(
            &expect_all(),
            &End {
                measures: &measures,
                last_displaced: now,
                leaked: &leaked,
                double_launched: &[],
                pool_nodes: &pool_nodes,
            },
        );
        let held: Vec<(&str, bool)> = results.iter().map(|r| (r.name.as_str(), r.held)).collect();
        assert_eq!(
            held,
            [
                ("allPodsBound", true),
                ("leakedInstances", false),
                ("doubleLaunches", true),
                ("pdbViolations", true),
                ("maxNodes", false),
                ("maxHourlyCost", true),
                ("nodePoolNodes.fixed", false),
            ]
        );
        assert_eq!(results[0].measured, "12.0s");
        assert_eq!(results[1].measured, "1 (i-1)");
        assert_eq!(
            results[6].measured, "3",
            "a pool's nodes are counted exactly"
        );
        assert!(
            table(&results).contains("maxNodes             ≤ 3"),
            "{}",
            table(&results)
        );
    }

    #[test]
    fn pods_pending_at_the_end_fail_all_pods_bound() {
        let measures = Measures {
            pods: 10,
            bound: 7,
            ..Measures::default()
        };
        let results = judge(
            &expect_all(),
            &End {
                measures: &measures,
                last_displaced: Instant::now(),
                leaked: &[],
                double_launched: &[],
                pool_nodes: &BTreeMap::new(),
            },
        );
        assert!(!results[0].held);
        assert_eq!(results[0].measured, "3 pods pending at the end");
    }

    #[test]
    fn pods_the_controller_cannot_place_are_left_out_and_counted() {
        let now = Instant::now();
        let measures = Measures {
            pods: 10,
            bound: 8,
            unplaceable: vec!["default/huge-1".to_owned(), "default/huge-2".to_owned()],
            last_all_bound: Some(now + Duration::from_secs(5)),
            ..Measures::default()
        };
        let end = End {
            measures: &measures,
            last_displaced: now,
            leaked: &[],
            double_launched: &[],
            pool_nodes: &BTreeMap::new(),
        };
        let results = judge(&expect_all(), &end);
        assert!(results[0].held);
        assert_eq!(
            results[0].measured,
            "5.0s; 2 pods excluded (kerf reported them unschedulable: default/huge-1, default/huge-2)"
        );

        let one_waiting = Measures {
            bound: 7,
            ..measures.clone()
        };
        let results = judge(
            &expect_all(),
            &End {
                measures: &one_waiting,
                ..end
            },
        );
        assert!(!results[0].held);
        assert!(
            results[0]
                .measured
                .starts_with("1 pods pending at the end; 2 pods excluded"),
            "{}",
            results[0].measured
        );
    }
}
