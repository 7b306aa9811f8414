//! Simulated EC2: an in-memory region that launches instances through the `CreateFleet`
//! request kerf sends to AWS, describes, tags and terminates them, and injects the failures
//! real EC2 produces under load — insufficient capacity per pool, throttling, spot
//! interruptions — under the control of tests and the load harness. Its interruptions reach
//! the controller as EventBridge JSON through an in-memory queue ([`MemoryQueue`],
//! [`forward_interruptions`]), as a real region's reach SQS. Every API call is
//! counted by operation for reports. [`SimulatedCloudProvider`] puts kerf's `CloudProvider`
//! trait on top of it, and the simulated kubelets follow its instances to register nodes.

mod error;
mod eventbridge;
mod faults;
mod fleet;
mod hold;
mod ids;
mod instance_status;
mod network;
mod nodeclass;
mod provider;
mod queue;
mod reservations;
mod types;

pub use error::{Ec2ConfigError, Ec2Error};
pub use eventbridge::{forward_interruptions, to_eventbridge};
pub use faults::{ApiCalls, CallCount, Ec2Write};
pub use hold::LaunchHold;
pub use ids::is_instance_id;
pub use network::{DISCOVERY_TAG, security_group_id, subnet_id};
pub use provider::{
    MAX_INSTANCE_TYPES, SimulatedCloudProvider, SimulatedCloudProviderConfig, catalog_offerings,
    instance_type_requirements, resource_list, tags,
};
pub use queue::{DEFAULT_VISIBILITY_TIMEOUT, MemoryQueue};
pub use reservations::{
    CapacityReservation, RESERVATION_CAPACITY_EXCEEDED, ReservationType, ReservationView,
};
pub use types::{
    CapacityType, CreateFleetOutput, CreateFleetRequest, DescribeInstancesRequest, Ec2Event,
    Filter, FleetError, FleetInstance, FleetOverride, INSUFFICIENT_INSTANCE_CAPACITY, Instance,
    InstanceState, InstanceStateChange, LaunchTemplateConfig, OfferingKey, PricedOffering,
    SpotInterruption, UNFULFILLABLE_CAPACITY_CODES, UNSUPPORTED,
};

use faults::{FleetFailures, IceSet, Refusal, Throttle};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};
use tokio::sync::broadcast;

/// API operation names, as they appear in reports and [`ApiCalls`].
pub mod ops {
    pub const CREATE_FLEET: &str = "CreateFleet";
    pub const DESCRIBE_INSTANCES: &str = "DescribeInstances";
    pub const TERMINATE_INSTANCES: &str = "TerminateInstances";
    pub const CREATE_TAGS: &str = "CreateTags";
}

/// Timings of the simulated region. Zero durations make the transition immediate, which
/// is what unit tests want; the defaults are EC2's typical figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Ec2Config {
    pub region: String,
    /// How long `CreateFleet` takes to answer.
    pub launch_latency: Duration,
    /// How long a launched instance stays `pending` before `running`.
    pub pending_duration: Duration,
    /// How long a terminated instance stays `shutting-down` before `terminated`.
    pub shutdown_duration: Duration,
    /// Time between a spot interruption warning and the termination (EC2: two minutes).
    pub interruption_notice: Duration,
}

impl Default for Ec2Config {
    fn default() -> Self {
        Self {
            region: "us-east-1".to_owned(),
            launch_latency: Duration::from_millis(500),
            pending_duration: Duration::from_secs(5),
            shutdown_duration: Duration::from_secs(10),
            interruption_notice: Duration::from_secs(120),
        }
    }
}

impl Ec2Config {
    /// A configuration with every delay zero, for tests.
    pub fn instant(region: &str) -> Self {
        Self {
            region: region.to_owned(),
            launch_latency: Duration::ZERO,
            pending_duration: Duration::ZERO,
            shutdown_duration: Duration::ZERO,
            interruption_notice: Duration::ZERO,
        }
    }
}

/// A cheap, cloneable handle on one simulated region.
#[derive(Clone)]
pub struct SimulatedEc2 {
    inner: Arc<Inner>,
    /// Who calls through this handle, for the write log ([`SimulatedEc2::as_caller`]).
    caller: Option<Arc<str>>,
}

struct Inner {
    config: Ec2Config,
    prices: HashMap<OfferingKey, f64>,
    state: Mutex<State>,
    events: broadcast::Sender<Ec2Event>,
}

#[derive(Default)]
struct State {
    instances: BTreeMap<String, Instance>,
    ice: IceSet,
    throttle: Throttle,
    fleet_failures: FleetFailures,
    refusal: Option<Refusal>,
    calls: ApiCalls,
    writes: Vec<Ec2Write>,
    launched: u32,
    interruptions: Vec<SpotInterruption>,
    hold: Option<hold::HeldLaunch>,
    health: instance_status::Health,
    /// Answered CreateFleet calls by client token: the request's fingerprint and the answer.
    answered: HashMap<String, (u64, CreateFleetOutput)>,
    /// How long after its launch an instance stays out of DescribeInstances searches.
    describe_lag: Duration,
    /// CreateTags calls still to fail.
    create_tags_failures: u32,
    /// Capacity reservations by id.
    reservations: BTreeMap<String, CapacityReservation>,
}

impl State {
    fn reservation_room(&self) -> HashMap<String, u32> {
        let mut live: HashMap<&str, u32> = HashMap::new();
        for instance in self.instances.values().filter(|i| i.state.is_live()) {
            if let Some(id) = &instance.capacity_reservation_id {
                *live.entry(id.as_str()).or_default() += 1;
            }
        }
        reservations::room(self.reservations.values(), |id| {
            live.get(id).copied().unwrap_or(0)
        })
    }
}

/// Capacity of the event channel; a subscriber that lags further resynchronises from
/// [`SimulatedEc2::instances`].
const EVENT_BUFFER: usize = 16 * 1024;

impl SimulatedEc2 {
    /// A region selling exactly `offerings` (pools absent from it answer `Unsupported`).
    pub fn new(config: Ec2Config, offerings: impl IntoIterator<Item = PricedOffering>) -> Self {
        let prices = offerings.into_iter().map(|o| (o.key, o.price)).collect();
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        Self {
            inner: Arc::new(Inner {
                config,
                prices,
                state: Mutex::default(),
                events,
            }),
            caller: None,
        }
    }

    /// The same region, called by `caller`: its writes are logged under that name
    /// ([`Self::writes`]), as CloudTrail names the identity behind each call.
    pub fn as_caller(&self, caller: &str) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            caller: Some(Arc::from(caller)),
        }
    }

    pub fn config(&self) -> &Ec2Config {
        &self.inner.config
    }

    /// The hourly price of a pool, if the region sells it.
    pub fn price(&self, key: &OfferingKey) -> Option<f64> {
        self.inner.prices.get(key).copied()
    }

    // ---- the EC2 API (counted, throttleable) ----

    /// `CreateFleet` (`Type=instant`): launches `total_target_capacity` instances in the
    /// cheapest pool with capacity, reporting the pools that failed before it. Nothing
    /// launchable is not an error of the call: `instances` is empty and `errors` says why.
    /// A `client_token` EC2 answered before gets that answer again and launches nothing
    /// (the same parameters) or `IdempotentParameterMismatch` (other parameters), as EC2.
    pub async fn create_fleet(
        &self,
        request: &CreateFleetRequest,
    ) -> Result<CreateFleetOutput, Ec2Error> {
        self.admit(ops::CREATE_FLEET)?;
        let capacity_type = validate_fleet(request)?;
        sleep(self.inner.config.launch_latency).await;
        let (output, launched, failure, held) = {
            let mut state = self.lock();
            let fingerprint = fingerprint(request);
            if let Some(token) = &request.client_token
                && let Some((seen, output)) = state.answered.get(token)
            {
                if *seen != fingerprint {
                    return Err(Ec2Error::IdempotentParameterMismatch {
                        operation: ops::CREATE_FLEET,
                        client_token: token.clone(),
                    });
                }
                return Ok(output.clone());
            }
            let failure = state.fleet_failures.next();
            if failure == Some(false) {
                return Err(Ec2Error::Internal {
                    operation: ops::CREATE_FLEET,
                    after_launch: false,
                });
            }
            let refused = state
                .refusal
                .as_ref()
                .and_then(|r| r.errors(request, capacity_type));
            if let Some(errors) = refused {
                let output = CreateFleetOutput {
                    fleet_id: ids::fleet_id(&mut rand::rng()),
                    instances: Vec::new(),
                    errors,
                };
                state.remember_answer(request, fingerprint, &output);
                return Ok(output);
            }
            let room = state.reservation_room();
            let allocation = fleet::allocate(
                request,
                capacity_type,
                &self.inner.prices,
                &state.ice,
                &room,
            );
            let mut output = CreateFleetOutput {
                fleet_id: ids::fleet_id(&mut rand::rng()),
                instances: Vec::new(),
                errors: allocation.errors,
            };
            let mut launched = Vec::new();
            if let Some(chosen) = allocation.chosen {
                for _ in 0..request.total_target_capacity {
                    launched.push(self.launch(&mut state, &chosen, &request.tags));
                }
                output.instances.push(FleetInstance {
                    instance_ids: launched.iter().map(|i| i.instance_id.clone()).collect(),
                    instance_type: chosen.key.instance_type,
                    zone: chosen.key.zone,
                    capacity_type: chosen.key.capacity_type,
                    launch_template_name: chosen.launch_template_name,
                });
            }
            let ids = launched.iter().map(|i| i.instance_id.clone()).collect();
            self.log_write(&mut state, ops::CREATE_FLEET, ids);
            state.remember_answer(request, fingerprint, &output);
            let held = if launched.is_empty() {
                None
            } else {
                state.hold.take()
            };
            (output, launched, failure, held)
        };
        for instance in &launched {
            self.emit(Ec2Event::Launched {
                instance_id: instance.instance_id.clone(),
                provider_id: instance.provider_id(),
            });
            if instance.state == InstanceState::Pending {
                self.schedule_state(
                    &instance.instance_id,
                    InstanceState::Running,
                    self.inner.config.pending_duration,
                );
            }
        }
        if let Some(held) = held {
            held.hold(launched.iter().map(|i| i.instance_id.clone()).collect())
                .await;
        }
        if failure == Some(true) {
            return Err(Ec2Error::Internal {
                operation: ops::CREATE_FLEET,
                after_launch: true,
            });
        }
        Ok(output)
    }

    /// `DescribeInstances`: the named instances (every id must exist) matching all filters.
    /// A search (no ids) misses instances launched within the describe lag.
    pub async fn describe_instances(
        &self,
        request: &DescribeInstancesRequest,
    ) -> Result<Vec<Instance>, Ec2Error> {
        self.admit(ops::DESCRIBE_INSTANCES)?;
        let state = self.lock();
        let selected: Vec<&Instance> = if request.instance_ids.is_empty() {
            let now = SystemTime::now();
            let lag = state.describe_lag;
            state
                .instances
                .values()
                .filter(|i| {
                    lag.is_zero() || now.duration_since(i.launch_time).unwrap_or_default() >= lag
                })
                .collect()
        } else {
            request
                .instance_ids
                .iter()
                .map(|id| find(&state, ops::DESCRIBE_INSTANCES, id))
                .collect::<Result<_, _>>()?
        };
        Ok(selected
            .into_iter()
            .filter(|i| request.filters.iter().all(|f| matches_filter(i, f)))
            .cloned()
            .collect())
    }

    /// `TerminateInstances`: live instances go `shutting-down`, then `terminated`.
    pub async fn terminate_instances(
        &self,
        instance_ids: &[String],
    ) -> Result<Vec<InstanceStateChange>, Ec2Error> {
        self.admit(ops::TERMINATE_INSTANCES)?;
        let changes = {
            let mut state = self.lock();
            for id in instance_ids {
                find(&state, ops::TERMINATE_INSTANCES, id)?;
            }
            self.log_write(&mut state, ops::TERMINATE_INSTANCES, instance_ids.to_vec());
            let shutdown = self.inner.config.shutdown_duration;
            let mut changes = Vec::with_capacity(instance_ids.len());
            for id in instance_ids {
                if let Some(instance) = state.instances.get_mut(id) {
                    changes.push(begin_shutdown(instance, shutdown));
                }
            }
            changes
        };
        for change in &changes {
            self.after_state_change(change);
        }
        Ok(changes)
    }

    /// `CreateTags`: adds or overwrites tags on existing instances.
    pub async fn create_tags(
        &self,
        instance_ids: &[String],
        tags: &BTreeMap<String, String>,
    ) -> Result<(), Ec2Error> {
        self.admit(ops::CREATE_TAGS)?;
        let mut state = self.lock();
        if state.create_tags_failures > 0 {
            state.create_tags_failures -= 1;
            return Err(Ec2Error::Internal {
                operation: ops::CREATE_TAGS,
                after_launch: false,
            });
        }
        for id in instance_ids {
            find(&state, ops::CREATE_TAGS, id)?;
        }
        self.log_write(&mut state, ops::CREATE_TAGS, instance_ids.to_vec());
        for id in instance_ids {
            if let Some(instance) = state.instances.get_mut(id) {
                instance
                    .tags
                    .extend(tags.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        Ok(())
    }

    // ---- fault injection and observation (not API calls: neither counted nor throttled) ----

    /// Turns insufficient capacity on or off for one pool.
    pub fn set_insufficient_capacity(&self, pool: OfferingKey, insufficient: bool) {
        self.lock().ice.set(pool, insufficient);
    }

    /// Holds the next CreateFleet that launches instances after the launch, until the
    /// returned hold is released or dropped (one-shot; a second call replaces the first).
    pub fn hold_next_launch(&self) -> LaunchHold {
        let (hold, held) = hold::pair();
        self.lock().hold = Some(held);
        hold
    }

    /// Fails the next `count` CreateFleet calls with `InternalError` before they launch
    /// anything (a transient error the caller retries).
    pub fn fail_next_fleets(&self, count: u32) {
        self.lock().fleet_failures.before_launch = count;
    }

    /// Refuses every CreateFleet request (of `capacity_type`, or any when `None`) with EC2's
    /// error `code` and `message` against each override, until [`Self::accept_launches`].
    pub fn refuse_launches(&self, capacity_type: Option<CapacityType>, code: &str, message: &str) {
        self.lock().refusal = Some(Refusal {
            capacity_type,
            code: code.to_owned(),
            message: message.to_owned(),
        });
    }

    /// Ends [`Self::refuse_launches`].
    pub fn accept_launches(&self) {
        self.lock().refusal = None;
    }

    /// Loses the answer of the next `count` CreateFleet calls: each launches its instances,
    /// then fails with `InternalError`, as a request that timed out after EC2 carried it out.
    pub fn lose_next_fleet_answers(&self, count: u32) {
        self.lock().fleet_failures.after_launch = count;
    }

    /// Makes DescribeInstances searches (by filter, not by id) miss instances for `lag`
    /// after their launch, as EC2's eventual consistency does; zero shows them at once.
    pub fn set_describe_lag(&self, lag: Duration) {
        self.lock().describe_lag = lag;
    }

    /// Fails the next `count` CreateTags calls with `InternalError`, tagging nothing.
    pub fn fail_next_create_tags(&self, count: u32) {
        self.lock().create_tags_failures = count;
    }

    /// Restores capacity in every pool.
    pub fn clear_insufficient_capacity(&self) {
        self.lock().ice.clear();
    }

    /// The pools currently out of capacity, sorted.
    pub fn insufficient_capacity_pools(&self) -> Vec<OfferingKey> {
        self.lock().ice.snapshot()
    }

    /// Throttles `fraction` (0..=1) of all subsequent API calls with `RequestLimitExceeded`.
    pub fn set_throttling(&self, fraction: f64) -> Result<(), Ec2ConfigError> {
        self.lock().throttle.set_fraction(fraction)
    }

    /// Issues a spot interruption warning for a running spot instance; EC2 terminates it
    /// when the notice (`interruption_notice`) runs out.
    pub fn interrupt_spot(&self, instance_id: &str) -> Result<SpotInterruption, Ec2Error> {
        let notice = self.inner.config.interruption_notice;
        let interruption =
            {
                let mut state = self.lock();
                let instance = state.instances.get_mut(instance_id).ok_or_else(|| {
                    Ec2Error::NotInterruptible {
                        instance_id: instance_id.to_owned(),
                        reason: "no such instance".to_owned(),
                    }
                })?;
                check_interruptible(instance)?;
                let issued_at = SystemTime::now();
                let interruption = SpotInterruption {
                    instance_id: instance_id.to_owned(),
                    issued_at,
                    action_time: issued_at + notice,
                };
                instance.interruption = Some(interruption.clone());
                state.interruptions.push(interruption.clone());
                interruption
            };
        self.emit(Ec2Event::SpotInterruptionWarning(interruption.clone()));
        self.schedule_reclaim(instance_id, notice);
        Ok(interruption)
    }

    /// Backdates an instance's launch time, as if it had been running since `launch_time`
    /// (e.g. a leaked instance past the garbage-collection grace period).
    pub fn set_launch_time(
        &self,
        instance_id: &str,
        launch_time: SystemTime,
    ) -> Result<(), Ec2Error> {
        let mut state = self.lock();
        find(&state, "SetLaunchTime", instance_id)?;
        if let Some(instance) = state.instances.get_mut(instance_id) {
            instance.launch_time = launch_time;
        }
        Ok(())
    }

    /// Adds (or replaces) a capacity reservation of the region.
    pub fn add_capacity_reservation(&self, reservation: CapacityReservation) {
        self.lock()
            .reservations
            .insert(reservation.id.clone(), reservation);
    }

    /// `DescribeCapacityReservations`: every active reservation, by id, with its room.
    pub fn describe_capacity_reservations(&self) -> Vec<ReservationView> {
        let state = self.lock();
        let room = state.reservation_room();
        state
            .reservations
            .values()
            .map(|r| ReservationView {
                available: room.get(&r.id).copied().unwrap_or(0),
                reservation: r.clone(),
            })
            .collect()
    }

    /// Ends a reservation as EC2 does: it is removed; a Capacity Block's instances are
    /// terminated, an ODCR's keep running as plain on-demand instances (no reservation).
    /// Returns the ids of the instances that were in it.
    pub fn end_capacity_reservation(&self, id: &str) -> Vec<String> {
        let (ids, block) = {
            let mut state = self.lock();
            let block = state
                .reservations
                .remove(id)
                .is_some_and(|r| r.reservation_type == ReservationType::CapacityBlock);
            let ids: Vec<String> = state
                .instances
                .values()
                .filter(|i| i.state.is_live() && i.capacity_reservation_id.as_deref() == Some(id))
                .map(|i| i.instance_id.clone())
                .collect();
            if !block {
                for instance_id in &ids {
                    if let Some(instance) = state.instances.get_mut(instance_id) {
                        instance.capacity_reservation_id = None;
                    }
                }
            }
            (ids, block)
        };
        if !block {
            return ids;
        }
        for instance_id in &ids {
            self.transition(instance_id, InstanceState::ShuttingDown);
            self.schedule_state(
                instance_id,
                InstanceState::Terminated,
                self.inner.config.shutdown_duration,
            );
        }
        ids
    }

    /// The owner of interruptible reservation `id` reclaims it: the reservation goes, each
    /// of its live instances gets a capacity reservation interruption warning, and EC2
    /// reclaims them when the notice (`interruption_notice`) runs out. Returns their ids.
    pub fn interrupt_reservation(&self, id: &str) -> Result<Vec<String>, Ec2Error> {
        let notice = self.inner.config.interruption_notice;
        let ids: Vec<String> = {
            let mut state = self.lock();
            let interruptible = state.reservations.get(id).map(|r| r.interruptible);
            if interruptible != Some(true) {
                return Err(Ec2Error::NotInterruptible {
                    instance_id: id.to_owned(),
                    reason: match interruptible {
                        None => "no such capacity reservation".to_owned(),
                        Some(_) => "not an interruptible capacity reservation".to_owned(),
                    },
                });
            }
            state.reservations.remove(id);
            state
                .instances
                .values()
                .filter(|i| i.state.is_live() && i.capacity_reservation_id.as_deref() == Some(id))
                .map(|i| i.instance_id.clone())
                .collect()
        };
        let issued_at = SystemTime::now();
        for instance_id in &ids {
            self.emit(Ec2Event::ReservationInterruptionWarning {
                instance_id: instance_id.clone(),
                reservation_id: id.to_owned(),
                issued_at,
            });
            self.schedule_reclaim(instance_id, notice);
        }
        Ok(ids)
    }

    /// The live instances in reservation `id`.
    pub fn instances_in_reservation(&self, id: &str) -> Vec<String> {
        self.lock()
            .instances
            .values()
            .filter(|i| i.state.is_live() && i.capacity_reservation_id.as_deref() == Some(id))
            .map(|i| i.instance_id.clone())
            .collect()
    }

    /// Every spot interruption warning issued so far, oldest first.
    pub fn spot_interruptions(&self) -> Vec<SpotInterruption> {
        self.lock().interruptions.clone()
    }

    /// Launches, state changes and interruption warnings from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Ec2Event> {
        self.inner.events.subscribe()
    }

    /// All instances in every state, by id; the simulator's own view, not an API call.
    pub fn instances(&self) -> Vec<Instance> {
        self.lock().instances.values().cloned().collect()
    }

    /// One instance by id; the simulator's own view, not an API call.
    pub fn instance(&self, instance_id: &str) -> Option<Instance> {
        self.lock().instances.get(instance_id).cloned()
    }

    /// API calls so far, by operation.
    pub fn api_calls(&self) -> ApiCalls {
        self.lock().calls.clone()
    }

    /// Every write applied so far (launches, terminations, tags), oldest first, with its
    /// caller: the call log a test reads to tell which replica changed the region when.
    pub fn writes(&self) -> Vec<Ec2Write> {
        self.lock().writes.clone()
    }

    // ---- internals ----

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters to a simulation, so a poisoned lock is still usable.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn log_write(&self, state: &mut State, operation: &'static str, instance_ids: Vec<String>) {
        state.writes.push(Ec2Write {
            at: tokio::time::Instant::now(),
            caller: self.caller.as_deref().map(str::to_owned),
            operation,
            instance_ids,
        });
    }

    fn admit(&self, operation: &'static str) -> Result<(), Ec2Error> {
        let mut state = self.lock();
        let throttled = state.throttle.admit();
        state.calls.record(operation, throttled);
        if throttled {
            return Err(Ec2Error::RequestLimitExceeded { operation });
        }
        Ok(())
    }

    fn launch(
        &self,
        state: &mut State,
        chosen: &fleet::Chosen,
        tags: &BTreeMap<String, String>,
    ) -> Instance {
        let mut rng = rand::rng();
        let mut instance_id = ids::instance_id(&mut rng);
        while state.instances.contains_key(&instance_id) {
            instance_id = ids::instance_id(&mut rng);
        }
        let ip = ids::private_ip(state.launched);
        state.launched += 1;
        let instance = Instance {
            instance_id: instance_id.clone(),
            instance_type: chosen.key.instance_type.clone(),
            zone: chosen.key.zone.clone(),
            capacity_type: chosen.key.capacity_type,
            state: if self.inner.config.pending_duration.is_zero() {
                InstanceState::Running
            } else {
                InstanceState::Pending
            },
            image_id: chosen.image_id.clone(),
            subnet_id: chosen.subnet_id.clone(),
            launch_template_name: chosen.launch_template_name.clone(),
            private_dns_name: ids::private_dns_name(&ip, &self.inner.config.region),
            private_ip_address: ip,
            launch_time: SystemTime::now(),
            price: chosen.price,
            tags: tags.clone(),
            interruption: None,
            capacity_reservation_id: chosen.reservation.clone(),
        };
        state.instances.insert(instance_id, instance.clone());
        instance
    }

    fn emit(&self, event: Ec2Event) {
        // No subscriber is a normal state (nobody watching yet), not an error.
        let _ = self.inner.events.send(event);
    }

    fn after_state_change(&self, change: &InstanceStateChange) {
        if change.previous_state == change.current_state {
            return;
        }
        self.emit_state(&change.instance_id, change.current_state);
        if change.current_state == InstanceState::ShuttingDown {
            self.schedule_state(
                &change.instance_id,
                InstanceState::Terminated,
                self.inner.config.shutdown_duration,
            );
        }
    }

    fn emit_state(&self, instance_id: &str, state: InstanceState) {
        let provider_id = self
            .instance(instance_id)
            .map(|i| i.provider_id())
            .unwrap_or_default();
        self.emit(Ec2Event::StateChanged {
            instance_id: instance_id.to_owned(),
            provider_id,
            state,
        });
    }

    /// Moves an instance to `to` after `delay`, unless it moved on meanwhile (a pending
    /// instance terminated before it ran stays terminated).
    fn schedule_state(&self, instance_id: &str, to: InstanceState, delay: Duration) {
        let ec2 = self.clone();
        let id = instance_id.to_owned();
        run_later(delay, move || ec2.transition(&id, to));
    }

    fn transition(&self, instance_id: &str, to: InstanceState) {
        let changed = {
            let mut state = self.lock();
            match state.instances.get_mut(instance_id) {
                Some(instance) if precedes(instance.state, to) => {
                    instance.state = to;
                    true
                }
                _ => false,
            }
        };
        if changed {
            self.emit_state(instance_id, to);
        }
    }

    fn schedule_reclaim(&self, instance_id: &str, notice: Duration) {
        let ec2 = self.clone();
        let id = instance_id.to_owned();
        run_later(notice, move || {
            let change = {
                let mut state = ec2.lock();
                let shutdown = ec2.inner.config.shutdown_duration;
                state
                    .instances
                    .get_mut(&id)
                    .map(|i| begin_shutdown(i, shutdown))
            };
            if let Some(change) = change {
                ec2.after_state_change(&change);
            }
        });
    }
}

impl State {
    /// Records the answer to a request with a client token, for the token's repeats.
    fn remember_answer(
        &mut self,
        request: &CreateFleetRequest,
        fingerprint: u64,
        output: &CreateFleetOutput,
    ) {
        if let Some(token) = &request.client_token {
            self.answered
                .insert(token.clone(), (fingerprint, output.clone()));
        }
    }
}

/// What identifies a request's parameters for its client token (all but the token).
fn fingerprint(request: &CreateFleetRequest) -> u64 {
    use std::hash::{Hash, Hasher};
    let parameters = CreateFleetRequest {
        client_token: None,
        ..request.clone()
    };
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    format!("{parameters:?}").hash(&mut hasher);
    hasher.finish()
}

impl std::fmt::Debug for SimulatedEc2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatedEc2")
            .field("region", &self.inner.config.region)
            .field("pools", &self.inner.prices.len())
            .finish_non_exhaustive()
    }
}

fn validate_fleet(request: &CreateFleetRequest) -> Result<CapacityType, Ec2Error> {
    let invalid = |message: &str| Ec2Error::InvalidParameter {
        operation: ops::CREATE_FLEET,
        message: message.to_owned(),
    };
    let capacity_type = request.capacity_type.ok_or_else(|| {
        invalid("TargetCapacitySpecification.DefaultTargetCapacityType is required")
    })?;
    if request.total_target_capacity == 0 {
        return Err(invalid(
            "TargetCapacitySpecification.TotalTargetCapacity must be at least 1",
        ));
    }
    if request
        .launch_template_configs
        .iter()
        .all(|lt| lt.overrides.is_empty())
    {
        return Err(invalid(
            "LaunchTemplateConfigs must contain at least one override",
        ));
    }
    Ok(capacity_type)
}

fn find<'s>(state: &'s State, operation: &'static str, id: &str) -> Result<&'s Instance, Ec2Error> {
    if !ids::is_instance_id(id) {
        return Err(Ec2Error::MalformedInstanceId {
            operation,
            instance_id: id.to_owned(),
        });
    }
    state
        .instances
        .get(id)
        .ok_or_else(|| Ec2Error::InstanceNotFound {
            operation,
            instance_id: id.to_owned(),
        })
}

fn check_interruptible(instance: &Instance) -> Result<(), Ec2Error> {
    let refuse = |reason: &str| {
        Err(Ec2Error::NotInterruptible {
            instance_id: instance.instance_id.clone(),
            reason: reason.to_owned(),
        })
    };
    if instance.capacity_type != CapacityType::Spot {
        return refuse("not a spot instance");
    }
    if !instance.state.is_live() {
        return refuse(&format!("instance is {}", instance.state));
    }
    if instance.interruption.is_some() {
        return refuse("already interrupted");
    }
    Ok(())
}

/// Starts shutting an instance down; with no shutdown time it is terminated at once.
fn begin_shutdown(instance: &mut Instance, shutdown: Duration) -> InstanceStateChange {
    let previous_state = instance.state;
    if previous_state.is_live() {
        instance.state = if shutdown.is_zero() {
            InstanceState::Terminated
        } else {
            InstanceState::ShuttingDown
        };
    }
    InstanceStateChange {
        instance_id: instance.instance_id.clone(),
        previous_state,
        current_state: instance.state,
    }
}

/// Whether `to` is a later lifecycle state than `from`.
fn precedes(from: InstanceState, to: InstanceState) -> bool {
    fn rank(state: InstanceState) -> u8 {
        match state {
            InstanceState::Pending => 0,
            InstanceState::Running => 1,
            InstanceState::ShuttingDown => 2,
            InstanceState::Terminated => 3,
        }
    }
    rank(from) < rank(to)
}

fn matches_filter(instance: &Instance, filter: &Filter) -> bool {
    match filter {
        Filter::TagKey(key) => instance.tags.contains_key(key),
        Filter::Tag { key, values } => instance.tags.get(key).is_some_and(|v| {
            values
                .iter()
                .any(|pattern| kerf::wildcard::matches(pattern, v))
        }),
        Filter::InstanceStateName(states) => states.contains(&instance.state),
        Filter::InstanceType(types) => types.contains(&instance.instance_type),
        Filter::AvailabilityZone(zones) => zones.contains(&instance.zone),
    }
}

async fn sleep(delay: Duration) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

/// Runs `task` after `delay`: inline when there is no delay (deterministic for tests) or no
/// runtime to defer it on, otherwise on the current Tokio runtime.
fn run_later<F>(delay: Duration, task: F)
where
    F: FnOnce() + Send + 'static,
{
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if !delay.is_zero() => {
            // The deferred step changes the region's state: EC2's, whoever's call scheduled it.
            handle.spawn(kerf_heap::owned(kerf_heap::Owner::EC2, async move {
                tokio::time::sleep(delay).await;
                task();
            }));
        }
        _ => task(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle_only_moves_forward() {
        assert!(precedes(InstanceState::Pending, InstanceState::Running));
        assert!(!precedes(InstanceState::Terminated, InstanceState::Running));
        assert!(!precedes(
            InstanceState::ShuttingDown,
            InstanceState::Running
        ));
    }
}
