//! A one-shot hold on the next CreateFleet that launches: once its instances exist, the
//! call tells the holder which ones and waits for a release before answering. A test or a
//! scenario uses the gap to crash the controller between the launch and the NodeClaim
//! status write that would record it — the window a lost answer leaves open. Dropping the
//! [`LaunchHold`] releases the call, so a holder that gives up never wedges a launch.

use tokio::sync::oneshot;

/// The holder's side: learn the held launch, then let it answer.
#[derive(Debug)]
pub struct LaunchHold {
    launched: oneshot::Receiver<Vec<String>>,
    release: oneshot::Sender<()>,
}

/// The call's side, kept in the region's state until a launch takes it.
#[derive(Debug)]
pub(crate) struct HeldLaunch {
    launched: oneshot::Sender<Vec<String>>,
    release: oneshot::Receiver<()>,
}

/// A connected pair.
pub(crate) fn pair() -> (LaunchHold, HeldLaunch) {
    let (launched_tx, launched_rx) = oneshot::channel();
    let (release_tx, release_rx) = oneshot::channel();
    (
        LaunchHold {
            launched: launched_rx,
            release: release_tx,
        },
        HeldLaunch {
            launched: launched_tx,
            release: release_rx,
        },
    )
}

impl LaunchHold {
    /// The instance ids of the held launch, once one happened; `None` if the region was
    /// dropped first.
    pub async fn launched(&mut self) -> Option<Vec<String>> {
        (&mut self.launched).await.ok()
    }

    /// Lets the held call answer.
    pub fn release(self) {
        let _caller_may_be_gone = self.release.send(());
    }
}

impl HeldLaunch {
    /// Reports `instance_ids` and waits until the holder releases (or drops) the hold.
    pub(crate) async fn hold(self, instance_ids: Vec<String>) {
        if self.launched.send(instance_ids).is_ok() {
            let _released_or_dropped = self.release.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_call_waits_for_the_release_and_a_dropped_hold_lets_it_go() {
        let (mut hold, held) = pair();
        let call = tokio::spawn(held.hold(vec!["i-1".into()]));
        assert_eq!(hold.launched().await, Some(vec!["i-1".to_owned()]));
        tokio::task::yield_now().await;
        assert!(!call.is_finished(), "held until released");
        hold.release();
        call.await.expect("answers");

        let (hold, held) = pair();
        drop(hold);
        held.hold(vec!["i-2".into()]).await;
    }
}
