//! `kerf simulate --api-only`: only the Kubernetes API emulator with kerf's CRDs, serving
//! until Ctrl-C or SIGTERM — no controller, simulated EC2, kubelets or scheduler. It is the
//! cluster an external `kerf controller` runs against, e.g. with moto as its AWS (README's
//! developer recipe), where an in-process controller would launch for the same pods.

use std::future::Future;
use std::path::Path;

use anyhow::Context as _;
use kerf_loadtest::apiserver::{ApiServer, ServerConfig};

use super::world::install_crds;

/// Serves the emulator, with its kubeconfig at `kubeconfig_out`, until `stop` completes.
/// The caller installs the stop signal before calling, so a signal sent as soon as the ready
/// line is read stops the emulator rather than killing the process.
pub async fn serve(kubeconfig_out: &Path, stop: impl Future<Output = ()>) -> anyhow::Result<()> {
    let server = ApiServer::start(ServerConfig::default())
        .await
        .context("starting the API emulator")?;
    install_crds(&server.cluster())?;
    server
        .write_kubeconfig(kubeconfig_out)
        .with_context(|| format!("--kubeconfig-out {}", kubeconfig_out.display()))?;
    eprintln!(
        "API emulator at {} with kerf's CRDs; kubeconfig: {}; Ctrl-C stops it",
        server.url(),
        kubeconfig_out.display()
    );
    stop.await;
    server.shutdown().await;
    Ok(())
}
