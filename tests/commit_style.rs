//! The commit style (CONTRIBUTING.md, "Commits") as `.githooks/commit-msg` enforces it, on
//! commit and, through `scripts/check-commits.sh`, over every new commit in CI: the hook
//! accepts `area: imperative summary` messages and refuses each way of breaking the rule.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

/// Whether the hook accepts `message`, given as git hands it a message file.
fn accepts(message: &str) -> bool {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("kerf-commit-style-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("COMMIT_EDITMSG");
    std::fs::write(&file, message).unwrap();
    let status = Command::new("bash")
        .arg(root.join(".githooks/commit-msg"))
        .arg(&file)
        .status()
        .unwrap();
    status.success()
}

#[test]
fn the_commit_msg_hook_accepts_the_style_and_refuses_what_breaks_it() {
    for good in [
        "provisioner: keep the prepared nodes between rounds\n",
        "aws: say a node role name over 64 characters\n\nWhy, and the figures.\n",
        "kerf-heap: trim the allocator's doc\n# a comment line git drops\n",
        "Merge branch 'docs': the book\n",
    ] {
        assert!(accepts(good), "refused: {good:?}");
    }
    let long = format!("scheduling: {}\n", "x".repeat(61));
    assert_eq!(long.trim_end().chars().count(), 73);
    for bad in [
        "",
        "Provisioner: an area in capitals\n",
        "no area before the summary\n",
        "docs:no space after the colon\n",
        long.as_str(),
        "docs: a subject that ends with a full stop.\n",
        "docs: a body without a blank line\nbefore it\n",
    ] {
        assert!(!accepts(bad), "accepted: {bad:?}");
    }
    let exactly = format!("scheduling: {}\n", "x".repeat(60));
    assert!(accepts(&exactly), "refused a subject of 72 characters");
}
