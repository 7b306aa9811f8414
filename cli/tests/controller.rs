//! `kerf controller` end to end through the built binary: bad settings stop start-up by
//! name; against the API emulator (and moto for AWS) it logs JSON, syncs, leads, and on
//! SIGTERM exits cleanly after releasing its leader Lease. With faults injected
//! (`KERF_INJECT_FAULTS`), the binary-only loops are restarted, counted and work again, and
//! a loop panicking past the restart budget fails `/healthz` and makes the process exit 1.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kerf_actors::supervisor::RESTART_BUDGET;
use kerf_loadtest::apiserver::{ApiServer, RunningServer, ServerConfig};
use serde_json::Value;

mod aws_support;
mod cluster_support;

fn kerf() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kerf"));
    for var in [
        "CLUSTER_NAME",
        "METRICS_PORT",
        "HEALTH_PROBE_PORT",
        "BATCH_IDLE_DURATION",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

#[test]
fn invalid_settings_stop_start_up_naming_the_setting() {
    let out = kerf().arg("controller").output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("CLUSTER_NAME"), "{stderr}");

    let out = kerf()
        .args(["controller", "--cluster-name", "c"])
        .env("BATCH_IDLE_DURATION", "soon")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--batch-idle-duration"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_against_the_emulator_and_releases_its_lease_on_sigterm() {
    let (server, kubeconfig) = emulator("controller").await;
    let cluster = server.cluster();

    let mut cmd = kerf();
    aws_support::aws_env(&mut cmd, aws_support::moto().endpoint());
    let mut child = cmd
        .arg("controller")
        .env("KUBECONFIG", &kubeconfig)
        .env("CLUSTER_NAME", "test")
        .env("METRICS_PORT", "0")
        .env("HEALTH_PROBE_PORT", "0")
        .env("SYSTEM_NAMESPACE", "karpenter")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let (mut synced, mut leading) = (false, false);
    let waited = tokio::time::timeout(Duration::from_secs(30), async {
        while !(synced && leading) {
            let line = lines.recv().await.expect("controller still logging");
            let entry: Value = serde_json::from_str(&line).expect("every log line is JSON");
            assert!(
                entry["level"].is_string() && entry["time"].is_string(),
                "{line}"
            );
            match entry["message"].as_str() {
                Some("cluster state synced") => synced = true,
                Some("acquired leader lease") => leading = true,
                _ => {}
            }
        }
    })
    .await;
    if waited.is_err() {
        let _ = child.kill();
        panic!("controller did not sync and lead in time (synced {synced}, leading {leading})");
    }

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    let lease = cluster
        .get(
            "coordination.k8s.io/v1",
            "leases",
            Some("karpenter"),
            "karpenter-leader-election",
        )
        .unwrap();
    assert!(
        lease["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "{lease}"
    );
    let _ = std::fs::remove_file(&kubeconfig);
    server.shutdown().await;
}

/// The API emulator with the Karpenter CRDs and the chart's namespace, and a kubeconfig
/// file for it named after `test`.
async fn emulator(test: &str) -> (RunningServer, PathBuf) {
    let server = ApiServer::start(ServerConfig::default()).await.unwrap();
    let cluster = server.cluster();
    cluster_support::install_karpenter(&cluster);
    let kubeconfig =
        std::env::temp_dir().join(format!("kerf-cli-{test}-{}.kubeconfig", std::process::id()));
    server.write_kubeconfig(&kubeconfig).unwrap();
    (server, kubeconfig)
}

/// `kerf controller` against the emulator in `kubeconfig` and moto, with `faults` injected
/// and every log line sent to the returned channel as JSON. Killed when dropped.
struct Faulted {
    child: Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<Value>,
}

impl Drop for Faulted {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Faulted {
    fn start(kubeconfig: &Path, faults: &str) -> Self {
        let mut cmd = kerf();
        aws_support::aws_env(&mut cmd, aws_support::moto().endpoint());
        let mut child = cmd
            .arg("controller")
            .env("KUBECONFIG", kubeconfig)
            .env("CLUSTER_NAME", "test")
            .env("METRICS_PORT", "0")
            .env("HEALTH_PROBE_PORT", "0")
            .env("SYSTEM_NAMESPACE", "karpenter")
            .env("LOG_LEVEL", "debug")
            .env("KERF_INJECT_FAULTS", faults)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (lines_tx, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let entry: Value = serde_json::from_str(&line).expect("every log line is JSON");
                if lines_tx.send(entry).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// Reads log lines until `wanted` holds for one, which it returns.
    async fn until(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        let found = tokio::time::timeout(Duration::from_secs(90), async {
            loop {
                let Some(entry) = self.lines.recv().await else {
                    panic!("the controller stopped logging before {what}");
                };
                if wanted(&entry) {
                    return entry;
                }
            }
        })
        .await;
        found.unwrap_or_else(|_| panic!("no log line: {what}"))
    }

    /// The metrics and probe addresses the controller logged.
    async fn endpoints(&mut self) -> (SocketAddr, SocketAddr) {
        let entry = self
            .until("serving endpoints", |e| e["message"] == "serving endpoints")
            .await;
        let addr = |key: &str| -> SocketAddr {
            let addr: SocketAddr = entry[key].as_str().unwrap().parse().unwrap();
            // Bound on every interface; reached on loopback.
            SocketAddr::from(([127, 0, 0, 1], addr.port()))
        };
        (addr("metrics"), addr("probes"))
    }

    /// Waits for the restart log line of `actor`.
    async fn restarted(&mut self, actor: &str) -> Value {
        self.until(&format!("{actor} restarted"), |e| {
            e["actor"] == actor && e["message"] == "task panicked; restarting it"
        })
        .await
    }
}

/// One `GET path` on `stream` (kept alive): the status and body.
fn get_on(stream: &mut TcpStream, path: &str) -> std::io::Result<(u16, String)> {
    write!(stream, "GET {path} HTTP/1.1\r\nHost: kerf\r\n\r\n")?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or(std::io::ErrorKind::InvalidData)?;
    let header = |wanted: &str| {
        head.lines().find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case(wanted)
                .then(|| value.trim().to_ascii_lowercase())
        })
    };
    let body = if header("transfer-encoding").as_deref() == Some("chunked") {
        read_chunked(stream)?
    } else {
        let length = header("content-length").and_then(|v| v.parse().ok());
        let mut body = vec![0u8; length.unwrap_or(0)];
        stream.read_exact(&mut body)?;
        body
    };
    Ok((status, String::from_utf8_lossy(&body).to_string()))
}

/// A chunked body (`/metrics` is streamed), up to its last, empty chunk.
fn read_chunked(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            stream.read_exact(&mut byte)?;
            line.push(byte[0]);
        }
        let size = std::str::from_utf8(&line)
            .ok()
            .and_then(|l| usize::from_str_radix(l.trim(), 16).ok())
            .ok_or(std::io::ErrorKind::InvalidData)?;
        let mut chunk = vec![0u8; size + 2];
        stream.read_exact(&mut chunk)?;
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(&chunk[..size]);
    }
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    get_on(&mut stream, path).unwrap()
}

/// `kerf_actor_restarts_total{actor}` in the controller's `/metrics`.
fn restarts(metrics: SocketAddr, actor: &str) -> u64 {
    let series = format!("kerf_actor_restarts_total{{actor=\"{actor}\"}} ");
    get(metrics, "/metrics")
        .1
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_only_loops_are_restarted_counted_and_work_again_after_a_panic() {
    let (server, kubeconfig) = emulator("upkeep-panics").await;
    let mut controller = Faulted::start(&kubeconfig, "aws_upkeep=1,kubernetes_version=1");
    let (metrics, probes) = controller.endpoints().await;
    controller.restarted("aws_upkeep").await;
    // The upkeep built again refreshes the catalog from EC2 (only it does).
    controller
        .until("instance types refreshed after the restart", |e| {
            e["message"] == "fetched instance type offerings from EC2"
        })
        .await;
    // The version follower's first read is a period away; its restart is what shows here
    // (`version::tests` shows a restarted follower reading an upgrade).
    let deadline = Instant::now() + Duration::from_secs(30);
    while restarts(metrics, "kubernetes_version") == 0 {
        assert!(
            Instant::now() < deadline,
            "kubernetes_version never restarted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(restarts(metrics, "aws_upkeep"), 1);
    assert_eq!(restarts(metrics, "kubernetes_version"), 1);
    assert_eq!(
        get(probes, "/healthz"),
        (200, "ok".to_owned()),
        "within the budget"
    );

    let status = Command::new("kill")
        .args(["-TERM", &controller.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = controller.child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    let _ = std::fs::remove_file(&kubeconfig);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_restart_budget_the_controller_fails_healthz_and_exits_1() {
    let (server, kubeconfig) = emulator("budget").await;
    // The budget is 5 restarts; the sixth panic, about 31 s in (backoff 1, 2, 4, 8, 16 s),
    // exhausts it.
    let mut controller = Faulted::start(&kubeconfig, "aws_upkeep=6");
    let (_, probes) = controller.endpoints().await;
    // One connection, kept alive, asked over and over: its task answers until the process
    // exits, after the probe server stopped taking connections.
    let answers: Arc<Mutex<Vec<(u16, String)>>> = Arc::default();
    let seen = Arc::clone(&answers);
    let asking = std::thread::spawn(move || {
        let mut stream = TcpStream::connect(probes).unwrap();
        stream.set_nodelay(true).unwrap();
        while let Ok(answer) = get_on(&mut stream, "/healthz") {
            seen.lock().unwrap().push(answer);
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    controller
        .until("the fifth restart", |e| {
            e["actor"] == "aws_upkeep" && e["restarts_in_window"] == RESTART_BUDGET
        })
        .await;
    // From the sixth panic to the exit the controller stops, releasing its Lease: a second
    // per request to the API widens that from milliseconds, so the poll sees the failing
    // answer every run rather than when it wins a race.
    server.faults().set_latency(Duration::from_secs(1));
    controller
        .until("the budget runs out", |e| {
            e["message"] == "restart budget exhausted; the process is unhealthy"
        })
        .await;
    let stopped = controller
        .until("the controller stops", |e| {
            e["message"] == "controller stopped"
        })
        .await;
    assert_eq!(stopped["level"], "ERROR");
    let error = stopped["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("restart budget exhausted: actor aws_upkeep restarted 6 times"),
        "{stopped}"
    );
    let exit = controller.child.wait().unwrap();
    assert_eq!(exit.code(), Some(1), "{exit:?}");
    asking.join().unwrap();
    let answers = std::mem::take(&mut *answers.lock().unwrap());
    assert_eq!(
        answers.first().map(|(status, _)| *status),
        Some(200),
        "healthy before the budget ran out"
    );
    let failed: Vec<&(u16, String)> = answers.iter().filter(|(s, _)| *s != 200).collect();
    assert!(!failed.is_empty(), "/healthz never failed before the exit");
    for (status, body) in failed {
        assert_eq!(*status, 500);
        assert!(
            body.contains("restart budget exhausted: actor aws_upkeep restarted 6 times"),
            "{body}"
        );
    }
    let _ = std::fs::remove_file(&kubeconfig);
    server.shutdown().await;
}
