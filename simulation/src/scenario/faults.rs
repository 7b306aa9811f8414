//! A scenario's faults: each is switched on in the simulated EC2 or the API emulator, shown
//! as active through [`ActiveFaults`] (the recorder copies it into every sample) and kept as
//! a [`FaultWindow`] for the report. A fault with `for` ends by itself: a background task
//! sleeps that long, switches it off and closes its window, while the steps go on. Without
//! `for` it lasts until the run ends. A spot interruption is one event; its window is the
//! two-minute notice, after which EC2 reclaims the instances. ICE faults may overlap: a pool
//! refused by two of them has capacity again only when both ended. Other faults of one kind
//! replace each other (the emulator and EC2 hold one error rate, one latency, one
//! throttling fraction), and the first to end switches that kind off. A `lease-delay` hits
//! the replica the runner names (the leader at the time), by the name its requests carry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kerf_loadtest::apiserver::{Faults, InjectedError};
use kerf_loadtest::ec2::{OfferingKey, SimulatedEc2};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::super::interrupt;
use super::super::report::{ActiveFaults, FaultWindow};
use super::super::world::World;
use super::format::Fault;

/// Seconds `Retry-After` asks for on an injected 429: short, so a retrying client is
/// slowed, not stalled.
const RETRY_AFTER_SECS: u64 = 1;

/// The faults of one run.
pub struct Injector {
    started: Instant,
    active: ActiveFaults,
    windows: Arc<Mutex<Vec<FaultWindow>>>,
    timers: Vec<JoinHandle<()>>,
    /// Faults without `for`, undone when the run ends.
    open_ended: Vec<Undo>,
    ice_holds: IceHolds,
    capacity: CapacityFaults,
}

/// Whether a capacity fault (ICE, a spot interruption) is under way or ended recently.
/// Shared with the observer: the controller's "cannot place" about a pod may be such a
/// fault's doing (the offerings it refused stay marked unavailable for a while after it
/// ends), so it is trusted only once those marks have had time to expire.
#[derive(Clone, Default)]
pub struct CapacityFaults(Arc<Mutex<CapacityState>>);

#[derive(Default)]
struct CapacityState {
    active: usize,
    last_ended: Option<Instant>,
}

impl CapacityFaults {
    fn begin(&self) {
        lock(&self.0).active += 1;
    }

    fn end(&self) {
        let mut state = lock(&self.0);
        state.active = state.active.saturating_sub(1);
        state.last_ended = Some(Instant::now());
    }

    /// Whether one is under way or ended less than `grace` ago.
    pub fn recent(&self, grace: Duration) -> bool {
        let state = lock(&self.0);
        state.active > 0 || state.last_ended.is_some_and(|t| t.elapsed() < grace)
    }
}

/// How many active ICE faults refuse each pool, so overlapping ones end independently.
#[derive(Clone, Default)]
struct IceHolds(Arc<Mutex<HashMap<OfferingKey, usize>>>);

impl IceHolds {
    fn refuse(&self, ec2: &SimulatedEc2, pools: &[OfferingKey]) {
        let mut holds = lock(&self.0);
        for pool in pools {
            *holds.entry(pool.clone()).or_default() += 1;
            ec2.set_insufficient_capacity(pool.clone(), true);
        }
    }

    /// Gives back capacity to the pools no other ICE fault refuses.
    fn release(&self, ec2: &SimulatedEc2, pools: &[OfferingKey]) {
        let mut holds = lock(&self.0);
        for pool in pools {
            let left = holds.get_mut(pool).map(|n| {
                *n -= 1;
                *n
            });
            if left == Some(0) {
                holds.remove(pool);
                ec2.set_insufficient_capacity(pool.clone(), false);
            }
        }
    }
}

/// How to switch one fault off again.
enum Undo {
    Ice(SimulatedEc2, IceHolds, Vec<OfferingKey>),
    Throttle(SimulatedEc2),
    Errors(Faults),
    Latency(Faults),
    WatchDrops(JoinHandle<()>),
    LeaseDelay(Faults, String),
    Nothing,
}

impl Undo {
    fn run(self) {
        match self {
            Self::Ice(ec2, holds, pools) => holds.release(&ec2, &pools),
            Self::Throttle(ec2) => {
                let _zero_is_in_range = ec2.set_throttling(0.0);
            }
            Self::Errors(faults) => faults.stop_failing(),
            Self::Latency(faults) => faults.set_latency(Duration::ZERO),
            Self::WatchDrops(task) => task.abort(),
            Self::LeaseDelay(faults, replica) => faults.undelay_leases(&replica),
            Self::Nothing => {}
        }
    }
}

impl Injector {
    pub fn new(started: Instant, active: ActiveFaults) -> Self {
        Self {
            started,
            active,
            windows: Arc::default(),
            timers: Vec::new(),
            open_ended: Vec::new(),
            ice_holds: IceHolds::default(),
            capacity: CapacityFaults::default(),
        }
    }

    /// The capacity faults of this run, as they come and go.
    pub fn capacity(&self) -> CapacityFaults {
        self.capacity.clone()
    }

    /// Switches `fault` on (`pools`: an ice fault's, resolved when checking; `replica`: the
    /// identity a `lease-delay` hits, chosen by the runner); returns its label.
    pub fn inject(
        &mut self,
        world: &World,
        fault: &Fault,
        pools: &[OfferingKey],
        replica: Option<&str>,
    ) -> String {
        let ec2 = world.provider.ec2().clone();
        let faults = world.server.faults().clone();
        let mut label = label(fault);
        let (undo, lasting) = match fault {
            Fault::Ice { lasting, .. } => {
                self.ice_holds.refuse(&ec2, pools);
                (
                    Undo::Ice(ec2, self.ice_holds.clone(), pools.to_vec()),
                    lasting.as_ref().map(kerf::api::duration::Duration::as_std),
                )
            }
            Fault::Ec2Throttle { rate, lasting } => {
                let _checked_in_range = ec2.set_throttling(*rate);
                (
                    Undo::Throttle(ec2),
                    lasting.as_ref().map(kerf::api::duration::Duration::as_std),
                )
            }
            Fault::ApiErrors {
                rate,
                status,
                lasting,
            } => {
                let error = if *status == Some(429) {
                    InjectedError::TooManyRequests {
                        retry_after_secs: RETRY_AFTER_SECS,
                    }
                } else {
                    InjectedError::ServerError
                };
                faults.fail_requests(*rate, error);
                (
                    Undo::Errors(faults),
                    lasting.as_ref().map(kerf::api::duration::Duration::as_std),
                )
            }
            Fault::WatchDrop { every, lasting } => {
                let every = every.as_std();
                let task = tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(every).await;
                        faults.compact();
                        faults.drop_watches();
                    }
                });
                (
                    Undo::WatchDrops(task),
                    lasting.as_ref().map(kerf::api::duration::Duration::as_std),
                )
            }
            Fault::ApiLatency { latency, lasting } => {
                faults.set_latency(latency.as_std());
                (
                    Undo::Latency(faults),
                    lasting.as_ref().map(kerf::api::duration::Duration::as_std),
                )
            }
            Fault::SpotInterruption { fraction } => {
                let nodes = world
                    .cluster()
                    .list("v1", "nodes", None, "")
                    .unwrap_or_default();
                let (_, chosen) = interrupt::choose(&ec2, &nodes, *fraction);
                for id in chosen.keys() {
                    if let Err(error) = ec2.interrupt_spot(id) {
                        eprintln!("kerf simulate: interrupting {id}: {error}");
                    }
                }
                let notice = ec2.config().interruption_notice;
                (Undo::Nothing, Some(notice))
            }
            Fault::LeaseDelay {
                latency, lasting, ..
            } => {
                let lasting = lasting.as_ref().map(kerf::api::duration::Duration::as_std);
                match replica {
                    Some(replica) => {
                        faults.delay_leases(replica, latency.as_std());
                        label = format!("{label} {replica}");
                        (Undo::LeaseDelay(faults, replica.to_owned()), lasting)
                    }
                    None => {
                        label = format!("{label}: no replica to delay");
                        (Undo::Nothing, Some(Duration::ZERO))
                    }
                }
            }
            // Armed in the leader by the runner ([`super::steps`]); one event, like a spot
            // interruption, whose panics come as the actor takes its next messages.
            Fault::ActorPanic { .. } => (Undo::Nothing, Some(Duration::ZERO)),
            Fault::ReservationEnd { id } => {
                let ended = ec2.end_capacity_reservation(id);
                label = format!("{label}: {} instances", ended.len());
                (Undo::Nothing, Some(Duration::ZERO))
            }
            Fault::ReservationInterruption { id } => match ec2.interrupt_reservation(id) {
                Ok(interrupted) => {
                    label = format!("{label}: {} instances", interrupted.len());
                    (Undo::Nothing, Some(ec2.config().interruption_notice))
                }
                Err(error) => {
                    eprintln!("kerf simulate: interrupting reservation {id}: {error}");
                    label = format!("{label}: {error}");
                    (Undo::Nothing, Some(Duration::ZERO))
                }
            },
        };
        let capacity = matches!(
            fault,
            Fault::Ice { .. }
                | Fault::SpotInterruption { .. }
                | Fault::ReservationEnd { .. }
                | Fault::ReservationInterruption { .. }
        );
        self.open(&label, lasting, undo, capacity);
        label
    }

    /// Records the window and, for a bounded fault, arms the timer that ends it.
    fn open(&mut self, label: &str, lasting: Option<Duration>, undo: Undo, capacity: bool) {
        self.active.start(label);
        let capacity = capacity.then(|| {
            self.capacity.begin();
            self.capacity.clone()
        });
        let index = {
            let mut windows = lock(&self.windows);
            windows.push(FaultWindow {
                label: label.to_owned(),
                from_seconds: self.started.elapsed().as_secs_f64(),
                to_seconds: None,
            });
            windows.len() - 1
        };
        let Some(lasting) = lasting else {
            self.open_ended.push(undo);
            return;
        };
        let active = self.active.clone();
        let windows = Arc::clone(&self.windows);
        let started = self.started;
        let label = label.to_owned();
        self.timers.push(tokio::spawn(async move {
            tokio::time::sleep(lasting).await;
            undo.run();
            active.end(&label);
            if let Some(capacity) = capacity {
                capacity.end();
            }
            lock(&windows)[index].to_seconds = Some(started.elapsed().as_secs_f64());
        }));
    }

    /// The windows so far; faults still active have no end.
    pub fn windows(&self) -> Vec<FaultWindow> {
        lock(&self.windows).clone()
    }

    /// Stops the timers and switches every fault off.
    pub fn stop(self) {
        for timer in self.timers {
            timer.abort();
        }
        for undo in self.open_ended {
            undo.run();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How a fault is named in progress lines, samples and the report.
fn label(fault: &Fault) -> String {
    let pct = |rate: f64| format!("{:.0}%", rate * 100.0);
    match fault {
        Fault::Ice { offerings, .. } => format!("ice {}", offerings.join(" ")),
        Fault::Ec2Throttle { rate, .. } => format!("ec2-throttle {}", pct(*rate)),
        Fault::ApiErrors { rate, status, .. } => {
            format!("api-errors {} {}", pct(*rate), status.unwrap_or(500))
        }
        Fault::WatchDrop { every, .. } => format!("watch-drop every {every}"),
        Fault::ApiLatency { latency, .. } => format!("api-latency {latency}"),
        Fault::SpotInterruption { fraction } => format!("spot-interruption {}", pct(*fraction)),
        Fault::LeaseDelay { latency, .. } => format!("lease-delay {latency}"),
        Fault::ActorPanic { actor, count } => format!("actor-panic {actor} x{count}"),
        Fault::ReservationEnd { id } => format!("reservation-end {id}"),
        Fault::ReservationInterruption { id } => format!("reservation-interruption {id}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_loadtest::ec2::{CapacityType, Ec2Config, PricedOffering};

    #[test]
    fn a_capacity_fault_counts_while_under_way_and_for_its_grace_after() {
        let capacity = CapacityFaults::default();
        let (none, long) = (Duration::ZERO, Duration::from_secs(3600));
        assert!(!capacity.recent(long), "none yet");
        capacity.begin();
        capacity.begin();
        capacity.end();
        assert!(capacity.recent(none), "one is still under way");
        capacity.end();
        assert!(capacity.recent(long), "ended within the grace");
        assert!(!capacity.recent(none), "ended, and no grace");
    }

    #[test]
    fn overlapping_ice_faults_give_a_pool_back_only_when_both_ended() {
        let pool = |zone: &str| OfferingKey::new("m5.large", zone, CapacityType::Spot);
        let (a, b) = (pool("us-east-1a"), pool("us-east-1b"));
        let ec2 = SimulatedEc2::new(
            Ec2Config::instant("us-east-1"),
            [&a, &b].map(|key| PricedOffering {
                key: key.clone(),
                price: 0.1,
            }),
        );
        let holds = IceHolds::default();
        holds.refuse(&ec2, &[a.clone(), b.clone()]);
        holds.refuse(&ec2, std::slice::from_ref(&b));
        holds.release(&ec2, &[a.clone(), b.clone()]);
        assert_eq!(ec2.insufficient_capacity_pools(), std::slice::from_ref(&b));
        holds.release(&ec2, &[b]);
        assert!(ec2.insufficient_capacity_pools().is_empty());
    }
}
