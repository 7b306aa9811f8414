//! The messages `docs/troubleshooting.md` promises, read from the document itself, so each test
//! that produces a message checks it against the words a user reads there. A message is a
//! fenced block opened with ```` ```text kerf-message:ID ````; its content is a fragment that
//! appears verbatim in what kerf prints. Test support only.

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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            documented("cpu-typo"),
            "no instance type has enough resources (CPU request >= 1 Million, m vs M typo?)"
        );
    }
}
