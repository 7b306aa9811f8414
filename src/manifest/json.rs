//! Cutting a JSON stream into pieces without parsing it: each top-level document, and each
//! element of the `items` array at the top level of a document, as its own bytes, so that
//! serde_json decodes each from a slice (several times faster than from a reader, which it
//! reads one byte per call) while only one item's text is held. The cutter follows strings
//! (and their escapes) and bracket depth and counts lines, so every piece knows the line
//! and column it starts at, and serde_json's errors on a piece are mapped back to the
//! input's positions, reading exactly as they did when the whole stream was one parse.
//!
//! Structure the cutter owns (between `items` elements) it checks as serde_json would, with
//! serde_json's messages; everything inside a piece is left to serde_json. A document whose
//! text before its `items` array does not parse is not cut at all, so its error comes
//! before any of its items, as it did.

use std::io::{self, BufRead};

/// Where a piece starts in the input (1-based; the column counts bytes, as serde_json does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct At {
    pub line: u64,
    pub column: u64,
}

/// One piece of the stream, in input order: a document's items come before the document.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    Item {
        bytes: Vec<u8>,
        at: At,
    },
    Document(Document),
    /// Structure between items that serde_json refuses: its message, located.
    Broken {
        message: String,
        at: At,
    },
}

/// A document's bytes with its items cut out (leaving `[]`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Document {
    pub bytes: Vec<u8>,
    pub at: At,
    cut: Option<Cut>,
}

/// Where the items were cut out of a document's bytes; positions relative to the
/// document (its first byte at line 1, column 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cut {
    /// The `]` in the document's bytes, right after the `[`.
    close: At,
    /// The same `]` in the input.
    original: At,
}

impl Document {
    /// The input's position of `line`/`column` (1-based) in the document's bytes.
    pub fn position(&self, line: u64, column: u64) -> (u64, u64) {
        let (line, column) = match self.cut {
            Some(Cut { close, original }) if line > close.line => {
                (line + original.line - close.line, column)
            }
            Some(Cut { close, original }) if line == close.line && column >= close.column => {
                (original.line, column - close.column + original.column)
            }
            _ => (line, column),
        };
        offset(self.at, line, column)
    }
}

/// The input's position of `line`/`column` (1-based) in a piece starting at `at`.
pub(crate) fn offset(at: At, line: u64, column: u64) -> (u64, u64) {
    if line <= 1 {
        (at.line, at.column - 1 + column)
    } else {
        (at.line + line - 1, column)
    }
}

/// Cuts `input` into pieces, handing each to `sink` until it returns false.
pub(crate) fn cut<R: BufRead>(input: R, sink: &mut dyn FnMut(Piece) -> bool) -> io::Result<()> {
    let mut cutter = Cutter {
        input,
        line: 1,
        column: 1,
        item_size: 0,
    };
    loop {
        cutter.skip_blanks(None)?;
        let Some(first) = cutter.peek()? else {
            return Ok(());
        };
        let at = cutter.at();
        let mut bytes = Vec::new();
        if first == b'{' {
            match cutter.object(&mut bytes, at, sink)? {
                Cutting::Stopped => return Ok(()),
                Cutting::Done(cut) => {
                    if !sink(Piece::Document(Document { bytes, at, cut })) {
                        return Ok(());
                    }
                }
                Cutting::Broken(piece) => {
                    sink(piece);
                    return Ok(());
                }
            }
        } else {
            cutter.value(&mut bytes)?;
            if !sink(Piece::Document(Document {
                bytes,
                at,
                cut: None,
            })) {
                return Ok(());
            }
        }
    }
}

enum Cutting {
    /// The document ended; where its items were cut out, if they were.
    Done(Option<Cut>),
    /// The sink stopped listening.
    Stopped,
    /// The items' structure is broken: the piece saying so ends the stream.
    Broken(Piece),
}

struct Cutter<R> {
    input: R,
    /// The position of the next byte.
    line: u64,
    column: u64,
    /// The room to give the next item's bytes.
    item_size: usize,
}

impl<R: BufRead> Cutter<R> {
    fn at(&self) -> At {
        At {
            line: self.line,
            column: self.column,
        }
    }

    fn peek(&mut self) -> io::Result<Option<u8>> {
        Ok(self.input.fill_buf()?.first().copied())
    }

    /// Takes the next byte (known to be there), copying it to `out`.
    fn take(&mut self, byte: u8, out: &mut Vec<u8>) {
        out.push(byte);
        self.skip(byte);
    }

    fn skip(&mut self, byte: u8) {
        self.input.consume(1);
        if byte == b'\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
    }

    /// Skips JSON whitespace, copying it to `out` if given.
    fn skip_blanks(&mut self, mut out: Option<&mut Vec<u8>>) -> io::Result<Option<u8>> {
        loop {
            match self.peek()? {
                Some(byte @ (b' ' | b'\t' | b'\n' | b'\r')) => match out.as_deref_mut() {
                    Some(out) => self.take(byte, out),
                    None => self.skip(byte),
                },
                other => return Ok(other),
            }
        }
    }

    /// Copies one value: a string, an object or array to its matching close (bracket kinds
    /// are serde_json's to check), or any other token up to a delimiter (at least one byte).
    fn value(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        let Some(first) = self.peek()? else {
            return Ok(());
        };
        self.take(first, out);
        match first {
            b'"' => self.string(out),
            b'{' | b'[' => self.nested(out),
            _ if is_delimiter(first) => Ok(()),
            _ => {
                while let Some(byte) = self.peek()? {
                    if is_delimiter(byte) || matches!(byte, b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.take(byte, out);
                }
                Ok(())
            }
        }
    }

    /// Copies the rest of a string whose opening quote was taken.
    fn string(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        loop {
            let buffer = self.input.fill_buf()?;
            if buffer.is_empty() {
                return Ok(());
            }
            match buffer
                .iter()
                .position(|&b| matches!(b, b'"' | b'\\' | b'\n'))
            {
                None => {
                    let len = buffer.len();
                    out.extend_from_slice(buffer);
                    self.input.consume(len);
                    self.column += len as u64;
                }
                Some(end) => {
                    let stop = buffer[end];
                    out.extend_from_slice(&buffer[..end]);
                    self.input.consume(end);
                    self.column += end as u64;
                    self.take(stop, out);
                    match stop {
                        b'"' => return Ok(()),
                        b'\\' => {
                            if let Some(escaped) = self.peek()? {
                                self.take(escaped, out);
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    /// Copies the rest of an object or array whose opening bracket was taken: one pass over
    /// each buffer, following strings, escapes and depth, copying what it passed at once.
    fn nested(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        let mut scan = Nesting {
            depth: 1,
            in_string: false,
            escaped: false,
        };
        loop {
            let buffer = self.input.fill_buf()?;
            if buffer.is_empty() {
                return Ok(());
            }
            let (len, closed) = scan.over(buffer);
            let passed = &buffer[..len];
            out.extend_from_slice(passed);
            match passed.iter().rposition(|&b| b == b'\n') {
                Some(last) => {
                    self.line += bytecount(passed, b'\n');
                    self.column = (len - last) as u64;
                }
                None => self.column += len as u64,
            }
            self.input.consume(len);
            if closed {
                return Ok(());
            }
        }
    }

    /// Copies a top-level object (its opening `{` next) to `out`, cutting out the elements
    /// of its `items` array as pieces of their own.
    fn object(
        &mut self,
        out: &mut Vec<u8>,
        at: At,
        sink: &mut dyn FnMut(Piece) -> bool,
    ) -> io::Result<Cutting> {
        self.take(b'{', out);
        let mut cut = None;
        loop {
            match self.skip_blanks(Some(out))? {
                Some(b'"') => {}
                // Anything else is serde_json's to judge, on the document's bytes.
                _ => {
                    self.value(out)?;
                    return Ok(Cutting::Done(cut));
                }
            }
            let key_start = out.len();
            self.value(out)?;
            let is_items = &out[key_start..] == b"\"items\"";
            if self.skip_blanks(Some(out))? != Some(b':') {
                self.value(out)?;
                return Ok(Cutting::Done(cut));
            }
            self.take(b':', out);
            let next = self.skip_blanks(Some(out))?;
            if is_items && cut.is_none() && next == Some(b'[') && parses_before(out) {
                match self.items(out, at, sink)? {
                    Cutting::Done(items) => cut = items,
                    other => return Ok(other),
                }
            } else {
                self.value(out)?;
            }
            match self.skip_blanks(Some(out))? {
                Some(b',') => self.take(b',', out),
                _ => {
                    self.value(out)?;
                    return Ok(Cutting::Done(cut));
                }
            }
        }
    }

    /// Cuts the elements of the array (its `[` next) out as items, leaving `[]` in `out`.
    fn items(
        &mut self,
        out: &mut Vec<u8>,
        at: At,
        sink: &mut dyn FnMut(Piece) -> bool,
    ) -> io::Result<Cutting> {
        self.take(b'[', out);
        let open = self.at();
        let mut first = true;
        loop {
            let found = self.skip_blanks(None)?;
            let before = self.at();
            match found {
                None => {
                    let message = "EOF while parsing a list".to_owned();
                    let end = At {
                        line: self.line,
                        column: self.column - 1,
                    };
                    return Ok(broken(message, end));
                }
                Some(b']') if first => break,
                Some(_) if first => {}
                Some(b',') => {
                    self.skip(b',');
                    if self.skip_blanks(None)? == Some(b']') {
                        return Ok(broken("trailing comma".to_owned(), self.at()));
                    }
                }
                Some(b']') => break,
                Some(_) => return Ok(broken("expected `,` or `]`".to_owned(), before)),
            }
            first = false;
            let at = self.at();
            // Items of a dump are alike in size: room for the last one's saves regrowing.
            let mut bytes = Vec::with_capacity(self.item_size);
            self.value(&mut bytes)?;
            self.item_size = bytes.len() + bytes.len() / 4;
            if !sink(Piece::Item { bytes, at }) {
                return Ok(Cutting::Stopped);
            }
        }
        let close = self.at();
        self.take(b']', out);
        let within = |position: At| {
            let line = position.line - at.line + 1;
            let column = if line == 1 {
                position.column - at.column + 1
            } else {
                position.column
            };
            At { line, column }
        };
        let cut = Cut {
            close: within(open),
            original: within(close),
        };
        Ok(Cutting::Done(Some(cut)))
    }
}

/// Where [`Cutter::nested`] is in an object or array, across buffers.
struct Nesting {
    depth: usize,
    in_string: bool,
    /// The previous byte was a backslash inside a string.
    escaped: bool,
}

impl Nesting {
    /// How many bytes of `buffer` belong to the value, and whether it closed within them.
    fn over(&mut self, buffer: &[u8]) -> (usize, bool) {
        for (index, &byte) in buffer.iter().enumerate() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if byte == b'\\' {
                    self.escaped = true;
                } else if byte == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match byte {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        return (index + 1, true);
                    }
                }
                _ => {}
            }
        }
        (buffer.len(), false)
    }
}

fn bytecount(bytes: &[u8], needle: u8) -> u64 {
    bytes.iter().filter(|&&b| b == needle).count() as u64
}

fn is_delimiter(byte: u8) -> bool {
    matches!(byte, b',' | b':' | b'[' | b']' | b'{' | b'}' | b'"')
}

fn broken(message: String, at: At) -> Cutting {
    Cutting::Broken(Piece::Broken { message, at })
}

/// The document's text up to an `items` array's `[` parses (closed as `[]}`): a problem
/// before the items is reported before any of them.
fn parses_before(prefix: &[u8]) -> bool {
    let mut text = prefix.to_vec();
    text.extend_from_slice(b"[]}");
    serde_json::from_slice::<serde::de::IgnoredAny>(&text).is_ok()
}

#[cfg(test)]
mod tests {
    use super::super::{ManifestError, parse_str};

    /// serde_json's error on the whole text, as kerf reported it when JSON was read in one
    /// parse: the line and the message.
    fn whole(text: &str) -> (Option<u64>, String) {
        let stream = serde_json::Deserializer::from_str(text).into_iter::<serde_json::Value>();
        for value in stream {
            if let Err(e) = value {
                return (Some(e.line() as u64), e.to_string());
            }
        }
        panic!("{text:?} parses")
    }

    #[test]
    fn syntax_errors_read_as_one_parse_of_the_whole_text_reports_them() {
        for text in [
            r#"{"items": [{}, ]}"#,
            r#"{"items": [{} {}]}"#,
            "{\"items\": [{},\n  {}",
            "{\"items\": [{},\n  {}\n",
            r#"{"items": [{}"#,
            r#"{"items": [1 2]}"#,
            r#"{"a": x, "items": [{}]}"#,
            r#"{"items": [{}]]"#,
            r#"{"items": [{"a": tru}]}"#,
            "{\"items\": [\n  {\"a\": 1},\n  {\"b\": [1,}\n]}",
            r#"{"kind": "List", "items": [{"a": "x]"}, {}], "x": }"#,
            "{\"kind\": \"List\",\n \"items\": [\n{},\n{}\n ], \"x\": }",
            "{\"kind\": \"List\", \"items\": [\n{}], \"x\": }",
            "{\"items\": []} {\"a\": 1}\n x",
            "{\"items\": [{\"a\": \"\\u12\"}]}",
            "[1, 2\n",
            "{\"a\": 1,\n\"items\": [],}",
        ] {
            let error = parse_str(text, "f")
                .err()
                .unwrap_or_else(|| panic!("{text:?}"));
            let ManifestError::Parse { line, message, .. } = error else {
                panic!("{text:?}: {error:?}")
            };
            assert_eq!((line, message), whole(text), "{text:?}");
        }
    }

    #[test]
    fn items_and_documents_are_located_at_their_own_lines() {
        let text = "{\"kind\": \"List\", \"items\": [\n  {\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"a\"}},\n\n  {\"apiVersion\": \"v1\", \"kind\": \"Pod\",\n   \"metadata\": {\"name\": \"b]\\\"\"}}]}\n{\"apiVersion\": \"v1\", \"kind\": \"Node\", \"metadata\": {\"name\": \"n\"}}";
        let objects = super::super::parse_all(text, "f").expect("reads");
        let found: Vec<_> = objects
            .iter()
            .map(|o| (o.display_name(), o.source.line, o.source.document))
            .collect();
        assert_eq!(
            found,
            [
                ("Pod/a".to_owned(), Some(2), 1),
                ("Pod/b]\"".to_owned(), Some(4), 1),
                ("Node/n".to_owned(), Some(6), 2),
            ]
        );
    }
}
