//! kubectl against a kept `kerf simulate --kubeconfig-out` cluster: shared by the test files
//! that drive it as a user would (included by path, with `serving.rs` beside it). The real
//! kubectl is Debian's kubernetes-client, installed by `scripts/test.sh`; tests skip with a
//! note where it is missing.

#![allow(dead_code, reason = "each test file that includes it uses part of it")]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::serving;

/// Longest any one change (a scale-up, pods running again, a replacement) may take with
/// `--fast` delays before a test fails.
pub const PATIENCE: Duration = Duration::from_secs(90);

/// The kubectl to run, when one is installed (`KUBECTL`, else `kubectl` on the path).
pub fn kubectl_binary() -> Option<String> {
    let path = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".to_owned());
    let found = Command::new(&path)
        .args(["version", "--client"])
        .output()
        .is_ok_and(|out| out.status.success());
    found.then_some(path)
}

/// A running `kerf simulate` whose cluster stays up, and kubectl pointed at it.
pub struct Session {
    child: Child,
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    /// The kubectl binary.
    pub binary: String,
    /// What kerf printed on standard error up to its cluster being up.
    pub started: Vec<String>,
}

impl Session {
    /// `kerf simulate --fast -o json --pods PODS --kubeconfig-out …` plus `extra`, in a
    /// temporary directory named for `name`, once its cluster is up.
    pub fn start(kubectl: String, name: &str, pods: usize, extra: &[&str]) -> Self {
        Self::start_with_env(kubectl, name, pods, extra, &[])
    }

    /// [`Session::start`] with `env` set for kerf (controller settings such as
    /// `FEATURE_GATES`, which the simulated controller reads from its environment).
    pub fn start_with_env(
        kubectl: String,
        name: &str,
        pods: usize,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let dir = std::env::temp_dir().join(format!("kerf-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let kubeconfig = dir.join("kubeconfig");
        let mut child = Command::new(env!("CARGO_BIN_EXE_kerf"))
            .args(["simulate", "--fast", "-o", "json"])
            .args(["--pods", &pods.to_string()])
            .args(extra)
            .envs(env.iter().copied())
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kerf starts");
        let started = serving::until_serving(&mut child);
        Self {
            child,
            dir,
            kubeconfig,
            binary: kubectl,
            started,
        }
    }

    pub fn try_kubectl(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(&self.binary)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("kubectl runs");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.try_kubectl(args);
        assert!(ok, "kubectl {args:?} failed: {stderr}{stdout}");
        stdout
    }

    /// Polls `check` until it holds, or fails the test naming `what` after [`PATIENCE`].
    pub fn eventually(&self, what: &str, mut check: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !check(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
