//! The election's timing on paused tokio time: a renewal counts from when it was sent, an
//! attempt is cut off at the deadline, and the leader steps down at the deadline however
//! slow, hung or failing its lease endpoint is; an election that dies is a step-down and is
//! restarted. The lease endpoint is a fake at the HTTP boundary (the kube client is real):
//! the project's API emulator serves real sockets, whose timing paused time cannot control,
//! and these tests need each answer's time exact. The emulator tests the same election over
//! HTTP in `actors/tests/controller/leader.rs`. Last, [`changes`], which the actors that
//! resync on a leadership change watch.

use std::sync::Mutex;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::client::Body;
use serde_json::{Value, json};

use super::*;

/// How the fake endpoint answers.
#[derive(Debug, Clone, Copy)]
enum Answer {
    After(Duration),
    Never,
    /// 500 at once.
    Fail,
}

/// One Lease, served as the API server would (GET, POST, PUT with resourceVersion checks).
#[derive(Clone)]
struct LeaseEndpoint(Arc<Mutex<Served>>);

struct Served {
    lease: Option<Value>,
    version: u64,
    /// By client; a client not named answers at once.
    answers: std::collections::HashMap<String, Answer>,
}

impl LeaseEndpoint {
    fn new() -> Self {
        Self(Arc::new(Mutex::new(Served {
            lease: None,
            version: 0,
            answers: std::collections::HashMap::new(),
        })))
    }

    /// How the requests of `client` are answered from now on.
    fn answer(&self, client: &str, answer: Answer) {
        let mut served = self.0.lock().expect("endpoint lock");
        served.answers.insert(client.to_owned(), answer);
    }

    fn holder(&self) -> Option<String> {
        let served = self.0.lock().expect("endpoint lock");
        served
            .lease
            .as_ref()
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
    }

    /// A kube client whose requests are answered as `name`'s.
    fn client(&self, name: &str) -> Client {
        let (endpoint, name) = (self.clone(), name.to_owned());
        let service = tower::service_fn(move |request: Request<Body>| {
            let (endpoint, name) = (endpoint.clone(), name.clone());
            async move { Ok::<_, std::convert::Infallible>(endpoint.serve(&name, request).await) }
        });
        Client::new(service, "karpenter")
    }

    async fn serve(&self, client: &str, request: Request<Body>) -> Response<Body> {
        let answer = {
            let served = self.0.lock().expect("endpoint lock");
            served
                .answers
                .get(client)
                .copied()
                .unwrap_or(Answer::After(Duration::ZERO))
        };
        match answer {
            Answer::After(delay) => tokio::time::sleep(delay).await,
            Answer::Never => std::future::pending().await,
            Answer::Fail => return status(StatusCode::INTERNAL_SERVER_ERROR, "injected"),
        }
        let method = request.method().clone();
        let body = request
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut served = self.0.lock().expect("endpoint lock");
        match method.as_str() {
            "GET" => match &served.lease {
                Some(lease) => json_response(StatusCode::OK, lease),
                None => status(StatusCode::NOT_FOUND, "NotFound"),
            },
            "POST" | "PUT" => {
                let mut lease: Value = serde_json::from_slice(&body).expect("a Lease");
                let current = served
                    .lease
                    .as_ref()
                    .map(|l| l["metadata"]["resourceVersion"].clone());
                let conflict = match (&current, method.as_str()) {
                    (Some(_), "POST") => true,
                    (None, "PUT") => true,
                    (Some(version), _) => *version != lease["metadata"]["resourceVersion"],
                    (None, _) => false,
                };
                if conflict {
                    return status(StatusCode::CONFLICT, "Conflict");
                }
                served.version += 1;
                lease["metadata"]["resourceVersion"] = json!(served.version.to_string());
                served.lease = Some(lease.clone());
                json_response(StatusCode::OK, &lease)
            }
            _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
        }
    }
}

fn json_response(code: StatusCode, value: &Value) -> Response<Body> {
    let mut response = Response::new(Body::from(Bytes::from(value.to_string()).to_vec()));
    *response.status_mut() = code;
    response
}

fn status(code: StatusCode, reason: &str) -> Response<Body> {
    json_response(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": reason, "reason": reason, "code": code.as_u16()}),
    )
}

const TIMING: Timing = Timing {
    lease_duration: Duration::from_secs(15),
    renew_deadline: Duration::from_secs(10),
    retry_period: Duration::from_secs(2),
};

fn election(identity: &str, timing: Timing) -> Election {
    Election {
        namespace: "karpenter".into(),
        name: "kerf-leader".into(),
        identity: identity.into(),
        timing,
    }
}

/// Waits until `leader` reads `leading`; returns when, by the paused clock.
async fn until(leader: &mut watch::Receiver<bool>, leading: bool) -> Instant {
    leader
        .wait_for(|l| *l == leading)
        .await
        .expect("the election publishes");
    Instant::now()
}

#[tokio::test(start_paused = true)]
async fn a_renewal_counts_from_when_it_was_sent_not_when_its_answer_came() {
    let endpoint = LeaseEndpoint::new();
    let (_stop, shutdown) = watch::channel(false);
    let start = Instant::now();
    let (mut leader, _task) = spawn(endpoint.client("a"), election("a", TIMING), shutdown);
    until(&mut leader, true).await;
    // Every request now answers after 3 s: the renewal sent at t=2 reads at t=5 and writes
    // at t=8 — it succeeds, six seconds after it was sent.
    endpoint.answer("a", Answer::After(Duration::from_secs(3)));
    tokio::time::sleep_until(start + Duration::from_millis(8_500)).await;
    assert!(*leader.borrow(), "the slow renewal succeeded");
    // From now on nothing answers: the leader's deadline is the slow renewal's send time
    // (t=2) plus the renew deadline, not its answer's time (t=8) plus it.
    endpoint.answer("a", Answer::Never);
    let stepped_down = until(&mut leader, false).await;
    assert_eq!(stepped_down - start, Duration::from_secs(12));
}

#[tokio::test(start_paused = true)]
async fn the_leader_steps_down_at_the_deadline_while_its_attempt_hangs() {
    let endpoint = LeaseEndpoint::new();
    let (_stop, shutdown) = watch::channel(false);
    let start = Instant::now();
    let (mut leader, _task) = spawn(endpoint.client("a"), election("a", TIMING), shutdown);
    until(&mut leader, true).await;
    // Acquired by the request sent at t=0; the renewal sent at t=2 hangs forever.
    endpoint.answer("a", Answer::Never);
    let stepped_down = until(&mut leader, false).await;
    assert_eq!(stepped_down - start, TIMING.renew_deadline);
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewals_fail_steps_down_at_the_deadline_not_at_its_next_attempt() {
    // Attempts every 3 s: at t=9 and t=12, neither at the deadline (t=10).
    let timing = Timing {
        retry_period: Duration::from_secs(3),
        ..TIMING
    };
    let endpoint = LeaseEndpoint::new();
    let (_stop, shutdown) = watch::channel(false);
    let start = Instant::now();
    let (mut leader, _task) = spawn(endpoint.client("a"), election("a", timing), shutdown);
    until(&mut leader, true).await;
    endpoint.answer("a", Answer::Fail);
    let stepped_down = until(&mut leader, false).await;
    assert_eq!(stepped_down - start, timing.renew_deadline);
    // Still the holder on record: once renewals succeed again it leads again.
    endpoint.answer("a", Answer::After(Duration::ZERO));
    until(&mut leader, true).await;
    assert_eq!(endpoint.holder().as_deref(), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn a_standby_takes_over_only_after_the_cut_off_leader_stepped_down() {
    let endpoint = LeaseEndpoint::new();
    let (_stop, shutdown) = watch::channel(false);
    let (mut a, _a) = spawn(
        endpoint.client("a"),
        election("a", TIMING),
        shutdown.clone(),
    );
    until(&mut a, true).await;
    let (mut b, _b) = spawn(endpoint.client("b"), election("b", TIMING), shutdown);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!*b.borrow());
    // a is cut off from the Lease; b is not.
    endpoint.answer("a", Answer::Never);
    let a_down = until(&mut a, false).await;
    let b_up = until(&mut b, true).await;
    assert!(
        b_up - a_down >= TIMING.lease_duration - TIMING.renew_deadline,
        "a stepped down at {a_down:?}, b acquired at {b_up:?}"
    );
    assert_eq!(endpoint.holder().as_deref(), Some("b"));
}

#[tokio::test(start_paused = true)]
async fn an_election_that_panics_steps_down_and_is_restarted() {
    const NAME: &str = "leader_election_panic_test";
    let before = crate::testing::restarts(NAME);
    let (tx, mut leader) = watch::channel(false);
    let (_stop, shutdown) = watch::channel(false);
    let built = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&built);
    let scope = crate::supervisor::Supervision::new();
    let supervised = supervise(NAME, tx, shutdown, move |leading| {
        let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            leading.send_replace(true);
            tokio::time::sleep(Duration::from_secs(5)).await;
            if n == 0 {
                panic!("a bug in the election");
            }
            std::future::pending::<()>().await;
        }
    });
    let running = scope.clone();
    let _task = tokio::spawn(async move { running.scope(supervised).await });
    until(&mut leader, true).await;
    let start = Instant::now();
    let down = until(&mut leader, false).await;
    assert_eq!(down - start, Duration::from_secs(5), "false as it died");
    let up = until(&mut leader, true).await;
    assert_eq!(
        up - down,
        crate::supervisor::TASK_RESTART_DELAY,
        "restarted after the scope's first backoff"
    );
    assert_eq!(built.load(std::sync::atomic::Ordering::SeqCst), 2);
    crate::metrics::handle();
    assert_eq!(crate::testing::restarts(NAME) - before, 1);
    assert_eq!(
        scope.recent_restarts(NAME),
        1,
        "held against the replica's restart budget"
    );
}

#[tokio::test(start_paused = true)]
async fn an_election_whose_factory_panics_is_built_again() {
    const NAME: &str = "leader_election_factory_test";
    let (tx, mut leader) = watch::channel(false);
    let (_stop, shutdown) = watch::channel(false);
    let scope = crate::supervisor::Supervision::new();
    let mut built = 0;
    let supervised = supervise(NAME, tx, shutdown, move |leading| {
        built += 1;
        assert!(built > 1, "a bug building the election");
        async move {
            leading.send_replace(true);
            std::future::pending::<()>().await;
        }
    });
    let running = scope.clone();
    let _task = tokio::spawn(async move { running.scope(supervised).await });
    until(&mut leader, true).await;
    assert_eq!(scope.recent_restarts(NAME), 1);
}

/// What a test's subscriber wrote.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The JSON lines logged at `level`.
    fn lines_at(&self, level: &str) -> Vec<Value> {
        let text = String::from_utf8(self.0.lock().expect("not poisoned").clone()).expect("utf-8");
        text.lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("a JSON line"))
            .filter(|line| line["level"] == level)
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_election_is_logged_once_with_its_name_and_message() {
    const NAME: &str = "leader_election_log_test";
    let captured = Captured::default();
    let sink = captured.clone();
    // The paused runtime runs every task on this thread, under this subscriber.
    let _logging = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .json()
            .with_writer(move || sink.clone())
            .finish(),
    );
    let (tx, mut leader) = watch::channel(false);
    let (_stop, shutdown) = watch::channel(false);
    let mut built = 0;
    let supervised = supervise(NAME, tx, shutdown, move |leading| {
        built += 1;
        let first = built == 1;
        async move {
            leading.send_replace(true);
            tokio::time::sleep(Duration::from_secs(5)).await;
            assert!(!first, "a bug in the election");
            std::future::pending::<()>().await;
        }
    });
    let scope = crate::supervisor::Supervision::new();
    let running = scope.clone();
    let _task = tokio::spawn(async move { running.scope(supervised).await });
    until(&mut leader, true).await;
    until(&mut leader, false).await;
    until(&mut leader, true).await;
    let errors = captured.lines_at("ERROR");
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let fields = &errors[0]["fields"];
    assert_eq!(fields["actor"], NAME, "{fields}");
    assert_eq!(fields["panic"], "a bug in the election", "{fields}");
    assert_eq!(scope.recent_restarts(NAME), 1);
}

#[tokio::test(start_paused = true)]
async fn an_election_that_returns_before_shutdown_steps_down_and_is_restarted() {
    const NAME: &str = "leader_election_return_test";
    crate::metrics::handle();
    let before = crate::testing::restarts(NAME);
    let (tx, mut leader) = watch::channel(false);
    let (stop, shutdown) = watch::channel(false);
    let built = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&built);
    let task = tokio::spawn(supervise(NAME, tx, shutdown, move |leading| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            leading.send_replace(true);
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }));
    until(&mut leader, true).await;
    until(&mut leader, false).await;
    until(&mut leader, true).await;
    assert_eq!(built.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert!(crate::testing::restarts(NAME) - before >= 1);
    stop.send_replace(true);
    task.await.expect("supervision ends on shutdown");
    assert!(!*leader.borrow(), "a stopped election does not lead");
}

#[tokio::test(start_paused = true)]
async fn an_aborted_election_reads_false() {
    let endpoint = LeaseEndpoint::new();
    let (_stop, shutdown) = watch::channel(false);
    let (mut leader, task) = spawn(endpoint.client("a"), election("a", TIMING), shutdown);
    until(&mut leader, true).await;
    task.abort();
    let _ = task.await;
    assert!(!*leader.borrow(), "the watch does not keep reading true");
}

#[tokio::test(start_paused = true)]
async fn changes_yields_each_change_once_and_ends_with_the_election() {
    use futures::StreamExt;
    let (leader, watched) = watch::channel(false);
    let mut changes = Box::pin(changes(watched));
    leader.send_replace(true);
    assert_eq!(changes.next().await, Some(true));
    // Seen: nothing more until the next change, however long.
    let idle = tokio::time::timeout(Duration::from_secs(3600), changes.next()).await;
    assert!(idle.is_err(), "a seen change came again: {idle:?}");
    leader.send_replace(false);
    assert_eq!(changes.next().await, Some(false));
    drop(leader);
    assert_eq!(changes.next().await, None);
}

/// An actor that resyncs on each change of leadership, as the NodeClaim lifecycle and the
/// TerminationDrainer do, counting its resyncs.
struct Resyncing {
    leader: watch::Receiver<bool>,
    resyncs: Arc<std::sync::atomic::AtomicUsize>,
}

impl actix::Actor for Resyncing {
    type Context = actix::Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        use actix::{ActorStreamExt, AsyncContext, WrapStream};
        let resyncs = Arc::clone(&self.resyncs);
        ctx.spawn(
            changes(self.leader.clone())
                .into_actor(self)
                .map(move |_leading, _act, _ctx| {
                    resyncs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                })
                .finish(),
        );
    }
}

/// The resyncs counted once there are at least `least` and the actor has run on for a while:
/// long enough for a resync loop to count far more than one (it counted 155,342 in 300 ms).
async fn settled(resyncs: &std::sync::atomic::AtomicUsize, least: usize) -> usize {
    use std::sync::atomic::Ordering;
    let reached = async {
        while resyncs.load(Ordering::Relaxed) < least {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), reached)
        .await
        .expect("the actor resyncs after a change");
    tokio::time::sleep(Duration::from_millis(300)).await;
    resyncs.load(Ordering::Relaxed)
}

/// The actor holds the election's receiver as the daemon hands it over: never marked seen.
/// Each change must cost one resync; an actor that waited on a fresh clone per change would
/// resync without end on its thread, starving everything that thread drives (the HTTP
/// connections it opened among them).
#[test]
fn an_actor_resyncs_once_per_leadership_change() {
    use std::sync::atomic::AtomicUsize;
    crate::supervisor::system(2)
        .expect("runtime builds")
        .block_on(async {
            let (leader, watched) = watch::channel(false);
            let resyncs = Arc::new(AtomicUsize::new(0));
            let arbiter = actix::Arbiter::new();
            let counted = Arc::clone(&resyncs);
            let _actor =
                <Resyncing as actix::Actor>::start_in_arbiter(&arbiter.handle(), |_| Resyncing {
                    leader: watched,
                    resyncs: counted,
                });
            // One change, then another; each counted once the actor took it and ran on.
            leader.send_replace(true);
            let after_one = settled(&resyncs, 1).await;
            leader.send_replace(false);
            let after_two = settled(&resyncs, 2).await;
            arbiter.stop();
            assert_eq!(
                (after_one, after_two),
                (1, 2),
                "resyncs after one and two changes"
            );
        });
}

#[tokio::test(start_paused = true)]
async fn an_election_that_keeps_returning_backs_off_and_spends_the_restart_budget() {
    const NAME: &str = "leader_election_return_budget_test";
    crate::metrics::handle();
    let before = crate::testing::restarts(NAME);
    let backoff = Duration::from_secs(3);
    let scope = crate::supervisor::Supervision::with_backoff(backoff);
    let (tx, mut leader) = watch::channel(false);
    let (stop, shutdown) = watch::channel(false);
    let supervised = supervise(NAME, tx, shutdown, |leading| async move {
        leading.send_replace(true);
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let running = scope.clone();
    let task = tokio::spawn(async move { running.scope(supervised).await });
    until(&mut leader, true).await;
    let budget = crate::supervisor::RESTART_BUDGET;
    let mut delays = Vec::new();
    for _ in 0..=budget {
        let down = until(&mut leader, false).await;
        let up = until(&mut leader, true).await;
        delays.push(up - down);
    }
    // The scope's backoff, doubling: the same as a panicking election's.
    assert_eq!(delays[..3], [backoff, backoff * 2, backoff * 4]);
    assert_eq!(scope.recent_restarts(NAME), budget + 1);
    assert_eq!(
        crate::testing::restarts(NAME) - before,
        u64::try_from(budget + 1).expect("small")
    );
    let exhausted = scope.exhausted().borrow().clone();
    assert_eq!(
        exhausted.map(|e| e.actor),
        Some(NAME),
        "past the budget the replica is unhealthy"
    );
    stop.send_replace(true);
    task.await.expect("supervision ends on shutdown");
}
