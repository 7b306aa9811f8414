//! Cutting YAML text, line by line, into pieces small enough to parse from a `&str` (which
//! serde-saphyr decodes several times faster than a reader): one piece per document and,
//! inside a `kind: List`, one per item of its `items:` block sequence. The cuts rest on
//! what YAML lets a line show without parsing:
//! - `---` or `...` at the start of a line (then a blank or the line's end) is a document
//!   marker and nothing else: the spec forbids it inside any content;
//! - after `items:` alone on a line at column 0, a block sequence whose first item is `- `
//!   at indent `k` has every content line of an item indented deeper than `k` (block and
//!   multi-line scalars included): an item ends at the next `- ` at indent `k`, the
//!   sequence at the first content line indented `k` or less that is not one.
//!
//! Anything else (a document that is not a `List`, `items:` in flow style, quoted or
//! indented) stays one piece. Each piece keeps its first line's number, so every line the
//! parser reports maps back to the input ([`Document::line`]).

use std::io::BufRead;

/// One piece of the input, in input order: a `List`'s items come before the document
/// holding them, which is complete only when its last line was read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// One item of a `List`'s `items:`, as the text of a one-item block sequence.
    Item {
        text: String,
        first_line: u64,
    },
    Document(Document),
}

/// A non-empty document's text, without the items that were cut out as pieces of their own.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Document {
    pub text: String,
    pub first_line: u64,
    /// Where items were cut out, if they were.
    pub cut: Option<Cut>,
}

/// The lines of a document's `items:` sequence that its text no longer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cut {
    /// How many lines of the document's text come before the cut.
    pub after: u64,
    /// How many lines were cut.
    pub lines: u64,
}

impl Document {
    /// The input's line number of line `line` (1-based) of [`Document::text`].
    pub fn line(&self, line: u64) -> u64 {
        let cut = self
            .cut
            .filter(|cut| line > cut.after)
            .map_or(0, |cut| cut.lines);
        self.first_line - 1 + line + cut
    }
}

/// Why the input could not be cut into pieces.
#[derive(Debug)]
pub(crate) enum SplitError {
    Read(std::io::Error),
    NotUtf8 { line: u64 },
}

/// Where the document being read stands with its `items:`.
#[derive(Debug)]
enum Items {
    /// No top-level `items:` line yet.
    Before,
    /// After `items:`, before its first content line.
    Pending,
    /// Inside the sequence: the item being read.
    In {
        indent: usize,
        item: String,
        item_line: u64,
        first_item_line: u64,
    },
    /// The items were cut out, or will not be.
    After,
}

/// The document being read.
#[derive(Debug)]
struct Current {
    text: String,
    first_line: u64,
    lines: u64,
    /// A `---` opened it.
    started: bool,
    /// It holds a node (not only comments, directives and markers).
    has_content: bool,
    items: Items,
    cut: Option<Cut>,
}

impl Current {
    fn new(first_line: u64) -> Self {
        Self {
            text: String::new(),
            first_line,
            lines: 0,
            started: false,
            has_content: false,
            items: Items::Before,
            cut: None,
        }
    }

    fn push(&mut self, line: &str) {
        self.text.push_str(line);
        self.lines += 1;
    }
}

/// Reads `input` line by line and hands out its [`Piece`]s.
pub(crate) struct Splitter<R> {
    input: R,
    buffer: Vec<u8>,
    /// The number of the next line to read.
    line: u64,
    current: Current,
    ready: std::collections::VecDeque<Piece>,
    ended: bool,
}

impl<R: BufRead> Splitter<R> {
    pub fn new(input: R) -> Self {
        Self {
            input,
            buffer: Vec::new(),
            line: 1,
            current: Current::new(1),
            ready: std::collections::VecDeque::new(),
            ended: false,
        }
    }

    /// The next piece, or `None` at the end of the input.
    pub fn next_piece(&mut self) -> Result<Option<Piece>, SplitError> {
        while self.ready.is_empty() && !self.ended {
            self.buffer.clear();
            let read = self
                .input
                .read_until(b'\n', &mut self.buffer)
                .map_err(SplitError::Read)?;
            let number = self.line;
            if read == 0 {
                self.ended = true;
                self.end_document(number);
                break;
            }
            self.line += 1;
            let buffer = std::mem::take(&mut self.buffer);
            let text =
                std::str::from_utf8(&buffer).map_err(|_| SplitError::NotUtf8 { line: number })?;
            let text = if number == 1 {
                text.strip_prefix('\u{feff}').unwrap_or(text)
            } else {
                text
            };
            self.take_line(text, number);
            self.buffer = buffer;
        }
        Ok(self.ready.pop_front())
    }

    fn take_line(&mut self, text: &str, number: u64) {
        let line = text.trim_end_matches(['\n', '\r']);
        if let Some(rest) = marker(line, "---") {
            if self.current.started || self.current.has_content {
                self.end_document(number);
            }
            self.current.started = true;
            self.current.has_content |= has_node(rest);
            self.current.push(text);
            return;
        }
        if let Some(rest) = marker(line, "...") {
            self.end_items(number);
            self.current.has_content |= has_node(rest);
            self.current.push(text);
            self.end_document(number + 1);
            return;
        }
        if self.take_item_line(text, line, number) {
            return;
        }
        if !self.current.started && line.starts_with('%') {
            // A directive belongs to the document its `---` opens.
        } else if has_node(line) {
            self.current.has_content = true;
        }
        if matches!(self.current.items, Items::Before) && is_items_key(line) {
            self.current.items = Items::Pending;
        }
        self.current.push(text);
    }

    /// Takes a line that belongs to the `items:` sequence; false for any other line.
    fn take_item_line(&mut self, text: &str, line: &str, number: u64) -> bool {
        let content = has_node(line);
        match &mut self.current.items {
            Items::Pending if content => {
                let indent = indent(line);
                if !is_item_start(line, indent) {
                    self.current.items = Items::After;
                    return false;
                }
                self.current.items = Items::In {
                    indent,
                    item: text.to_owned(),
                    item_line: number,
                    first_item_line: number,
                };
                true
            }
            Items::In { item, .. } if !content => {
                item.push_str(text);
                true
            }
            Items::In {
                indent,
                item,
                item_line,
                ..
            } => {
                let at = self::indent(line);
                if at > *indent {
                    item.push_str(text);
                    return true;
                }
                if at == *indent && is_item_start(line, at) {
                    let text = std::mem::replace(item, text.to_owned());
                    let first_line = std::mem::replace(item_line, number);
                    self.ready.push_back(Piece::Item { text, first_line });
                    return true;
                }
                self.end_items(number);
                false
            }
            _ => false,
        }
    }

    /// Ends the `items:` sequence before line `number`, handing out its last item.
    fn end_items(&mut self, number: u64) {
        if let Items::In {
            item,
            item_line,
            first_item_line,
            ..
        } = std::mem::replace(&mut self.current.items, Items::After)
        {
            self.ready.push_back(Piece::Item {
                text: item,
                first_line: item_line,
            });
            self.current.cut = Some(Cut {
                after: self.current.lines,
                lines: number - first_item_line,
            });
        }
    }

    /// Ends the document before line `number` (handing it out unless it is empty); the
    /// next one starts there.
    fn end_document(&mut self, number: u64) {
        self.end_items(number);
        let current = std::mem::replace(&mut self.current, Current::new(number));
        if current.has_content {
            self.ready.push_back(Piece::Document(Document {
                text: current.text,
                first_line: current.first_line,
                cut: current.cut,
            }));
        }
    }
}

/// What follows a document marker at the start of `line`, if it starts with one.
fn marker<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(marker)?;
    (rest.is_empty() || rest.starts_with([' ', '\t'])).then_some(rest)
}

/// The line holds (part of) a node: it is neither blank nor only a comment.
fn has_node(line: &str) -> bool {
    let line = line.trim_start_matches([' ', '\t']);
    !line.is_empty() && !line.starts_with('#')
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// `- ` (or a lone `-`) at `indent`: a block sequence entry.
fn is_item_start(line: &str, indent: usize) -> bool {
    line[indent..]
        .strip_prefix('-')
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
}

/// `items:` at column 0 with nothing after it but a comment: a block value follows.
fn is_items_key(line: &str) -> bool {
    line.strip_prefix("items:")
        .is_some_and(|rest| !has_node(rest) && (rest.is_empty() || rest.starts_with([' ', '\t'])))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(text: &str) -> Vec<Piece> {
        let mut splitter = Splitter::new(text.as_bytes());
        let mut out = Vec::new();
        while let Some(piece) = splitter.next_piece().expect("splits") {
            out.push(piece);
        }
        out
    }

    fn item(text: &str, first_line: u64) -> Piece {
        Piece::Item {
            text: text.to_owned(),
            first_line,
        }
    }

    fn document(text: &str, first_line: u64, cut: Option<(u64, u64)>) -> Piece {
        Piece::Document(Document {
            text: text.to_owned(),
            first_line,
            cut: cut.map(|(after, lines)| Cut { after, lines }),
        })
    }

    #[test]
    fn a_lists_items_are_cut_at_their_dashes() {
        let text = "apiVersion: v1\nitems:\n- a: 1\n  b: |\n    x\n\n    - y\n# between\n- c: 2\nkind: List\n";
        assert_eq!(
            pieces(text),
            [
                item("- a: 1\n  b: |\n    x\n\n    - y\n# between\n", 3),
                item("- c: 2\n", 9),
                document("apiVersion: v1\nitems:\nkind: List\n", 1, Some((2, 7))),
            ]
        );
        let Piece::Document(document) = &pieces(text)[2] else {
            unreachable!()
        };
        assert_eq!(
            [1, 2, 3].map(|line| document.line(line)),
            [1, 2, 10],
            "lines after the cut keep their numbers"
        );
    }

    #[test]
    fn indented_items_end_at_a_shallower_line() {
        let text = "items:\n  - a\n  -\n    b\nkind: List\n";
        assert_eq!(
            pieces(text),
            [
                item("  - a\n", 2),
                item("  -\n    b\n", 3),
                document("items:\nkind: List\n", 1, Some((1, 3))),
            ]
        );
    }

    #[test]
    fn documents_are_cut_at_markers_and_empty_ones_dropped() {
        let text = "# only a comment\n---\na: 1\n...\n%YAML 1.2\n---\n--- # empty\n--- b\r\n";
        assert_eq!(
            pieces(text),
            [
                document("# only a comment\n---\na: 1\n...\n", 1, None),
                document("--- b\r\n", 8, None),
            ]
        );
    }

    #[test]
    fn items_that_are_not_a_block_sequence_stay_in_the_document() {
        for text in [
            "items: [\n{a: 1}]\nkind: List\n",
            "items:\n  a: 1\n",
            "items: # c\n\n-x: 1\n",
            "\"items\":\n- a\n",
            "x:\n  items:\n  - a\n",
        ] {
            assert_eq!(pieces(text), [document(text, 1, None)], "{text}");
        }
    }

    #[test]
    fn a_marker_ends_the_items_and_the_document() {
        let text = "items:\n- a\n---\nitems:\n- b\n...\n";
        assert_eq!(
            pieces(text),
            [
                item("- a\n", 2),
                document("items:\n", 1, Some((1, 1))),
                item("- b\n", 5),
                document("---\nitems:\n...\n", 3, Some((2, 1))),
            ]
        );
    }

    #[test]
    fn text_that_is_not_utf8_is_named_by_line() {
        let mut splitter = Splitter::new(&b"a: 1\nb: \xff\n"[..]);
        assert!(matches!(
            splitter.next_piece(),
            Err(SplitError::NotUtf8 { line: 2 })
        ));
    }
}
