//! The loop shared by the leader-only passes that run on a timer rather than on watch events
//! (garbage collection, the capacity-type relabelling): once cluster state has synced, a
//! pass runs every period while this replica leads, until shutdown. A pass still running
//! when the replica steps down is dropped, since its writes are the leader's to make; an
//! error is logged, at info when the leader's fence refused it and as a warning otherwise.
//! Each pass recomputes from cluster state and the cloud, so the next one repairs what a
//! dropped or failed one left.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::state::ClusterState;

/// A timed pass: its upstream controller name (reconcile metrics) and what logs call it.
#[derive(Clone, Copy, Debug)]
pub struct Pass {
    pub controller: &'static str,
    pub what: &'static str,
}

/// Runs `pass` while `leader` holds, waiting `period(completed)` after each turn (`completed`
/// counts the passes that succeeded so far), from the moment `state` has synced until
/// `shutdown`.
pub async fn run<F, Fut, E>(
    pass: Pass,
    state: Arc<ClusterState>,
    leader: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
    period: impl Fn(u32) -> Duration,
    mut work: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::error::Error + 'static,
{
    tokio::select! {
        () = state.wait_synced() => {}
        _ = shutdown.wait_for(|s| *s) => return,
    }
    let mut completed = 0u32;
    loop {
        if *leader.borrow() {
            let turn = crate::metrics::reconcile(pass.controller, work());
            let turn = tokio::select! {
                result = turn => Some(result),
                () = crate::leader::stepped_down(leader.clone()) => None,
            };
            match turn {
                None => tracing::info!(pass = pass.what, "pass cancelled: stepped down"),
                Some(Ok(())) => completed = completed.saturating_add(1),
                Some(Err(error)) if crate::leader::is_fenced(&error) => {
                    tracing::info!(pass = pass.what, %error, "pass fenced: not leading");
                }
                Some(Err(error)) => tracing::warn!(pass = pass.what, %error, "pass failed"),
            }
        }
        tokio::select! {
            () = tokio::time::sleep(period(completed)) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    const PASS: Pass = Pass {
        controller: "test.periodic",
        what: "test pass",
    };

    #[derive(Debug, thiserror::Error)]
    #[error("refused")]
    struct Refused;

    /// A synced state, leadership, shutdown, and the started-pass counter.
    fn setup() -> (
        Arc<ClusterState>,
        watch::Sender<bool>,
        watch::Sender<bool>,
        Arc<AtomicU32>,
    ) {
        let (state, mut writers) = ClusterState::new();
        writers.mark_all_synced();
        (
            state,
            watch::channel(true).0,
            watch::channel(false).0,
            Arc::default(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn passes_run_only_while_leading_at_the_period_of_the_passes_completed() {
        let (state, leader, shutdown, started) = setup();
        let counted = Arc::clone(&started);
        let periods = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&periods);
        let task = tokio::spawn(run(
            PASS,
            state,
            leader.subscribe(),
            shutdown.subscribe(),
            move |completed| {
                seen.lock().expect("not poisoned").push(completed);
                if completed < 2 {
                    Duration::from_secs(1)
                } else {
                    Duration::from_secs(10)
                }
            },
            move || {
                let n = counted.fetch_add(1, Ordering::SeqCst);
                async move { if n == 1 { Err(Refused) } else { Ok(()) } }
            },
        ));
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        // Passes at 0 s, 1 s (failed, not counted) and 2 s.
        assert_eq!(started.load(Ordering::SeqCst), 3);
        tokio::time::sleep(Duration::from_secs(25)).await;
        // Then 12 s and 22 s: two completed passes slow the loop down.
        assert_eq!(started.load(Ordering::SeqCst), 5);
        leader.send_replace(false);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(
            started.load(Ordering::SeqCst),
            5,
            "no pass while not leading"
        );
        shutdown.send_replace(true);
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("stops at shutdown")
            .expect("no panic");
        let periods = periods.lock().expect("not poisoned");
        assert_eq!(periods[..4], [1, 1, 2, 3], "{periods:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_in_flight_at_step_down_is_dropped() {
        let (state, leader, shutdown, _) = setup();
        let (finished, mut finished_rx) = watch::channel(false);
        let finished = Arc::new(finished);
        let task = tokio::spawn(run(
            PASS,
            state,
            leader.subscribe(),
            shutdown.subscribe(),
            |_| Duration::from_secs(3600),
            move || {
                let finished = Arc::clone(&finished);
                async move {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    finished.send_replace(true);
                    Ok::<(), Refused>(())
                }
            },
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
        leader.send_replace(false);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!*finished_rx.borrow_and_update(), "the pass ran on");
        shutdown.send_replace(true);
        task.await.expect("no panic");
    }
}
