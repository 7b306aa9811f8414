//! `kerf simulate --api-only`: only the Kubernetes API emulator with kerf's CRDs, serving
//! until Ctrl-C or SIGTERM — no controller, simulated EC2, kubelets or scheduler. It is the
//! cluster an external `kerf controller` runs against, e.g. with moto as its AWS (README's
//! developer recipe), where an in-process controller would launch for the same pods.

use std::path::Path;

use anyhow::Context as _;
use kerf_loadtest::apiserver::{ApiServer, ServerConfig};

use super::world::install_crds;

/// Serves the emulator, with its kubeconfig at `kubeconfig_out`, until a stop signal.
pub async fn serve(kubeconfig_out: &Path) -> anyhow::Result<()> {
    let server = ApiServer::start(ServerConfig::default())
        .await
        .context("starting the API emulator")?;
    install_crds(&server.cluster())?;
    // Installed before the ready line: a signal sent as soon as it is read must stop the
    // emulator, not kill the process.
    let stop = super::StopSignal::install().context("installing the signal handlers")?;
    server
        .write_kubeconfig(kubeconfig_out)
        .with_context(|| format!("--kubeconfig-out {}", kubeconfig_out.display()))?;
    eprintln!(
        "API emulator at {} with kerf's CRDs; kubeconfig: {}; Ctrl-C stops it",
        server.url(),
        kubeconfig_out.display()
    );
    stop.wait().await;
    server.shutdown().await;
    Ok(())
}
