//! The link check: every relative link in the project's Markdown points at a file that
//! exists, and every `#anchor` at a heading of the target page, with headings turned into
//! anchors as GitHub and mdBook do (lowercase; letters, digits, `-` and `_` kept, spaces to
//! `-`, everything else dropped; a repeated heading gets `-1`, `-2`, …). Links inside code
//! blocks and code spans are not links and are skipped.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use regex::Regex;

use super::repo;

/// Every broken link of README.md, CONTRIBUTING.md, CHANGELOG.md and docs/**/*.md, as
/// `file:line: link: why`.
pub fn broken() -> Vec<String> {
    let root = repo();
    let mut files: Vec<PathBuf> = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md"]
        .iter()
        .map(|f| root.join(f))
        .collect();
    files.extend(markdown_files(&root.join("docs")));
    files.iter().flat_map(|f| check_file(f)).collect()
}

/// The `.md` files under `dir`, recursively, sorted.
pub fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(markdown_files(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The broken links of one Markdown file.
pub fn check_file(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let shown = file
        .strip_prefix(repo())
        .unwrap_or(file)
        .display()
        .to_string();
    let inline = Regex::new(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+[^)]*)?\)").unwrap();
    let reference = Regex::new(r"^\s*\[[^\]]+\]:\s+(\S+)").unwrap();
    let mut broken = Vec::new();
    let span = Regex::new(r"`[^`]*`").unwrap();
    for (number, line) in prose_lines(&text) {
        let line = span.replace_all(line, "``");
        let targets = inline
            .captures_iter(&line)
            .chain(reference.captures_iter(&line))
            .map(|c| c[1].to_owned());
        for target in targets {
            if let Err(why) = resolve(file, &target) {
                broken.push(format!("{shown}:{number}: {target}: {why}"));
            }
        }
    }
    broken
}

/// The lines outside fenced code blocks, numbered from 1.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// Checks one link target written in `from`: external links are not followed.
fn resolve(from: &Path, target: &str) -> Result<(), String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return Ok(());
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        from.to_path_buf()
    } else {
        from.parent().unwrap().join(path)
    };
    if !file.exists() {
        return Err(format!("{} does not exist", file.display()));
    }
    let Some(anchor) = anchor else {
        return Ok(());
    };
    if file.extension().is_none_or(|e| e != "md") {
        return Err("an anchor into a file that is not Markdown".to_owned());
    }
    let anchors = heading_anchors(&std::fs::read_to_string(&file).unwrap());
    if anchors.contains(anchor) {
        Ok(())
    } else {
        Err(format!("no heading of {} has this anchor", file.display()))
    }
}

/// The anchors of a page's headings.
pub fn heading_anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for (_, line) in prose_lines(text) {
        let Some(title) = line.trim_start().strip_prefix('#') else {
            continue;
        };
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let base = slug(title);
        let mut anchor = base.clone();
        let mut n = 0;
        while !seen.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
    }
    seen
}

/// A heading's anchor, as GitHub and mdBook make it.
fn slug(title: &str) -> String {
    title
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}
