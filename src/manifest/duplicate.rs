//! Where a duplicated YAML mapping key was first defined. The YAML parser reports only the
//! second definition, and the streaming reader keeps no text to look back into, so the
//! error path (and only it) looks at the text again: from the duplicate's line upwards,
//! through the lines of the same block mapping (same key column), to the first line that
//! sets the key. Flow mappings (`{a: 1, a: 2}`) and keys the scan cannot see are left
//! unnamed rather than guessed.

/// The 1-based line of the first definition of `key` in the block mapping whose duplicate
/// definition is at `line`/`column` (1-based, as the parser reports them).
pub fn first_definition(text: &str, key: &str, line: u64, column: u64) -> Option<u64> {
    let lines: Vec<&str> = text.lines().collect();
    let duplicate = usize::try_from(line).ok()?.checked_sub(1)?;
    let key_column = usize::try_from(column).ok()?.checked_sub(1)?;
    let mut found = None;
    for index in (0..duplicate.min(lines.len())).rev() {
        let Some(entry) = entry_at(lines[index]) else {
            continue;
        };
        if entry.key_column < key_column {
            break;
        }
        if entry.key_column == key_column {
            if unquoted(entry.key) == key {
                found = Some(index as u64 + 1);
            }
            // A `- ` before the key starts the sequence item the mapping belongs to.
            if entry.item_start {
                break;
            }
        }
    }
    found
}

/// The key of one line of a block mapping, where it starts, and whether a sequence dash
/// precedes it on the line.
struct Entry<'a> {
    key: &'a str,
    key_column: usize,
    item_start: bool,
}

/// `None` for blank lines, comments and lines that are not `key:` entries (continuations of
/// multi-line scalars, flow content), which neither end nor belong to the mapping.
fn entry_at(line: &str) -> Option<Entry<'_>> {
    let mut rest = line;
    let mut column = 0;
    let mut item_start = false;
    loop {
        let trimmed = rest.trim_start_matches(' ');
        column += rest.len() - trimmed.len();
        rest = trimmed;
        match rest.strip_prefix("- ") {
            Some(after) => {
                item_start = true;
                column += 2;
                rest = after;
            }
            None => break,
        }
    }
    if rest.is_empty() || rest.starts_with('#') {
        return None;
    }
    let end = key_end(rest)?;
    Some(Entry {
        key: &rest[..end],
        key_column: column,
        item_start,
    })
}

/// The length of the key before its `: ` (or `:` at the end of the line).
fn key_end(rest: &str) -> Option<usize> {
    if let Some(quote @ ('"' | '\'')) = rest.chars().next() {
        let close = rest[1..].find(quote)? + 2;
        return rest[close..].starts_with(':').then_some(close);
    }
    rest.char_indices().find_map(|(i, c)| {
        let after = &rest[i + c.len_utf8()..];
        (c == ':' && (after.is_empty() || after.starts_with(' '))).then_some(i)
    })
}

fn unquoted(key: &str) -> &str {
    key.strip_prefix('"')
        .and_then(|k| k.strip_suffix('"'))
        .or_else(|| key.strip_prefix('\'').and_then(|k| k.strip_suffix('\'')))
        .unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::first_definition;

    #[test]
    fn finds_the_sibling_above_in_the_same_mapping() {
        let text = "metadata:\n  name: a\n  labels:\n    x: y\n  name: b\n";
        assert_eq!(first_definition(text, "name", 5, 3), Some(2));
    }

    #[test]
    fn does_not_leave_the_mapping_for_an_outer_key_of_the_same_name() {
        let text = "name: outer\nspec:\n  other: 1\n  name: a\n  name: b\n";
        assert_eq!(first_definition(text, "name", 5, 3), Some(4));
        let text = "name: outer\nspec:\n  name: b\n";
        assert_eq!(first_definition(text, "name", 3, 3), None);
    }

    #[test]
    fn stays_inside_one_sequence_item() {
        let text = "- key: a\n  operator: In\n- key: b\n  key: c\n";
        assert_eq!(first_definition(text, "key", 4, 3), Some(3));
    }

    #[test]
    fn reads_quoted_keys_and_skips_comments_and_blank_lines() {
        let text = "\"karpenter.sh/nodepool\": a\n# note\n\nkarpenter.sh/nodepool: b\n";
        assert_eq!(
            first_definition(text, "karpenter.sh/nodepool", 4, 1),
            Some(1)
        );
    }

    #[test]
    fn a_position_outside_the_text_finds_nothing() {
        assert_eq!(first_definition("a: 1\n", "a", 0, 1), None);
        assert_eq!(first_definition("a: 1\n", "a", 9, 1), Some(1));
    }
}
