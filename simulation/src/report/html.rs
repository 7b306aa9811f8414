//! `report.html`: one self-contained page (inline SVG drawn with `plotters`, inline CSS, no
//! script, nothing fetched) that a reader opens from disk or a CI artifact. Over time: pending
//! pods, nodes by capacity type, $/hour, and API and cloud calls per second, each with the
//! scenario's fault windows as bands (one colour per fault kind, its name in the band) and
//! controller kills and restarts as labelled vertical lines, so cause and effect line up;
//! then the pending → bound histogram and the expectations table. Every plot shares the
//! run's time axis (0 to the last sample) so the bands sit at the same x in each. Colours are
//! Okabe and Ito's colour-blind-safe set; legends are HTML under each plot, off the data;
//! counts are ticked in whole numbers.

use std::fmt::Write as _;

use plotters::prelude::*;

use super::{FaultWindow, Report, Sample};

const WIDTH: u32 = 960;
const HEIGHT: u32 = 300;

/// Fault bands are drawn translucent under the lines, and again as a strip of their own
/// (its lane) along the top, where overlapping faults stay apart.
const FAULT_OPACITY: f64 = 0.12;
const LANE_OPACITY: f64 = 0.75;
/// A lane's height, as a fraction of the plot's.
const LANE_HEIGHT: f64 = 0.07;

/// Okabe and Ito's colour-blind-safe palette: the lines' colours.
const VERMILLION: RGBColor = RGBColor(0xd5, 0x5e, 0x00);
const BLUE: RGBColor = RGBColor(0x00, 0x72, 0xb2);
const ORANGE: RGBColor = RGBColor(0xe6, 0x9f, 0x00);
const REDDISH_PURPLE: RGBColor = RGBColor(0xcc, 0x79, 0xa7);
const BLUISH_GREEN: RGBColor = RGBColor(0x00, 0x9e, 0x73);
const SKY_BLUE: RGBColor = RGBColor(0x56, 0xb4, 0xe9);
const YELLOW: RGBColor = RGBColor(0xf0, 0xe4, 0x42);
const GREY: RGBColor = RGBColor(0x99, 0x99, 0x99);

const PENDING: RGBColor = VERMILLION;
const ON_DEMAND: RGBColor = BLUE;
const SPOT: RGBColor = ORANGE;
const COST: RGBColor = REDDISH_PURPLE;
const API: RGBColor = BLACK;
const CLOUD: RGBColor = BLUISH_GREEN;
const HISTOGRAM: RGBColor = SKY_BLUE;

/// Fault kinds take these in the order they first appear (the lines' colours but black).
const FAULT_COLORS: [RGBColor; 7] = [
    SKY_BLUE,
    YELLOW,
    REDDISH_PURPLE,
    BLUISH_GREEN,
    ORANGE,
    VERMILLION,
    GREY,
];

/// Controller kills and restarts.
const MARK: RGBColor = BLACK;

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

/// What a plot's y axis counts: whole things (ticked in whole numbers) or an amount.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scale {
    Count,
    Amount,
}

/// The whole page.
pub fn render(report: &Report) -> Result<String, PlotError> {
    let kinds = fault_kinds(report);
    let pending = [Line::of("pending", PENDING, |s| s.pods_pending as f64)];
    let nodes = [
        Line::of("on-demand", ON_DEMAND, |s| s.nodes_on_demand as f64),
        Line::of("spot", SPOT, |s| s.nodes_spot as f64),
    ];
    let cost = [Line::of("$/hour", COST, |s| s.hourly_cost)];
    let calls = [
        Line::rate("API server requests/s", API, |s| s.api_requests),
        Line::rate("EC2 calls/s", CLOUD, |s| s.cloud_calls),
    ];
    let time_plots: [(&'static str, &str, Scale, &[Line]); 4] = [
        ("pending pods", "pods", Scale::Count, &pending),
        ("nodes by capacity type", "nodes", Scale::Count, &nodes),
        (
            "cost of the running instances",
            "$/hour",
            Scale::Amount,
            &cost,
        ),
        ("API and cloud calls", "calls/s", Scale::Amount, &calls),
    ];
    let mut page = String::new();
    head(&mut page, report);
    for (title, unit, scale, lines) in time_plots {
        let svg = time_plot(title, unit, scale, report, &kinds, lines)?;
        let legend = legend(lines, &kinds, !report.marks.is_empty());
        let _ = writeln!(page, "<figure>{svg}{legend}</figure>");
    }
    let svg = histogram(&report.pending_to_bound_seconds)?;
    let _ = writeln!(page, "<figure>{svg}</figure>");
    fault_list(&mut page, report);
    expectations(&mut page, report);
    page.push_str("</body>\n</html>\n");
    Ok(page)
}

/// The kind of a fault: the first word of its label (`ice`, `api-errors`, ...).
fn kind_of(label: &str) -> &str {
    label.split_whitespace().next().unwrap_or(label)
}

/// The run's fault kinds in the order they first appear, each with its band's colour.
fn fault_kinds(report: &Report) -> Vec<(&str, RGBColor)> {
    let mut kinds: Vec<&str> = Vec::new();
    for window in &report.fault_windows {
        let kind = kind_of(&window.label);
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    kinds
        .into_iter()
        .enumerate()
        .map(|(i, kind)| (kind, FAULT_COLORS[i % FAULT_COLORS.len()]))
        .collect()
}

fn css(color: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", color.0, color.1, color.2)
}

/// A plot's key, under it: its lines, the fault kinds shaded and the controller marks.
fn legend(lines: &[Line], kinds: &[(&str, RGBColor)], marks: bool) -> String {
    let mut out = String::from("<figcaption class=\"legend\">");
    for line in lines {
        let _ = write!(
            out,
            "<span><i style=\"background:{}\"></i>{}</span>",
            css(line.color),
            escape(line.label)
        );
    }
    for (kind, color) in kinds {
        let _ = write!(
            out,
            "<span><i class=\"band\" style=\"background:{}\"></i>fault: {}</span>",
            css(*color),
            escape(kind)
        );
    }
    if marks {
        out.push_str("<span><i class=\"mark\"></i>controller killed or restarted</span>");
    }
    out.push_str("</figcaption>");
    out
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
         .fault {{ background: rgba(86, 180, 233, 0.25); padding: 0 0.3em; }}\n\
         .legend span {{ margin-right: 1.4em; white-space: nowrap; }}\n\
         .legend i {{ display: inline-block; width: 1.6em; height: 0.3em; \
         vertical-align: middle; margin-right: 0.4em; }}\n\
         .legend i.band {{ height: 0.9em; opacity: 0.45; }}\n\
         .legend i.mark {{ width: 0; height: 1em; border-left: 2px dashed #000; }}\n\
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

/// The top of a y axis showing values up to `highest`: a tenth of headroom, and for counts
/// a whole number with whole-number ticks (at most 10 steps).
fn y_axis(highest: f64, scale: Scale) -> (f64, usize) {
    let top = if highest > 0.0 { highest * 1.1 } else { 1.0 };
    match scale {
        Scale::Amount => (top, 10),
        Scale::Count => {
            let top = top.ceil().max(1.0);
            let step = (top / 10.0).ceil().max(1.0);
            let top = (top / step).ceil() * step;
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a small positive whole number of steps"
            )]
            let labels = (top / step) as usize + 1;
            (top, labels)
        }
    }
}

/// Each fault window's lane: the lowest not taken by a window still open when it starts.
fn fault_lanes(windows: &[FaultWindow], end: f64) -> Vec<usize> {
    let mut open: Vec<(usize, f64)> = Vec::new();
    windows
        .iter()
        .map(|w| {
            open.retain(|(_, until)| *until > w.from_seconds);
            let lane = (0..)
                .find(|l| open.iter().all(|(taken, _)| taken != l))
                .unwrap_or(0);
            open.push((lane, w.to_seconds.unwrap_or(end)));
            lane
        })
        .collect()
}

/// A plot of `lines` over the run, with the fault windows as bands coloured by kind and
/// named in the band, and the controller marks as dashed vertical lines.
fn time_plot(
    title: &'static str,
    unit: &str,
    scale: Scale,
    report: &Report,
    kinds: &[(&str, RGBColor)],
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
    let lanes = fault_lanes(&report.fault_windows, end);
    let lane_count = lanes.iter().max().map_or(0, |l| l + 1);
    let highest = points.iter().flatten().map(|(_, y)| *y).fold(0.0, f64::max);
    // Room above the data for the lanes.
    let (top, y_labels) = y_axis(highest * (1.0 + LANE_HEIGHT * lane_count as f64), scale);
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
        let mut mesh = chart.configure_mesh();
        mesh.x_desc("seconds since the start")
            .y_desc(unit)
            .y_labels(y_labels)
            .light_line_style(WHITE.mix(0.0));
        if end >= 10.0 {
            mesh.x_label_formatter(&|v| format!("{v:.0}"));
        }
        if scale == Scale::Count {
            mesh.y_label_formatter(&|v| format!("{v:.0}"));
        }
        mesh.draw().map_err(&fail)?;
        let color_of = |label: &str| {
            kinds
                .iter()
                .find(|(kind, _)| *kind == kind_of(label))
                .map_or(GREY, |(_, color)| *color)
        };
        for (w, lane) in report.fault_windows.iter().zip(&lanes) {
            let to = w.to_seconds.unwrap_or(end).min(end);
            let from = w.from_seconds.min(to);
            let color = color_of(&w.label);
            let lane_top = top * (1.0 - LANE_HEIGHT * *lane as f64);
            let lane_bottom = top * (1.0 - LANE_HEIGHT * (*lane as f64 + 1.0));
            chart
                .draw_series([
                    Rectangle::new([(from, 0.0), (to, top)], color.mix(FAULT_OPACITY).filled()),
                    Rectangle::new(
                        [(from, lane_bottom), (to, lane_top)],
                        color.mix(LANE_OPACITY).filled(),
                    ),
                ])
                .map_err(&fail)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    kind_of(&w.label).to_owned(),
                    (from, lane_top),
                    ("sans-serif", 11).into_font().color(&BLACK),
                )))
                .map_err(&fail)?;
        }
        for mark in &report.marks {
            chart
                .draw_series(DashedLineSeries::new(
                    [(mark.at_seconds, 0.0), (mark.at_seconds, top)],
                    5,
                    4,
                    MARK.stroke_width(1),
                ))
                .map_err(&fail)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    mark.label.clone(),
                    (mark.at_seconds, top * 0.99),
                    ("sans-serif", 11).into_font().color(&MARK),
                )))
                .map_err(&fail)?;
        }
        for (line, points) in lines.iter().zip(points) {
            chart
                .draw_series(LineSeries::new(points, line.color.stroke_width(2)))
                .map_err(&fail)?;
        }
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
    let tallest = counts.iter().copied().max().unwrap_or(0);
    let (top, y_labels) = y_axis(tallest as f64, Scale::Count);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(&fail)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(TITLE, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..width * HISTOGRAM_BINS as f64, 0.0..top)
            .map_err(&fail)?;
        chart
            .configure_mesh()
            .x_desc("seconds from creation to binding")
            .y_desc("pods")
            .y_labels(y_labels)
            .y_label_formatter(&|v| format!("{v:.0}"))
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
    use super::super::{ExpectationResult, FaultWindow, Mark, Percentiles};
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

    /// The (x, width) of every rect filled with `color`, in document order.
    fn rects_of(svg: &str, color: RGBColor) -> Vec<(f64, f64)> {
        let fill = format!("fill=\"#{:02X}{:02X}{:02X}\"", color.0, color.1, color.2);
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

    fn window(label: &str, from: f64, to: Option<f64>) -> FaultWindow {
        FaultWindow {
            label: label.into(),
            from_seconds: from,
            to_seconds: to,
        }
    }

    fn pending_plot(report: &Report) -> String {
        time_plot(
            "pending",
            "pods",
            Scale::Count,
            report,
            &fault_kinds(report),
            &[Line::of("pending", PENDING, |s| s.pods_pending as f64)],
        )
        .expect("drawn")
    }

    #[test]
    fn fault_windows_are_bands_across_their_time_range_coloured_by_kind_and_named() {
        let report = Report {
            series: series(100),
            fault_windows: vec![
                window("ice c6a.*:us-east-1a:spot", 10.0, Some(20.0)),
                window("api-errors 5% 500", 50.0, None),
                window("ice m5.*:us-east-1b:spot", 15.0, Some(30.0)),
            ],
            ..Report::default()
        };
        let svg = pending_plot(&report);
        let ice = rects_of(&svg, FAULT_COLORS[0]);
        let api = rects_of(&svg, FAULT_COLORS[1]);
        // A band and a lane strip per window, in the window's kind's colour.
        assert_eq!((ice.len(), api.len()), (4, 2), "one colour per kind: {svg}");
        let ((x1, w1), (x2, w2)) = (ice[0], api[0]);
        // 10 s wide from 10 s, and 50 s wide from 50 s (still active: to the end at 100 s).
        assert!((w2 / w1 - 5.0).abs() < 0.1, "{ice:?} {api:?}");
        assert!(((x2 - x1) / w1 - 4.0).abs() < 0.1, "{ice:?} {api:?}");
        // The plot's x axis spans the whole run: 100 s is twice the second window's width.
        let pixels_per_second = w1 / 10.0;
        assert!((x1 - 10.0 * pixels_per_second - (x2 - 50.0 * pixels_per_second)).abs() <= 1.0);
        // Each band says its kind; the page's legend names each kind once.
        assert_eq!(svg.matches("\nice\n</text>").count(), 2, "{svg}");
        assert_eq!(svg.matches("\napi-errors\n</text>").count(), 1, "{svg}");
        let page = render(&report).expect("rendered");
        assert_eq!(
            page.matches("fault: ice</span>").count(),
            4,
            "once per time plot"
        );
    }

    #[test]
    fn overlapping_faults_take_lanes_of_their_own_and_free_them_when_they_end() {
        let lanes = fault_lanes(
            &[
                window("api-errors", 5.0, Some(25.0)),
                window("watch-drop", 5.3, None),
                window("api-latency", 5.3, None),
                window("api-errors", 26.0, None),
            ],
            30.0,
        );
        assert_eq!(lanes, [0, 1, 2, 0]);
    }

    #[test]
    fn kills_and_restarts_are_labelled_vertical_lines() {
        let report = Report {
            series: series(100),
            marks: vec![Mark {
                label: "kill kerf-0".into(),
                at_seconds: 40.0,
            }],
            ..Report::default()
        };
        let svg = pending_plot(&report);
        assert!(svg.contains("\nkill kerf-0\n</text>"), "{svg}");
        // Dashes: short vertical black segments, all at one x past the y axis.
        let dashes: Vec<f64> = svg
            .split("<polyline")
            .skip(1)
            .filter(|p| p.contains("stroke=\"#000000\""))
            .filter_map(|p| {
                let points = p.split("points=\"").nth(1)?.split('"').next()?;
                let xy: Vec<(f64, f64)> = points
                    .split_whitespace()
                    .filter_map(|xy| {
                        let (x, y) = xy.split_once(',')?;
                        Some((x.parse().ok()?, y.parse().ok()?))
                    })
                    .collect();
                // Inside the plot area: the x axis' ticks hang below it.
                let inside = xy.iter().any(|(_, y)| *y < f64::from(HEIGHT) - 60.0);
                (xy.len() == 2 && xy[0].0 == xy[1].0 && xy[0].0 > 100.0 && inside)
                    .then_some(xy[0].0)
            })
            .collect();
        assert!(dashes.len() >= 3, "a dashed line: {dashes:?}");
        assert!(dashes.iter().all(|x| *x == dashes[0]), "{dashes:?}");
        let page = render(&report).expect("rendered");
        assert!(page.contains("controller killed or restarted"));
    }

    #[test]
    fn counts_are_ticked_in_whole_numbers() {
        for highest in [0.0, 1.0, 3.0, 7.0, 23.0, 20_000.0] {
            let (top, labels) = y_axis(highest, Scale::Count);
            assert!(top >= highest && top.fract() == 0.0, "{highest}: {top}");
            let step = top / (labels - 1) as f64;
            assert!(
                step.fract() == 0.0 && step >= 1.0,
                "{highest}: {top} in {labels}"
            );
            assert!(labels <= 11, "{highest}: {labels}");
        }
        let svg = pending_plot(&Report {
            series: series(3),
            ..Report::default()
        });
        assert!(
            !svg.contains(".0<") && !svg.contains(".5<"),
            "whole ticks: {svg}"
        );
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
