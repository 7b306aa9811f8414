//! Compares a generated reference page with the committed one, or rewrites it when
//! `KERF_BLESS=1` is set.

use super::repo;

/// The first line of every generated page.
pub const GENERATED: &str = "<!-- Generated from the code by cli/tests/docs; do not edit. \
Regenerate: KERF_BLESS=1 cargo test --workspace --test docs -->";

/// Fails unless docs/reference/`name` is `generated`; with `KERF_BLESS=1`, writes it.
pub fn check(name: &str, generated: &str) {
    let path = repo().join("docs/reference").join(name);
    if std::env::var_os("KERF_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed == generated {
        return;
    }
    let first_difference = committed
        .lines()
        .zip(generated.lines())
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .map_or_else(
            || {
                format!(
                    "the pages differ in length ({} committed lines, {} generated)",
                    committed.lines().count(),
                    generated.lines().count()
                )
            },
            |(i, (a, b))| format!("line {}:\n  committed: {a}\n  generated: {b}", i + 1),
        );
    panic!(
        "docs/reference/{name} is stale: the code says otherwise ({first_difference}).\n\
         Regenerate it with: KERF_BLESS=1 cargo test --workspace --test docs"
    );
}
