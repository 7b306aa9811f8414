//! The control plane's Kubernetes version, read at start and again every
//! [`KUBERNETES_VERSION_REFRESH`] as upstream re-reads it, into the provider's
//! [`KubernetesVersion`]: after an EKS upgrade the next EC2NodeClass resolution picks the
//! new version's AMIs, and the nodes on the old ones drift and are replaced — no restart.
//! A failed read keeps the version known and is logged; the next tick tries again. The
//! loop is supervised ([`supervise`]): a panic restarts it.

use std::time::Duration;

use kerf_aws::version::KubernetesVersion;
use kube::Client;

/// How often the version is re-read: upstream's version provider caches it 15 minutes.
pub const KUBERNETES_VERSION_REFRESH: Duration = Duration::from_secs(15 * 60);

/// Why the version could not be read.
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    #[error("reading the Kubernetes API server's version")]
    Read(#[source] kube::Error),
    #[error("the API server reports version major={major:?} minor={minor:?}")]
    Unparseable { major: String, minor: String },
}

/// The API server's `major.minor` (`1.33`; EKS's `33+` minors lose their suffix).
pub async fn read(client: &Client) -> Result<String, VersionError> {
    let info = client
        .apiserver_version()
        .await
        .map_err(VersionError::Read)?;
    major_minor(&info.major, &info.minor).ok_or(VersionError::Unparseable {
        major: info.major,
        minor: info.minor,
    })
}

/// `1.33` from the API server's `major` and `minor`.
pub fn major_minor(major: &str, minor: &str) -> Option<String> {
    let digits = |s: &str| -> Option<u32> {
        s.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .ok()
    };
    Some(format!("{}.{}", digits(major)?, digits(minor)?))
}

/// The supervised task's name, in `kerf_actor_restarts_total{actor}` and the fault hooks.
pub const TASK_NAME: &str = "kubernetes_version";

/// [`follow`], supervised as [`TASK_NAME`] in the current scope: a panicking follower is
/// logged, counted and started again (its next read one period later). Abort the handle to
/// stop it.
pub fn supervise(
    client: Client,
    version: KubernetesVersion,
    every: Duration,
) -> tokio::task::JoinHandle<()> {
    kerf_actors::supervisor::task(TASK_NAME, move || {
        follow(client.clone(), version.clone(), every)
    })
}

/// Re-reads the version into `version` every `every` (the first read after one period: the
/// start-up read is fresh), for ever.
pub async fn follow(client: Client, version: KubernetesVersion, every: Duration) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match read(&client).await {
            Ok(now) => {
                if let Some(before) = version.set(&now) {
                    tracing::info!(
                        from = before,
                        to = now,
                        "kubernetes version changed; node classes resolve their AMIs for it next"
                    );
                }
            }
            Err(error) => tracing::warn!(
                error = %error,
                error.source = ?std::error::Error::source(&error).map(ToString::to_string),
                kept = version.get(),
                "re-reading the kubernetes version failed; keeping the one known"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_actors::supervisor::Supervision;
    use kerf_loadtest::apiserver::{ApiServer, RunningServer, ServerConfig};

    /// Waits until `version` reads `want`, failing at `deadline`.
    async fn reaches(version: &KubernetesVersion, want: &str, deadline: tokio::time::Instant) {
        while version.get() != want {
            assert!(
                tokio::time::Instant::now() < deadline,
                "still {}",
                version.get()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The API emulator and a client of it.
    async fn emulator() -> (RunningServer, Client) {
        let server = ApiServer::start(ServerConfig::default())
            .await
            .expect("emulator");
        let url = server.url().parse().expect("a url");
        let client = Client::try_from(kube::Config::new(url)).expect("client");
        (server, client)
    }

    #[tokio::test]
    async fn an_upgraded_control_plane_reaches_the_providers_version_at_the_next_read() {
        let (server, client) = emulator().await;
        let version = KubernetesVersion::new(read(&client).await.expect("read at start"));
        assert_eq!(version.get(), "1.33");
        let following = tokio::spawn(follow(client, version.clone(), Duration::from_millis(20)));

        server.set_kubernetes_minor(34);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        reaches(&version, "1.34", deadline).await;
        following.abort();
        server.shutdown().await;
    }

    #[tokio::test]
    async fn a_failed_read_keeps_the_version_known() {
        // Nothing listens on port 1: every read fails.
        let url = "http://127.0.0.1:1".parse().expect("a url");
        let client = Client::try_from(kube::Config::new(url)).expect("client");
        let version = KubernetesVersion::new("1.33");
        let following = tokio::spawn(follow(client, version.clone(), Duration::from_millis(10)));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !following.is_finished(),
            "the loop goes on after failed reads"
        );
        assert_eq!(version.get(), "1.33");
        following.abort();
    }

    #[tokio::test]
    async fn a_follower_that_panicked_is_restarted_counted_and_follows_an_upgrade() {
        let (server, client) = emulator().await;
        let version = KubernetesVersion::new("1.33");
        kerf_actors::metrics::handle();
        let restarts = || {
            let series = format!(
                "{}{{actor=\"{TASK_NAME}\"}} ",
                kerf_actors::metrics::ACTOR_RESTARTS
            );
            kerf_actors::metrics::render()
                .lines()
                .find_map(|line| line.strip_prefix(&series))
                .map_or(0, |v| v.trim().parse::<u64>().expect("a counter value"))
        };
        let before = restarts();
        let scope = Supervision::with_backoff(Duration::from_millis(10));
        scope.faults().arm(TASK_NAME, 1).expect("a loop fault");
        let following =
            scope.sync_scope(|| supervise(client, version.clone(), Duration::from_millis(20)));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while scope.recent_restarts(TASK_NAME) == 0 {
            assert!(tokio::time::Instant::now() < deadline, "never restarted");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(restarts() - before, 1, "counted");
        assert_eq!(scope.faults().remaining(TASK_NAME), 0);

        // The follower built again reads the upgraded control plane.
        server.set_kubernetes_minor(34);
        reaches(&version, "1.34", deadline).await;
        assert_eq!(scope.recent_restarts(TASK_NAME), 1, "one restart");
        following.abort();
        server.shutdown().await;
    }

    #[test]
    fn versions_drop_provider_suffixes() {
        assert_eq!(major_minor("1", "33").as_deref(), Some("1.33"));
        assert_eq!(major_minor("1", "31+").as_deref(), Some("1.31"));
        assert_eq!(major_minor("", "31"), None);
    }
}
