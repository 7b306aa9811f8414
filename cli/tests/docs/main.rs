//! What the documentation promises about itself. Every relative link and `#anchor` in
//! README.md, CONTRIBUTING.md, CHANGELOG.md and docs/ resolves ([`links`]); each page under
//! docs/reference/ is exactly what its generator makes from the code today ([`reference`]),
//! so a renamed setting, a new metric or a changed flag fails here until the page is
//! regenerated with `KERF_BLESS=1 cargo test --workspace --test docs`.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod cli_help;
mod helm_values;
mod links;
mod metrics;
mod reference;
mod settings;

use std::path::PathBuf;

/// The repository's root.
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `text` with the characters a Markdown table cell cannot hold escaped.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

#[test]
fn settings_reference_is_current() {
    reference::check("settings.md", &settings::page());
}

#[test]
fn metrics_reference_is_current() {
    reference::check("metrics.md", &metrics::page());
}

#[test]
fn cli_reference_is_current() {
    reference::check("cli.md", &cli_help::page());
}

#[test]
fn helm_values_reference_is_current() {
    reference::check("helm-values.md", &helm_values::page());
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let broken = links::broken();
    assert!(
        broken.is_empty(),
        "broken links (file:line: link: why):\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_link_check_finds_a_missing_file_and_a_missing_anchor() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs-links");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("page.md"),
        "# A page\n\n## Two words\n\n[ok](#two-words) [self](page.md#a-page)\n\
         [gone](missing.md) [bad](#three-words)\n```text\n[in code](nowhere.md)\n```\n",
    )
    .unwrap();
    let broken = links::check_file(&dir.join("page.md"));
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(broken[0].contains("page.md:6: missing.md"), "{broken:?}");
    assert!(broken[1].contains("page.md:6: #three-words"), "{broken:?}");
}

#[test]
fn the_book_summary_lists_every_page() {
    let docs = repo().join("docs");
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).unwrap();
    for page in links::markdown_files(&docs) {
        let relative = page
            .strip_prefix(&docs)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if relative == "SUMMARY.md" {
            continue;
        }
        assert!(
            summary.contains(&format!("]({relative})")),
            "docs/SUMMARY.md does not list {relative}: mdbook would not render it"
        );
    }
}
