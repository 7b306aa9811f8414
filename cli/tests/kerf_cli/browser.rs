//! A real browser reading a report page: Debian's headless Chromium (installed by
//! `scripts/test.sh`; a test that needs it is skipped with a note where it is missing)
//! renders the page to a screenshot and dumps the DOM it built, and says in its log whatever
//! the page sent to the console.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Chromium binary: `CHROMIUM`, else Debian's.
pub fn chromium() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".to_owned()));
    let found = Command::new(&path)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    found.then_some(path)
}

/// What the browser made of a page.
pub struct Rendered {
    /// The DOM after loading, serialised.
    pub dom: String,
    /// Console messages the page produced (Chromium logs each as a `CONSOLE` line).
    pub console: Vec<String>,
}

/// Loads `page` in headless Chromium with no network beyond the file, writes a full-page
/// screenshot to `screenshot`, and returns the DOM and the console messages.
pub fn render(chromium: &Path, page: &Path, screenshot: &Path) -> Rendered {
    let profile = std::env::temp_dir().join(format!("kerf-chromium-{}", std::process::id()));
    let url = format!("file://{}", page.display());
    let run = |extra: &[String]| {
        let out = Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--enable-logging=stderr",
                "--v=0",
                "--window-size=1100,2600",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(extra)
            .arg(&url)
            .output()
            .expect("chromium runs");
        assert!(
            out.status.success(),
            "chromium failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    let shot = run(&[format!("--screenshot={}", screenshot.display())]);
    let dumped = run(&["--dump-dom".to_owned()]);
    let _ = std::fs::remove_dir_all(&profile);
    let console = [&shot.stderr, &dumped.stderr]
        .iter()
        .flat_map(|log| {
            String::from_utf8_lossy(log)
                .lines()
                .filter(|l| l.contains(":CONSOLE"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    Rendered {
        dom: String::from_utf8_lossy(&dumped.stdout).into_owned(),
        console,
    }
}
