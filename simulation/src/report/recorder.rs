//! The recorder: one task beside the run that samples the simulated world once a second
//! into [`Sample`]s and times every workload pod from creation to binding. It reads only
//! what is already kept in this process — the emulator's stores and change history (through
//! its own [`Tally`]), the simulated EC2's instances and call counts, the emulator's
//! request count — never through the API, so sampling adds no requests to the figures it
//! records and never waits on the controller. The task owns its state; [`Recorder::finish`]
//! stops it and takes the recording.
//!
//! Controller memory is the controller's live heap at the sample (bytes its threads allocated
//! and had not freed, from the accounting allocator, see [`memory`]); the whole process's
//! peak is in the summary beside the controller's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kerf::api::condition::types;
use kerf_loadtest::apiserver::resources::GroupResource;
use kerf_loadtest::apiserver::store::{TypeStore, read};
use kerf_loadtest::apiserver::{Cluster, RequestCount};
use kerf_loadtest::ec2::{CapacityType, SimulatedEc2};
use kerf_loadtest::scheduler::SchedulerStats;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::{ActiveFaults, Sample, SchedulerSample};
use crate::figures;
use crate::memory;
use crate::observe::{NotServed, Tally};
use crate::world::World;

/// How often a sample is taken (the report's time resolution).
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Longest a pod's binding goes unseen when nothing else wakes the recorder; bounds the
/// error of the pending → bound times the way the run's own loop does.
const TALLY_TICK: Duration = Duration::from_millis(100);

/// What the recorder reads.
#[derive(Clone)]
pub struct Sources {
    pub cluster: Cluster,
    pub ec2: SimulatedEc2,
    pub requests: RequestCount,
    pub scheduler: Option<Arc<SchedulerStats>>,
}

impl Sources {
    pub fn of(world: &World) -> Self {
        Self {
            cluster: world.cluster(),
            ec2: world.provider.ec2().clone(),
            requests: world.server.requests(),
            scheduler: Some(world.scheduler_stats()),
        }
    }
}

/// What a finished recorder hands back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recording {
    /// One sample a second from the start, and one at the finish.
    pub series: Vec<Sample>,
    /// Every bound workload pod's creation → binding time, in seconds.
    pub pending_to_bound_seconds: Vec<f64>,
}

/// The running recorder.
pub struct Recorder {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Recording>,
}

impl Recorder {
    /// Starts sampling `world` now; `origin` is the run's start, which every sample's
    /// `at_seconds` (and a scenario's fault windows) count from. `faults` is read at each
    /// sample.
    pub fn start(world: &World, faults: ActiveFaults, origin: Instant) -> Result<Self, NotServed> {
        Self::start_from(Sources::of(world), faults, origin)
    }

    /// [`Recorder::start`] on explicit sources.
    pub fn start_from(
        sources: Sources,
        faults: ActiveFaults,
        origin: Instant,
    ) -> Result<Self, NotServed> {
        let sampler = Sampler::new(sources, faults, origin)?;
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(kerf_heap::owned(
            kerf_heap::Owner::OBSERVERS,
            sampler.run(stopped),
        ));
        Ok(Self { stop, task })
    }

    /// Takes a last sample, stops the task and returns what it recorded.
    pub async fn finish(self) -> Recording {
        let _already_gone = self.stop.send(());
        match self.task.await {
            Ok(recording) => recording,
            Err(error) => {
                eprintln!("kerf simulate: the report's recorder failed: {error}");
                Recording::default()
            }
        }
    }
}

/// The recorder task's state.
struct Sampler {
    sources: Sources,
    faults: ActiveFaults,
    origin: Instant,
    tally: Tally,
    claims: Option<Arc<TypeStore>>,
    series: Vec<Sample>,
}

impl Sampler {
    fn new(sources: Sources, faults: ActiveFaults, origin: Instant) -> Result<Self, NotServed> {
        let tally = Tally::new(&sources.cluster)?;
        let claims = sources
            .cluster
            .registry()
            .store
            .get(&GroupResource::new("karpenter.sh", "nodeclaims"));
        Ok(Self {
            sources,
            faults,
            origin,
            tally,
            claims,
            series: Vec::new(),
        })
    }

    async fn run(mut self, mut stop: oneshot::Receiver<()>) -> Recording {
        let mut samples = tokio::time::interval(SAMPLE_EVERY);
        // On a busy machine a tick is often late: stay on the one-second grid rather than
        // let lateness add up and lose samples.
        samples.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let mut tally_tick = tokio::time::interval(TALLY_TICK);
        tally_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let sample_now = tokio::select! {
                _ = &mut stop => break,
                _ = samples.tick() => true,
                () = self.tally.changed() => false,
                _ = tally_tick.tick() => false,
            };
            if sample_now {
                self.sample();
            } else {
                self.tally.update(std::time::Instant::now());
            }
        }
        self.sample();
        Recording {
            pending_to_bound_seconds: self
                .tally
                .latencies()
                .iter()
                .map(Duration::as_secs_f64)
                .collect(),
            series: self.series,
        }
    }

    fn sample(&mut self) {
        self.tally.update(std::time::Instant::now());
        let counts = self.tally.counts();
        let instances = self.sources.ec2.instances();
        let live = instances.iter().filter(|i| i.state.is_live());
        let (spot, on_demand, reserved) = live.fold((0, 0, 0), |(spot, on_demand, reserved), i| {
            match (i.capacity_type, &i.capacity_reservation_id) {
                (CapacityType::Spot, _) => (spot + 1, on_demand, reserved),
                (CapacityType::OnDemand, Some(_)) => (spot, on_demand, reserved + 1),
                (CapacityType::OnDemand, None) => (spot, on_demand + 1, reserved),
            }
        });
        self.series.push(Sample {
            at_seconds: (self.origin.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
            pods_pending: (counts.pods - counts.bound) as u64,
            pods_bound: counts.bound as u64,
            nodes_on_demand: on_demand,
            nodes_spot: spot,
            nodes_reserved: reserved,
            nodeclaims_by_phase: self.claims.as_deref().map(by_phase).unwrap_or_default(),
            hourly_cost: figures::hourly_cost(&instances),
            controller_memory_bytes: Some(memory::controller_heap().live_bytes),
            api_requests: self.sources.requests.get(),
            cloud_calls: self.sources.ec2.api_calls().total_calls(),
            scheduler: self.sources.scheduler.as_deref().map(scheduler_sample),
            faults_active: self.faults.now(),
        });
    }
}

fn scheduler_sample(stats: &SchedulerStats) -> SchedulerSample {
    SchedulerSample {
        cycles: stats.cycles.load(Ordering::Relaxed),
        pods_tried: stats.tried.load(Ordering::Relaxed),
        pods_bound: stats.bound.load(Ordering::Relaxed),
        pods_marked_unschedulable: stats.marked_unschedulable.load(Ordering::Relaxed),
        longest_cycle_seconds: (stats.take_longest_cycle().as_secs_f64() * 1000.0).round() / 1000.0,
    }
}

/// The stored NodeClaims counted by phase.
fn by_phase(store: &TypeStore) -> BTreeMap<String, u64> {
    let state = read(&store.state);
    let mut phases = BTreeMap::new();
    for stored in state.objects.values() {
        let phase = phase(&stored.value(), stored.attrs.deleting);
        *phases.entry(phase.to_owned()).or_insert(0) += 1;
    }
    phases
}

/// A NodeClaim's furthest step: `Deleting` once its deletion started, else the last of
/// `Initialized`, `Registered`, `Launched` that is true, else `Launching`.
fn phase(claim: &Value, deleting: bool) -> &'static str {
    if deleting {
        return "Deleting";
    }
    let is_true = |name: &str| {
        claim["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == name && c["status"] == "True")
    };
    [
        (types::INITIALIZED, "Initialized"),
        (types::REGISTERED, "Registered"),
        (types::LAUNCHED, "Launched"),
    ]
    .into_iter()
    .find(|(condition, _)| is_true(condition))
    .map_or("Launching", |(_, phase)| phase)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_loadtest::apiserver::{ApiServer, ServerConfig};
    use kerf_loadtest::ec2::Ec2Config;
    use serde_json::json;

    fn condition(kind: &str) -> Value {
        json!({"type": kind, "status": "True"})
    }

    #[test]
    fn a_claim_is_in_the_furthest_phase_it_reached() {
        let claim = |conditions: Vec<Value>| json!({"status": {"conditions": conditions}});
        assert_eq!(phase(&claim(vec![]), false), "Launching");
        assert_eq!(
            phase(&claim(vec![condition("Launched")]), false),
            "Launched"
        );
        let registered = claim(vec![condition("Launched"), condition("Registered")]);
        assert_eq!(phase(&registered, false), "Registered");
        assert_eq!(phase(&registered, true), "Deleting");
        let unready = json!({"status": {"conditions": [{"type": "Launched", "status": "False"}]}});
        assert_eq!(phase(&unready, false), "Launching");
    }

    #[test]
    fn samples_each_second_with_pods_requests_and_faults() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let server = ApiServer::start(ServerConfig::default())
                .await
                .expect("emulator");
            let cluster = server.cluster();
            crate::world::install_crds(&cluster).expect("CRDs");
            let sources = Sources {
                cluster: cluster.clone(),
                ec2: SimulatedEc2::new(Ec2Config::instant("us-east-1"), []),
                requests: server.requests(),
                scheduler: None,
            };
            let faults = ActiveFaults::default();
            let recorder =
                Recorder::start_from(sources, faults.clone(), Instant::now()).expect("served");
            for name in ["a", "b", "c"] {
                cluster
                    .create(
                        "v1",
                        "pods",
                        json!({"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": name, "namespace": "default"},
                            "spec": {"containers": [{"name": "c", "image": "i"}]}}),
                    )
                    .expect("pod");
            }
            faults.start("api-errors");
            http_get(&server.url()).await;
            tokio::time::sleep(Duration::from_millis(2_300)).await;
            let recording = recorder.finish().await;
            let series = &recording.series;
            assert!(
                (3..=5).contains(&series.len()),
                "samples at 0, 1, 2 s and at the finish: {series:?}"
            );
            let last = series.last().expect("a sample");
            assert_eq!(last.pods_pending, 3);
            assert_eq!(last.pods_bound, 0);
            assert_eq!(last.faults_active, ["api-errors"]);
            assert!(last.api_requests >= 1, "the GET was counted");
            assert!(last.at_seconds >= 2.3);
            assert!(
                series.windows(2).all(|w| w[0].at_seconds < w[1].at_seconds),
                "in time order"
            );
            server.shutdown().await;
        });
    }

    /// One plain HTTP request to the emulator, so its request count moves.
    async fn http_get(url: &str) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let addr = url.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .expect("request");
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.expect("answer");
        assert!(answer.starts_with(b"HTTP/1.1 200"));
    }
}
