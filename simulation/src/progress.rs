//! Live progress on standard error: pods bound of the workload, NodeClaims launched and
//! ready of those created. Hidden when standard error is not a terminal or the summary is
//! JSON, so scripts and pipes see only the summary.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::observe::Counts;

pub struct Progress {
    multi: MultiProgress,
    pods: ProgressBar,
    launched: ProgressBar,
    ready: ProgressBar,
}

impl Progress {
    /// Bars for a workload of `pods` pods; drawn only when `visible` and stderr is a terminal.
    pub fn new(pods: usize, visible: bool) -> Self {
        let target = if visible && std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr_with_hz(10)
        } else {
            ProgressDrawTarget::hidden()
        };
        let multi = MultiProgress::with_draw_target(target);
        let style = ProgressStyle::with_template(
            "{prefix:>20} [{bar:40.cyan/blue}] {pos:>6}/{len:<6} {msg}",
        )
        .expect("the progress template is valid")
        .progress_chars("=> ");
        let bar = |prefix: &'static str, len: usize| {
            let bar = multi.add(ProgressBar::new(len as u64));
            bar.set_style(style.clone());
            bar.set_prefix(prefix);
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        };
        Self {
            pods: bar("pods bound", pods),
            launched: bar("NodeClaims launched", 0),
            ready: bar("NodeClaims ready", 0),
            multi,
        }
    }

    pub fn update(&self, counts: &Counts, expected_pods: usize, unschedulable: usize) {
        self.pods.set_length(expected_pods.max(counts.pods) as u64);
        self.pods.set_position(counts.bound as u64);
        let pending = counts.pods.saturating_sub(counts.bound);
        self.pods.set_message(if unschedulable > 0 {
            format!("{pending} pending, {unschedulable} unschedulable")
        } else {
            format!("{pending} pending")
        });
        let live = counts.claims_created.saturating_sub(counts.claims_deleted);
        for (bar, position) in [
            (&self.launched, counts.claims_launched),
            (&self.ready, counts.claims_ready),
        ] {
            bar.set_length(counts.claims_created as u64);
            bar.set_position(position as u64);
        }
        self.launched
            .set_message(format!("{} created, {live} live", counts.claims_created));
    }

    /// Removes the bars before the summary is printed.
    pub fn finish(self) {
        for bar in [&self.pods, &self.launched, &self.ready] {
            bar.finish_and_clear();
        }
        let _ = self.multi.clear();
    }
}
