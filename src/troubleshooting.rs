//! The messages `docs/troubleshooting.md` promises, read from the document itself, so each test
//! that produces a message checks it against the words a user reads there. A message is a
//! fenced block opened with ```` ```text kerf-message:ID ````; its content is a fragment that
//! appears verbatim in what kerf prints. [`entry_for`] maps a message back to its entry (the
//! `###` heading above it and its anchor), for `kerf explain` to point at.

/// The document, as shipped in the repository.
pub const DOCUMENT: &str = include_str!("../docs/troubleshooting.md");

const OPENING: &str = "```text kerf-message:";

/// Every documented message: (id, fragment), in document order.
pub fn messages() -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    let mut rest = DOCUMENT;
    while let Some(at) = rest.find(OPENING) {
        let after = &rest[at + OPENING.len()..];
        let Some((id, body)) = after.split_once('\n') else {
            break;
        };
        let Some(end) = body.find("\n```") else {
            break;
        };
        out.push((id.trim(), body[..end].trim()));
        rest = &body[end..];
    }
    out
}

/// The fragment documented under `id`.
///
/// # Panics
/// When the document has no such message: the test names one that was removed or renamed.
pub fn documented(id: &str) -> &'static str {
    messages()
        .into_iter()
        .find(|(name, _)| *name == id)
        .map(|(_, fragment)| fragment)
        .unwrap_or_else(|| panic!("docs/troubleshooting.md documents no message {id:?}"))
}

/// The troubleshooting entry a message belongs to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// The message's id (`kerf-message:ID`).
    pub id: String,
    /// The entry's heading.
    pub title: String,
    /// `docs/troubleshooting.md#ANCHOR`, as the book links it.
    pub link: String,
}

/// The entry whose documented message appears in `text`, the first in document order.
pub fn entry_for(text: &str) -> Option<Entry> {
    messages()
        .into_iter()
        .find(|(_, fragment)| text.contains(fragment))
        .and_then(|(id, _)| entry(id))
}

/// The entry documenting message `id`: the `###` heading above its block.
pub fn entry(id: &str) -> Option<Entry> {
    let at = DOCUMENT.find(&format!("{OPENING}{id}\n"))?;
    let heading = DOCUMENT[..at].rfind("\n### ")?;
    let title = DOCUMENT[heading + 5..].lines().next()?.trim();
    Some(Entry {
        id: id.to_owned(),
        title: title.to_owned(),
        link: format!("docs/troubleshooting.md#{}", anchor(title)),
    })
}

/// mdBook's heading id: lowercase, whitespace to `-`, only alphanumerics, `-` and `_` kept.
pub fn anchor(title: &str) -> String {
    title
        .chars()
        .filter_map(|c| {
            if c.is_whitespace() {
                Some('-')
            } else if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_ascii_lowercase())
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_leads_to_the_heading_above_it_and_the_books_anchor() {
        let entry = entry_for(&format!("pod x: {}", documented("max-pods-eni"))).expect("found");
        assert_eq!(entry.id, "max-pods-eni");
        assert_eq!(
            entry.title,
            "Pods stay ContainerCreating: maxPods above the VPC CNI's IP limit"
        );
        assert_eq!(
            entry.link,
            "docs/troubleshooting.md#pods-stay-containercreating-maxpods-above-the-vpc-cnis-ip-limit"
        );
        assert_eq!(entry_for("nothing documented"), None);
    }

    #[test]
    fn every_message_has_a_unique_id_and_a_one_line_fragment() {
        let messages = messages();
        assert!(messages.len() >= 10, "{messages:?}");
        let mut ids: Vec<&str> = messages.iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), messages.len(), "duplicate ids");
        for (id, fragment) in &messages {
            assert!(
                !fragment.is_empty() && !fragment.contains('\n'),
                "{id}: {fragment:?}"
            );
        }
        for (id, _) in &messages {
            assert!(entry(id).is_some(), "{id} has no heading above it");
        }
        assert_eq!(
            documented("cpu-typo"),
            "no instance type has enough resources (CPU request >= 1 Million, m vs M typo?)"
        );
    }
}
