//! `report.html`: one self-contained page (inline SVG drawn with `plotters`, inline CSS, no
//! script, nothing fetched) that a reader opens from disk or a CI artifact. Over time: pending
//! pods, nodes by capacity type, $/hour, and API and cloud calls per second, each with the
//! scenario's fault windows shaded so cause and effect line up; then the pending → bound
//! histogram and the expectations table. Every plot shares the run's time axis (0 to the
//! last sample) so the shaded windows sit at the same x in each.

use std::fmt::Write as _;

use plotters::prelude::*;

use super::{Report, Sample};

const WIDTH: u32 = 960;
const HEIGHT: u32 = 300;

/// The fill of a fault window (drawn translucent under the lines).
pub const FAULT_SHADE: RGBColor = RGBColor(0xe6, 0x7e, 0x22);
const FAULT_OPACITY: f64 = 0.2;

const PENDING: RGBColor = RGBColor(0xc0, 0x39, 0x2b);
const ON_DEMAND: RGBColor = RGBColor(0x29, 0x80, 0xb9);
const SPOT: RGBColor = RGBColor(0x27, 0xae, 0x60);
const COST: RGBColor = RGBColor(0x8e, 0x44, 0xad);
const API: RGBColor = RGBColor(0x2c, 0x3e, 0x50);
const CLOUD: RGBColor = RGBColor(0xd3, 0x54, 0x00);
const HISTOGRAM: RGBColor = RGBColor(0x34, 0x98, 0xdb);

/// Bars in the pending → bound histogram.
const HISTOGRAM_BINS: usize = 24;

/// A plot could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("drawing the {plot} plot: {message}")]
pub struct PlotError {
    plot: &'static str,
    message: String,
}

fn plot_error<E: std::fmt::Debug>(plot: &'static str) -> impl Fn(E) -> PlotError {
    move |error| PlotError {
        plot,
        message: format!("{error:?}"),
    }
}

/// One line of a time plot: its legend, colour and what it shows of each sample.
struct Line {
    label: &'static str,
    color: RGBColor,
    value: Reading,
}

enum Reading {
    /// A level (pods, nodes, $/hour).
    Level(fn(&Sample) -> f64),
    /// The per-second rate of a running total (requests, calls).
    Rate(fn(&Sample) -> u64),
}

impl Line {
    fn of(label: &'static str, color: RGBColor, value: fn(&Sample) -> f64) -> Self {
        Self {
            label,
            color,
            value: Reading::Level(value),
        }
    }

    fn rate(label: &'static str, color: RGBColor, total: fn(&Sample) -> u64) -> Self {
        Self {
            label,
            color,
            value: Reading::Rate(total),
        }
    }

    /// The line's value at `sample`; a rate needs the sample before (0 at the first).
    fn at(&self, sample: &Sample, previous: Option<&Sample>) -> f64 {
        match (&self.value, previous) {
            (Reading::Level(level), _) => level(sample),
            (Reading::Rate(_), None) => 0.0,
            (Reading::Rate(total), Some(previous)) => {
                let seconds = sample.at_seconds - previous.at_seconds;
                let delta = total(sample).saturating_sub(total(previous)) as f64;
                if seconds > 0.0 { delta / seconds } else { 0.0 }
            }
        }
    }
}

/// The whole page.
pub fn render(report: &Report) -> Result<String, PlotError> {
    let plots = [
        time_plot(
            "pending pods",
            "pods",
            report,
            &[Line::of("pending", PENDING, |s| s.pods_pending as f64)],
        )?,
        time_plot(
            "nodes by capacity type",
            "nodes",
            report,
            &[
                Line::of("on-demand", ON_DEMAND, |s| s.nodes_on_demand as f64),
                Line::of("spot", SPOT, |s| s.nodes_spot as f64),
            ],
        )?,
        time_plot(
            "cost of the running instances",
            "$/hour",
            report,
            &[Line::of("$/hour", COST, |s| s.hourly_cost)],
        )?,
        time_plot(
            "API and cloud calls",
            "calls/s",
            report,
            &[
                Line::rate("API server requests/s", API, |s| s.api_requests),
                Line::rate("EC2 calls/s", CLOUD, |s| s.cloud_calls),
            ],
        )?,
        histogram(&report.pending_to_bound_seconds)?,
    ];
    let mut page = String::new();
    head(&mut page, report);
    for plot in &plots {
        let _ = writeln!(page, "<figure>{plot}</figure>");
    }
    fault_list(&mut page, report);
    expectations(&mut page, report);
    page.push_str("</body>\n</html>\n");
    Ok(page)
}

fn head(page: &mut String, report: &Report) {
    let name = escape(&report.name);
    let duration = end_of_run(&report.series);
    let p = &report.pending_to_bound_percentiles;
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>kerf simulate: {name}</title>\n<style>\n\
         body {{ font-family: sans-serif; margin: 2em; color: #222; }}\n\
         figure {{ margin: 1.5em 0; }}\n\
         table {{ border-collapse: collapse; }}\n\
         td, th {{ border: 1px solid #ccc; padding: 0.3em 0.8em; text-align: left; }}\n\
         .held {{ color: #1e8449; }} .failed {{ color: #c0392b; font-weight: bold; }}\n\
         .fault {{ background: rgba(230, 126, 34, 0.2); padding: 0 0.3em; }}\n\
         </style>\n</head>\n<body>\n<h1>kerf simulate: {name}</h1>\n\
         <p>{samples} samples over {duration:.0}s; {bound} pods bound, pending → bound \
         p50 {p50:.2}s, p90 {p90:.2}s, p99 {p99:.2}s, max {max:.2}s.</p>\n",
        samples = report.series.len(),
        bound = report.pending_to_bound_seconds.len(),
        p50 = p.p50,
        p90 = p.p90,
        p99 = p.p99,
        max = p.max,
    );
}

fn fault_list(page: &mut String, report: &Report) {
    if report.fault_windows.is_empty() {
        return;
    }
    page.push_str("<h2>Faults</h2>\n<ul>\n");
    for window in &report.fault_windows {
        let to = window
            .to_seconds
            .map_or_else(|| "the end".to_owned(), |to| format!("{to:.1}s"));
        let _ = writeln!(
            page,
            "<li><span class=\"fault\">{}</span> from {:.1}s to {to}</li>",
            escape(&window.label),
            window.from_seconds
        );
    }
    page.push_str("</ul>\n");
}

fn expectations(page: &mut String, report: &Report) {
    if report.expectations.is_empty() {
        return;
    }
    page.push_str(
        "<h2>Expectations</h2>\n<table>\n\
         <tr><th>expectation</th><th>wanted</th><th>measured</th><th>result</th></tr>\n",
    );
    for e in &report.expectations {
        let (class, verdict) = if e.held {
            ("held", "held")
        } else {
            ("failed", "FAILED")
        };
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{verdict}</td></tr>",
            escape(&e.name),
            escape(&e.wanted),
            escape(&e.measured)
        );
    }
    page.push_str("</table>\n");
}

/// The last sample's time (at least one second, so an empty run still has an axis).
fn end_of_run(series: &[Sample]) -> f64 {
    series.last().map_or(0.0, |s| s.at_seconds).max(1.0)
}

/// A plot of `lines` over the run, with the fault windows shaded.
fn time_plot(
    title: &'static str,
    unit: &str,
    report: &Report,
    lines: &[Line],
) -> Result<String, PlotError> {
    let fail = plot_error(title);
    let end = end_of_run(&report.series);
    let points: Vec<Vec<(f64, f64)>> = lines
        .iter()
        .map(|line| {
            let previous = std::iter::once(None).chain(report.series.iter().map(Some));
            report
                .series
                .iter()
                .zip(previous)
                .map(|(s, p)| (s.at_seconds, line.at(s, p)))
                .collect()
        })
        .collect();
    let highest = points.iter().flatten().map(|(_, y)| *y).fold(0.0, f64::max);
    let top = if highest > 0.0 { highest * 1.1 } else { 1.0 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(&fail)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..end, 0.0..top)
            .map_err(&fail)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the start")
            .y_desc(unit)
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(&fail)?;
        chart
            .draw_series(report.fault_windows.iter().map(|w| {
                let to = w.to_seconds.unwrap_or(end).min(end);
                Rectangle::new(
                    [(w.from_seconds.min(to), 0.0), (to, top)],
                    FAULT_SHADE.mix(FAULT_OPACITY).filled(),
                )
            }))
            .map_err(&fail)?;
        for (line, points) in lines.iter().zip(points) {
            let color = line.color;
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(&fail)?
                .label(line.label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(&fail)?;
        root.present().map_err(&fail)?;
    }
    Ok(svg)
}

/// Counts of `values` in `bins` equal bins from 0 to the largest value, with the bin width.
fn bin(values: &[f64], bins: usize) -> (Vec<u64>, f64) {
    let largest = values.iter().copied().fold(0.0, f64::max);
    let width = if largest > 0.0 {
        largest / bins as f64
    } else {
        1.0
    };
    let mut counts = vec![0; bins];
    for value in values {
        let index = ((value / width) as usize).min(bins - 1);
        counts[index] += 1;
    }
    (counts, width)
}

/// The pending → bound times as a histogram.
fn histogram(seconds: &[f64]) -> Result<String, PlotError> {
    const TITLE: &str = "pending → bound";
    let fail = plot_error(TITLE);
    let (counts, width) = bin(seconds, HISTOGRAM_BINS);
    let tallest = counts.iter().copied().max().unwrap_or(0).max(1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(&fail)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(TITLE, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(
                0.0..width * HISTOGRAM_BINS as f64,
                0.0..tallest as f64 * 1.1,
            )
            .map_err(&fail)?;
        chart
            .configure_mesh()
            .x_desc("seconds from creation to binding")
            .y_desc("pods")
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(&fail)?;
        chart
            .draw_series(counts.iter().enumerate().map(|(i, count)| {
                let from = i as f64 * width;
                Rectangle::new(
                    [(from, 0.0), (from + width, *count as f64)],
                    HISTOGRAM.filled(),
                )
            }))
            .map_err(&fail)?;
        root.present().map_err(&fail)?;
    }
    Ok(svg)
}

/// Text made safe for HTML.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{ExpectationResult, FaultWindow, Percentiles};
    use super::*;

    fn series(seconds: u32) -> Vec<Sample> {
        (0..=seconds)
            .map(|s| Sample {
                at_seconds: f64::from(s),
                pods_pending: u64::from(seconds - s),
                nodes_spot: u64::from(s / 10),
                hourly_cost: f64::from(s) * 0.1,
                api_requests: u64::from(s) * 7,
                ..Sample::default()
            })
            .collect()
    }

    /// The (x, width) of every rect drawn in the fault shade, in document order.
    fn shaded_rects(svg: &str) -> Vec<(f64, f64)> {
        let fill = format!(
            "fill=\"#{:02X}{:02X}{:02X}\"",
            FAULT_SHADE.0, FAULT_SHADE.1, FAULT_SHADE.2
        );
        svg.split("<rect")
            .skip(1)
            .filter(|rect| rect.split("/>").next().is_some_and(|r| r.contains(&fill)))
            .map(|rect| (attribute(rect, "x"), attribute(rect, "width")))
            .collect()
    }

    fn attribute(tag: &str, name: &str) -> f64 {
        let start = tag.find(&format!(" {name}=\"")).expect("attribute") + name.len() + 3;
        let rest = &tag[start..];
        rest[..rest.find('"').expect("closing quote")]
            .parse()
            .expect("a number")
    }

    #[test]
    fn fault_windows_are_shaded_across_their_time_range() {
        let report = Report {
            series: series(100),
            fault_windows: vec![
                FaultWindow {
                    label: "ice".into(),
                    from_seconds: 10.0,
                    to_seconds: Some(20.0),
                },
                FaultWindow {
                    label: "api-errors".into(),
                    from_seconds: 50.0,
                    to_seconds: None,
                },
            ],
            ..Report::default()
        };
        let svg = time_plot(
            "pending",
            "pods",
            &report,
            &[Line::of("pending", PENDING, |s| s.pods_pending as f64)],
        )
        .expect("drawn");
        let rects = shaded_rects(&svg);
        assert_eq!(rects.len(), 2, "{svg}");
        let ((x1, w1), (x2, w2)) = (rects[0], rects[1]);
        // 10 s wide from 10 s, and 50 s wide from 50 s (still active: to the end at 100 s).
        assert!((w2 / w1 - 5.0).abs() < 0.1, "{rects:?}");
        assert!(((x2 - x1) / w1 - 4.0).abs() < 0.1, "{rects:?}");
        // The plot's x axis spans the whole run: 100 s is twice the second window's width.
        let pixels_per_second = w1 / 10.0;
        assert!((x1 - 10.0 * pixels_per_second - (x2 - 50.0 * pixels_per_second)).abs() <= 1.0);
    }

    #[test]
    fn the_page_holds_a_plot_each_and_the_expectations() {
        let report = Report {
            name: "spot-<storm>".into(),
            series: series(30),
            expectations: vec![
                ExpectationResult {
                    name: "leakedInstances".into(),
                    wanted: "0".into(),
                    measured: "0".into(),
                    held: true,
                },
                ExpectationResult {
                    name: "maxNodes".into(),
                    wanted: "≤ 8".into(),
                    measured: "11".into(),
                    held: false,
                },
            ],
            pending_to_bound_seconds: vec![0.5, 1.0, 2.5],
            pending_to_bound_percentiles: Percentiles::of(&[0.5, 1.0, 2.5]),
            ..Report::default()
        };
        let page = render(&report).expect("rendered");
        assert_eq!(page.matches("<svg").count(), 5);
        assert!(page.contains("spot-&lt;storm&gt;"));
        assert!(page.contains(
            "<tr><td>maxNodes</td><td>≤ 8</td><td>11</td><td class=\"failed\">FAILED</td></tr>"
        ));
        assert!(page.contains("<td>leakedInstances</td><td>0</td><td>0</td><td class=\"held\">"));
        for external in ["src=", "href=", "<link", "<script", "@import"] {
            assert!(
                !page.contains(external),
                "self-contained, yet has {external}"
            );
        }
    }

    #[test]
    fn times_fall_in_equal_bins_up_to_the_slowest() {
        let (counts, width) = bin(&[0.0, 0.9, 1.0, 4.0], 4);
        assert_eq!(width, 1.0);
        assert_eq!(counts, [2, 1, 0, 1]);
        let (empty, _) = bin(&[], 4);
        assert_eq!(empty, [0, 0, 0, 0]);
    }
}
