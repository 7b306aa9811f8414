//! `kerf controller` end to end through the built binary: bad settings stop start-up by
//! name; against the API emulator (and moto for AWS) it logs JSON, syncs, leads, and on
//! SIGTERM exits cleanly after releasing its leader Lease.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use kerf_loadtest::apiserver::{ApiServer, ServerConfig};
use serde_json::{Value, json};

mod aws_support;

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
    let server = ApiServer::start(ServerConfig::default()).await.unwrap();
    let cluster = server.cluster();
    let crds = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
    for file in [
        "karpenter.sh_nodepools.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.k8s.aws_ec2nodeclasses.yaml",
    ] {
        let yaml = std::fs::read_to_string(crds.join(file)).unwrap();
        cluster.apply_crd_yaml(&yaml).unwrap();
    }
    cluster
        .create(
            "v1",
            "namespaces",
            json!({"metadata": {"name": "karpenter"}}),
        )
        .unwrap();
    let kubeconfig = std::env::temp_dir().join(format!(
        "kerf-cli-controller-{}.kubeconfig",
        std::process::id()
    ));
    server.write_kubeconfig(&kubeconfig).unwrap();

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
