//! A fast reader for the block YAML that `kubectl get -o yaml` (and kerf's own fixtures)
//! write: block mappings and sequences (compact `- key: v` items included), plain, single-
//! and double-quoted scalars on one line, literal and folded block scalars, empty flow
//! `{}`/`[]` and comments. A cluster dump is hundreds of megabytes and serde-saphyr is the
//! slow part of reading one (`cargo bench --bench reader`), so every piece the splitter cuts
//! is first tried here: a byte scanner driving the same pruning seeds (`prune`), so what is
//! skipped is not built.
//!
//! It answers only where it is sure to answer as serde-saphyr would; anything else (anchors,
//! aliases, tags, non-empty flow collections, multi-line plain or quoted scalars, complex or
//! duplicate keys, tabs, CR line ends, bad indentation, a piece near the node limit) gives
//! the piece up ([`Fallback`]) to serde-saphyr, so behaviour and errors stay its own. Ambiguous plain
//! scalars (`1.5`, `yes`, `0x1f`, `.inf`) are typed by serde-saphyr one at a time; only
//! digit strings and `true`, `false`, `null` are typed here. Nodes are counted as
//! serde-saphyr counts them, so the per-document node limit adds up the same either way.

use std::borrow::Cow;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};
use serde_json::{Map, Value};

use super::prune::{PrunedObject, root_field};

/// Deeper than this the piece is left to serde-saphyr, whose own depth budget (64, the
/// `List` item's wrapping sequence included) then decides.
const MAX_DEPTH: usize = 60;

/// Keys one mapping may have here; duplicate keys are found by a linear scan, so a larger
/// mapping goes to serde-saphyr rather than costing quadratic time.
const MAX_KEYS: usize = 256;

/// The fast path gave up on a piece; serde-saphyr reads it instead.
#[derive(Debug)]
pub(crate) struct Fallback;

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not read by the fast YAML path")
    }
}

impl std::error::Error for Fallback {}

impl de::Error for Fallback {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Fallback
    }
}

type Fast<T> = Result<T, Fallback>;

/// What a piece read into, the line (within the piece) its mapping starts on, and the
/// YAML nodes it holds.
#[derive(Debug)]
pub(crate) struct Parsed<T> {
    pub value: T,
    pub line: u64,
    pub nodes: usize,
}

/// A document's top-level fields, and whether it has an (empty) `items:` key.
pub(crate) type DocumentFields = (Map<String, Value>, bool);

/// One `List` item's text (`- ...`, as the splitter cuts it) as a pruned object, if it
/// holds at most `max_nodes` nodes and the fast path reads all of it.
pub(crate) fn item(text: &str, max_nodes: usize) -> Option<Parsed<Value>> {
    let parsed = item_as::<PrunedObject>(text, max_nodes)?;
    Some(Parsed {
        value: parsed.value.0,
        line: parsed.line,
        nodes: parsed.nodes,
    })
}

/// One `List` item's text decoded as `T` (a pruned object, or a typed pod: see `typed`),
/// on the same terms as [`item`].
pub(crate) fn item_as<'a, T: de::Deserialize<'a>>(
    text: &'a str,
    max_nodes: usize,
) -> Option<Parsed<T>> {
    let mut parser = Parser::new(text, max_nodes)?;
    let read = (|| {
        let column = parser.next_content()?.ok_or(Fallback)?;
        if !parser.is_dash() {
            return Err(Fallback);
        }
        // The sequence wrapping the item counts towards serde-saphyr's depth.
        parser.depth = 1;
        let start = parser.item_start(column)?;
        let Start::Map(_) = start else {
            return Err(Fallback);
        };
        let line = parser.line;
        let value = T::deserialize(Node {
            parser: &mut parser,
            start,
        })?;
        parser.at_end()?;
        Ok(Parsed {
            value,
            line,
            nodes: parser.nodes,
        })
    })();
    read.ok()
}

/// A document's text (a `List`'s items cut out) as its pruned top-level fields, if it is
/// a mapping, holds at most `max_nodes` nodes and the fast path reads all of it. An
/// `items:` key must be empty (where the items were cut out): a document that carries its
/// items itself is left to serde-saphyr.
pub(crate) fn document(text: &str, max_nodes: usize) -> Option<Parsed<DocumentFields>> {
    let mut parser = Parser::new(text, max_nodes)?;
    let read = (|| {
        parser.skip_blank_lines()?;
        if parser.line_start == parser.pos && parser.is_marker(b"---") {
            parser.pos += 3;
            parser.end_line()?;
        }
        let column = parser.next_content()?.ok_or(Fallback)?;
        if parser.scan_key()?.is_none() {
            return Err(Fallback);
        }
        let line = parser.line;
        let value = Node {
            parser: &mut parser,
            start: Start::Map(column),
        }
        .deserialize_any(DocumentVisitor)?;
        parser.at_end()?;
        Ok(Parsed {
            value,
            line,
            nodes: parser.nodes,
        })
    })();
    read.ok()
}

/// A document's top level, as `stream`'s document visitor reads it, `items` only empty.
struct DocumentVisitor;

impl<'de> Visitor<'de> for DocumentVisitor {
    type Value = DocumentFields;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DocumentFields, A::Error> {
        let mut fields = Map::new();
        let mut items = false;
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                map.next_value::<Empty>()?;
                items = true;
            } else if let Some(value) = root_field(&mut map, &key)? {
                fields.insert(key, value);
            }
        }
        Ok((fields, items))
    }
}

/// An empty value; anything else is an error.
struct Empty;

impl<'de> de::Deserialize<'de> for Empty {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(EmptyVisitor)
    }
}

struct EmptyVisitor;

impl<'de> Visitor<'de> for EmptyVisitor {
    type Value = Empty;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an empty value")
    }

    fn visit_unit<E>(self) -> Result<Empty, E> {
        Ok(Empty)
    }
}

/// The node at the parser's position, as found before it is decoded.
#[derive(Debug)]
enum Start<'a> {
    /// No value: a null.
    Empty,
    /// A plain scalar, typed when decoded.
    Plain(&'a str),
    /// A quoted or block scalar: always a string.
    Text(Cow<'a, str>),
    /// A block mapping whose keys sit at this column; the parser is at its first key.
    Map(usize),
    /// A block sequence whose dashes sit at this column; the parser is at its first dash.
    Seq(usize),
    EmptyMap,
    EmptySeq,
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
    line_start: usize,
    /// 1-based line of `pos`.
    line: u64,
    nodes: usize,
    max_nodes: usize,
    depth: usize,
    /// The keys of each open mapping, by depth, for finding duplicates.
    keys: Vec<Vec<Cow<'a, str>>>,
}

impl<'a> Parser<'a> {
    /// A parser for `text`, or none for text with CR line ends (left to serde-saphyr).
    fn new(text: &'a str, max_nodes: usize) -> Option<Self> {
        (!text.as_bytes().contains(&b'\r')).then_some(Self {
            text,
            pos: 0,
            line_start: 0,
            line: 1,
            nodes: 0,
            max_nodes,
            depth: 0,
            keys: Vec::new(),
        })
    }

    fn byte(&self, at: usize) -> Option<u8> {
        self.text.as_bytes().get(at).copied()
    }

    fn peek(&self) -> Option<u8> {
        self.byte(self.pos)
    }

    fn column(&self) -> usize {
        self.pos - self.line_start
    }

    fn count(&mut self) -> Fast<()> {
        self.nodes += 1;
        if self.nodes > self.max_nodes {
            return Err(Fallback);
        }
        Ok(())
    }

    /// Past the `\n` at `pos`.
    fn newline(&mut self) {
        self.pos += 1;
        self.line_start = self.pos;
        self.line += 1;
    }

    /// Skips spaces; a tab where only spaces are read is left to serde-saphyr.
    fn skip_spaces(&mut self) -> Fast<()> {
        while let Some(byte) = self.peek() {
            match byte {
                b' ' => self.pos += 1,
                b'\t' => return Err(Fallback),
                _ => break,
            }
        }
        Ok(())
    }

    fn skip_to_line_end(&mut self) {
        let rest = &self.text.as_bytes()[self.pos..];
        self.pos += rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
    }

    /// After a token: the rest of the line must be blank or a comment; moves to the next line.
    fn end_line(&mut self) -> Fast<()> {
        self.skip_spaces()?;
        match self.peek() {
            None => Ok(()),
            Some(b'\n') => {
                self.newline();
                Ok(())
            }
            Some(b'#') if self.pos == self.line_start || self.byte(self.pos - 1) == Some(b' ') => {
                self.skip_to_line_end();
                if self.peek().is_some() {
                    self.newline();
                }
                Ok(())
            }
            Some(_) => Err(Fallback),
        }
    }

    /// Moves to the next content (not a blank or comment line) and returns its column;
    /// none at the end of the text or at a `...` document end. Staying on content already
    /// reached, it can be asked again.
    fn next_content(&mut self) -> Fast<Option<usize>> {
        if !self.skip_blank_lines()? {
            return Ok(None);
        }
        if self.pos == self.line_start {
            if self.is_marker(b"...") {
                return Ok(None);
            }
            if self.is_marker(b"---") {
                return Err(Fallback);
            }
        }
        Ok(Some(self.column()))
    }

    /// Moves to the next entry of a block collection at `indent`: true when there is one;
    /// false at the end, or at shallower content (the collection is over); deeper content
    /// is no entry of it, so the fast path gives up.
    fn next_entry(&mut self, indent: usize) -> Fast<bool> {
        match self.next_content()? {
            Some(column) if column > indent => Err(Fallback),
            Some(column) => Ok(column == indent),
            None => Ok(false),
        }
    }

    /// Moves past blanks, blank lines and comments; false at the end of the text.
    fn skip_blank_lines(&mut self) -> Fast<bool> {
        loop {
            self.skip_spaces()?;
            match self.peek() {
                None => return Ok(false),
                Some(b'\n') => self.newline(),
                Some(b'#') => self.skip_to_line_end(),
                Some(_) => return Ok(true),
            }
        }
    }

    /// Nothing but blank lines, comments and a `...` remain.
    fn at_end(&mut self) -> Fast<()> {
        match self.next_content()? {
            None => Ok(()),
            Some(_) => Err(Fallback),
        }
    }

    fn is_marker(&self, marker: &[u8]) -> bool {
        let rest = &self.text.as_bytes()[self.pos..];
        rest.starts_with(marker)
            && matches!(rest.get(marker.len()), None | Some(b' ' | b'\t' | b'\n'))
    }

    /// A block sequence entry's `-` at the position.
    fn is_dash(&self) -> bool {
        self.peek() == Some(b'-') && matches!(self.byte(self.pos + 1), None | Some(b' ' | b'\n'))
    }

    /// The key at the position and where its value starts (past the `:`), if the position
    /// holds a `key:` entry.
    fn scan_key(&self) -> Fast<Option<(Cow<'a, str>, usize)>> {
        let bytes = self.text.as_bytes();
        let colon_at = |at: usize| {
            (bytes.get(at) == Some(&b':') && matches!(bytes.get(at + 1), None | Some(b' ' | b'\n')))
                .then_some(at + 1)
        };
        match self.peek() {
            Some(b'"') => {
                let (key, end) = self.double_quoted()?;
                Ok(colon_at(end).map(|after| (key, after)))
            }
            Some(b'\'') => {
                let (key, end) = self.single_quoted()?;
                Ok(colon_at(end).map(|after| (key, after)))
            }
            _ => {
                let (_, colon) = self.plain_end()?;
                let Some(colon) = colon else {
                    return Ok(None);
                };
                let key = self.text[self.pos..colon].trim_end_matches(' ');
                if starts_with_indicator(key) || key == "<<" || !is_text_key(key)? {
                    return Err(Fallback);
                }
                Ok(Some((Cow::Borrowed(key), colon + 1)))
            }
        }
    }

    /// Where the plain scalar at the position ends (before a comment or the line end), and
    /// the first `:` in it that is followed by a blank (which makes it a key).
    fn plain_end(&self) -> Fast<(usize, Option<usize>)> {
        let bytes = self.text.as_bytes();
        let mut at = self.pos;
        while let Some(&byte) = bytes.get(at) {
            match byte {
                b'\n' => break,
                b'\t' => return Err(Fallback),
                b' ' if bytes.get(at + 1) == Some(&b'#') => break,
                b':' if matches!(bytes.get(at + 1), None | Some(b' ' | b'\n')) => {
                    return Ok((at, Some(at)));
                }
                _ => {}
            }
            at += 1;
        }
        Ok((at, None))
    }

    /// The double-quoted scalar at the position, decoded, and the position after it; one
    /// line only.
    fn double_quoted(&self) -> Fast<(Cow<'a, str>, usize)> {
        let bytes = self.text.as_bytes();
        let mut owned: Option<String> = None;
        let mut segment = self.pos + 1;
        let mut at = segment;
        loop {
            match bytes.get(at) {
                None | Some(b'\n') => return Err(Fallback),
                Some(b'"') => {
                    let tail = &self.text[segment..at];
                    let text = match owned {
                        Some(mut text) => {
                            text.push_str(tail);
                            Cow::Owned(text)
                        }
                        None => Cow::Borrowed(tail),
                    };
                    return Ok((text, at + 1));
                }
                Some(b'\\') => {
                    let text = owned.get_or_insert_with(String::new);
                    text.push_str(&self.text[segment..at]);
                    at = unescape(self.text, at + 1, text)?;
                    segment = at;
                }
                Some(_) => at += 1,
            }
        }
    }

    /// The single-quoted scalar at the position and the position after it; one line only.
    fn single_quoted(&self) -> Fast<(Cow<'a, str>, usize)> {
        let bytes = self.text.as_bytes();
        let mut owned: Option<String> = None;
        let mut segment = self.pos + 1;
        let mut at = segment;
        loop {
            match bytes.get(at) {
                None | Some(b'\n') => return Err(Fallback),
                Some(b'\'') if bytes.get(at + 1) == Some(&b'\'') => {
                    let text = owned.get_or_insert_with(String::new);
                    text.push_str(&self.text[segment..=at]);
                    at += 2;
                    segment = at;
                }
                Some(b'\'') => {
                    let tail = &self.text[segment..at];
                    let text = match owned {
                        Some(mut text) => {
                            text.push_str(tail);
                            Cow::Owned(text)
                        }
                        None => Cow::Borrowed(tail),
                    };
                    return Ok((text, at + 1));
                }
                Some(_) => at += 1,
            }
        }
    }

    /// The value after a key's `:` in a mapping at `indent`.
    fn value_after_key(&mut self, indent: usize) -> Fast<Start<'a>> {
        self.skip_spaces()?;
        match self.peek() {
            None | Some(b'\n' | b'#') => {
                self.end_line()?;
                self.block_below(indent, true)
            }
            Some(_) => self.inline(indent),
        }
    }

    /// The item after a sequence's `-` (at the position) at `indent`.
    fn item_start(&mut self, indent: usize) -> Fast<Start<'a>> {
        self.pos += 1;
        self.skip_spaces()?;
        match self.peek() {
            None | Some(b'\n' | b'#') => {
                self.end_line()?;
                self.block_below(indent, false)
            }
            Some(_) => {
                let column = self.column();
                if self.is_dash() {
                    Ok(Start::Seq(column))
                } else if self.scan_key()?.is_some() {
                    Ok(Start::Map(column))
                } else {
                    self.inline(indent)
                }
            }
        }
    }

    /// A value on the lines below its key (or dash) at `indent`: deeper content, or a
    /// sequence at the key's own column where `compact` allows one.
    fn block_below(&mut self, indent: usize, compact: bool) -> Fast<Start<'a>> {
        match self.next_content()? {
            Some(column) if column > indent => {
                if self.is_dash() {
                    Ok(Start::Seq(column))
                } else if self.scan_key()?.is_some() {
                    Ok(Start::Map(column))
                } else {
                    self.inline(indent)
                }
            }
            Some(column) if column == indent && compact && self.is_dash() => Ok(Start::Seq(column)),
            _ => Ok(Start::Empty),
        }
    }

    /// A scalar (or empty flow collection) at the position, in a collection at `parent`:
    /// no line after it may be deeper than `parent` (that would continue it).
    fn inline(&mut self, parent: usize) -> Fast<Start<'a>> {
        let start = match self.peek() {
            Some(b'"') => {
                let (text, end) = self.double_quoted()?;
                self.pos = end;
                Start::Text(text)
            }
            Some(b'\'') => {
                let (text, end) = self.single_quoted()?;
                self.pos = end;
                Start::Text(text)
            }
            Some(b'|' | b'>') => return self.block_scalar(parent),
            Some(b'{' | b'[') => {
                let empty = match self.byte(self.pos + 1) {
                    Some(b'}') if self.peek() == Some(b'{') => Start::EmptyMap,
                    Some(b']') if self.peek() == Some(b'[') => Start::EmptySeq,
                    _ => return Err(Fallback),
                };
                self.pos += 2;
                empty
            }
            _ => {
                let (end, colon) = self.plain_end()?;
                let text = self.text[self.pos..end].trim_end_matches(' ');
                if colon.is_some() || starts_with_indicator(text) {
                    return Err(Fallback);
                }
                self.pos = end;
                Start::Plain(text)
            }
        };
        self.end_line()?;
        match self.next_content()? {
            Some(column) if column > parent => Err(Fallback),
            _ => Ok(start),
        }
    }

    /// A `|` or `>` block scalar (clipped or stripped, indentation detected) at the
    /// position, whose content is deeper than `parent`.
    fn block_scalar(&mut self, parent: usize) -> Fast<Start<'a>> {
        let folded = self.peek() == Some(b'>');
        self.pos += 1;
        let strip = match self.peek() {
            Some(b'-') => {
                self.pos += 1;
                true
            }
            Some(b'+' | b'0'..=b'9') => return Err(Fallback),
            _ => false,
        };
        self.end_line()?;
        let bytes = self.text.as_bytes();
        let mut out = String::new();
        let mut indent = None;
        let mut breaks = 0;
        let mut ended_with_break = false;
        let mut first = true;
        while self.pos < bytes.len() {
            let spaces = bytes[self.pos..].iter().take_while(|&&b| b == b' ').count();
            let content_at = self.pos + spaces;
            if matches!(bytes.get(content_at), None | Some(b'\n')) {
                if spaces > indent.unwrap_or(0) {
                    return Err(Fallback);
                }
                breaks += 1;
                self.pos = content_at;
                if self.peek().is_some() {
                    self.newline();
                }
                continue;
            }
            let indent = *indent.get_or_insert(spaces);
            if spaces < indent {
                break;
            }
            if indent <= parent {
                return Err(Fallback);
            }
            let line_end = bytes[content_at..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |end| content_at + end);
            let content = &self.text[self.pos + indent..line_end];
            if folded && content.starts_with([' ', '\t']) {
                return Err(Fallback);
            }
            if !first && folded && breaks == 0 {
                out.push(' ');
            }
            let separating = usize::from(!first && !folded);
            out.extend(std::iter::repeat_n('\n', breaks + separating));
            out.push_str(content);
            first = false;
            breaks = 0;
            self.pos = line_end;
            ended_with_break = self.peek().is_some();
            if ended_with_break {
                self.newline();
            }
        }
        if first {
            return Err(Fallback);
        }
        if !strip && ended_with_break {
            out.push('\n');
        }
        Ok(Start::Text(Cow::Owned(out)))
    }
}

/// Decodes the escape after a `\` at `at` into `out`; returns the position after it.
fn unescape(text: &str, at: usize, out: &mut String) -> Fast<usize> {
    let bytes = text.as_bytes();
    let simple = match bytes.get(at) {
        Some(b'0') => '\0',
        Some(b'a') => '\u{7}',
        Some(b'b') => '\u{8}',
        Some(b't' | b'\t') => '\t',
        Some(b'n') => '\n',
        Some(b'v') => '\u{b}',
        Some(b'f') => '\u{c}',
        Some(b'r') => '\r',
        Some(b'e') => '\u{1b}',
        Some(b' ') => ' ',
        Some(b'"') => '"',
        Some(b'/') => '/',
        Some(b'\\') => '\\',
        Some(b'N') => '\u{85}',
        Some(b'_') => '\u{a0}',
        Some(b'L') => '\u{2028}',
        Some(b'P') => '\u{2029}',
        Some(b'x') => return hex_escape(text, at + 1, 2, out),
        Some(b'u') => return hex_escape(text, at + 1, 4, out),
        Some(b'U') => return hex_escape(text, at + 1, 8, out),
        _ => return Err(Fallback),
    };
    out.push(simple);
    Ok(at + 1)
}

fn hex_escape(text: &str, at: usize, digits: usize, out: &mut String) -> Fast<usize> {
    let hex = text.get(at..at + digits).ok_or(Fallback)?;
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Fallback);
    }
    let code = u32::from_str_radix(hex, 16).map_err(|_| Fallback)?;
    out.push(char::from_u32(code).ok_or(Fallback)?);
    Ok(at + digits)
}

/// A first character that makes a plain scalar something else (or something rare).
fn starts_with_indicator(text: &str) -> bool {
    matches!(
        text.as_bytes().first(),
        None | Some(
            b'-' | b'?'
                | b':'
                | b','
                | b'['
                | b']'
                | b'{'
                | b'}'
                | b'#'
                | b'&'
                | b'*'
                | b'!'
                | b'|'
                | b'>'
                | b'\''
                | b'"'
                | b'%'
                | b'@'
                | b'`'
        )
    ) && !is_dash_text(text)
}

/// `-` followed by something other than a blank starts a plain scalar (`--port=80`).
fn is_dash_text(text: &str) -> bool {
    text.len() > 1 && text.starts_with('-') && !text[1..].starts_with(' ')
}

/// How a plain scalar is typed.
enum Scalar {
    Text,
    Unsigned(u64),
    Bool(bool),
    Null,
    /// Could be a number, boolean or null in one of YAML's spellings: serde-saphyr says.
    Ask,
}

/// Words serde-saphyr may read as a boolean, null or float in some capitalisation.
const WORDS: &[&str] = &[
    "y", "n", "yes", "no", "on", "off", "true", "false", "null", "inf", "infinity", "nan",
];

/// Characters of YAML's integer and float spellings that start with a digit (decimal,
/// hexadecimal, octal, binary, exponents, underscores, sexagesimal).
fn numeric_byte(byte: u8) -> bool {
    byte.is_ascii_hexdigit()
        || matches!(
            byte,
            b'x' | b'X' | b'o' | b'O' | b'_' | b'.' | b'+' | b'-' | b':'
        )
}

fn classify(text: &str) -> Scalar {
    let bytes = text.as_bytes();
    let Some(&first) = bytes.first() else {
        return Scalar::Null;
    };
    if first.is_ascii_alphabetic() {
        return match text {
            "true" => Scalar::Bool(true),
            "false" => Scalar::Bool(false),
            "null" => Scalar::Null,
            _ if WORDS.iter().any(|word| text.eq_ignore_ascii_case(word)) => Scalar::Ask,
            _ => Scalar::Text,
        };
    }
    if first.is_ascii_digit() {
        let digits = bytes.iter().all(u8::is_ascii_digit);
        if digits && (bytes.len() == 1 || first != b'0') && bytes.len() <= 19 {
            return text.parse().map_or(Scalar::Ask, Scalar::Unsigned);
        }
        return if bytes.iter().all(|&b| numeric_byte(b)) {
            Scalar::Ask
        } else {
            Scalar::Text
        };
    }
    if matches!(first, b'+' | b'-' | b'.' | b'~') {
        return Scalar::Ask;
    }
    Scalar::Text
}

/// A plain key serde-saphyr reads as the string it spells (`.` is the one non-word key
/// `kubectl` writes, in every `managedFields` entry).
fn is_text_key(key: &str) -> Fast<bool> {
    Ok(match classify(key) {
        Scalar::Text => true,
        Scalar::Ask if key == "." => true,
        Scalar::Ask => matches!(ask(key)?, Value::String(text) if text == key),
        _ => false,
    })
}

/// A plain scalar as serde-saphyr types it.
fn ask(text: &str) -> Fast<Value> {
    let PrunedObject(value) = serde_saphyr::from_str(text).map_err(|_| Fallback)?;
    Ok(value)
}

/// Hands `value` (a scalar serde-saphyr typed) to `visitor`.
fn visit_value<'de, V: Visitor<'de>>(value: Value, visitor: V) -> Fast<V::Value> {
    match value {
        Value::Null => visitor.visit_unit(),
        Value::Bool(b) => visitor.visit_bool(b),
        Value::Number(n) => {
            if let Some(n) = n.as_u64() {
                visitor.visit_u64(n)
            } else if let Some(n) = n.as_i64() {
                visitor.visit_i64(n)
            } else {
                visitor.visit_f64(n.as_f64().ok_or(Fallback)?)
            }
        }
        Value::String(s) => visitor.visit_string(s),
        Value::Array(_) | Value::Object(_) => Err(Fallback),
    }
}

/// The node at the parser's position, decoded on demand by a serde visitor.
struct Node<'p, 'a> {
    parser: &'p mut Parser<'a>,
    start: Start<'a>,
}

impl<'p, 'a> Node<'p, 'a> {
    fn enter(&mut self) -> Fast<usize> {
        self.parser.count()?;
        self.parser.depth += 1;
        let depth = self.parser.depth;
        if depth > MAX_DEPTH {
            return Err(Fallback);
        }
        if self.parser.keys.len() <= depth {
            self.parser.keys.resize_with(depth + 1, Vec::new);
        }
        self.parser.keys[depth].clear();
        Ok(depth)
    }

    fn collection<V: Visitor<'a>>(mut self, visitor: V) -> Fast<V::Value> {
        let depth = self.enter()?;
        let value = match self.start {
            Start::Map(indent) => visitor.visit_map(Mapping {
                parser: &mut *self.parser,
                indent,
                depth,
            }),
            Start::Seq(indent) => visitor.visit_seq(Sequence {
                parser: &mut *self.parser,
                indent,
            }),
            Start::EmptyMap => visitor.visit_map(de::value::MapDeserializer::<_, Fallback>::new(
                std::iter::empty::<((), ())>(),
            )),
            _ => visitor.visit_seq(de::value::SeqDeserializer::<_, Fallback>::new(
                std::iter::empty::<()>(),
            )),
        };
        self.parser.depth -= 1;
        value.map_err(|_| Fallback)
    }
}

impl<'p, 'a> Deserializer<'a> for Node<'p, 'a> {
    type Error = Fallback;

    fn deserialize_any<V: Visitor<'a>>(self, visitor: V) -> Fast<V::Value> {
        match self.start {
            Start::Empty => {
                self.parser.count()?;
                visitor.visit_unit()
            }
            Start::Plain(text) => {
                self.parser.count()?;
                match classify(text) {
                    Scalar::Text => visitor.visit_borrowed_str(text),
                    Scalar::Unsigned(n) => visitor.visit_u64(n),
                    Scalar::Bool(b) => visitor.visit_bool(b),
                    Scalar::Null => visitor.visit_unit(),
                    Scalar::Ask => visit_value(ask(text)?, visitor),
                }
            }
            Start::Text(text) => {
                self.parser.count()?;
                match text {
                    Cow::Borrowed(text) => visitor.visit_borrowed_str(text),
                    Cow::Owned(text) => visitor.visit_string(text),
                }
            }
            _ => self.collection(visitor),
        }
    }

    /// Skipped values are read (their nodes count, their keys must not repeat) but not
    /// typed.
    fn deserialize_ignored_any<V: Visitor<'a>>(self, visitor: V) -> Fast<V::Value> {
        match self.start {
            Start::Empty | Start::Plain(_) | Start::Text(_) => {
                self.parser.count()?;
                visitor.visit_unit()
            }
            _ => self.collection(visitor),
        }
    }

    /// A typed reader (see `typed`) asks for optional values: null is `None`.
    fn deserialize_option<V: Visitor<'a>>(self, visitor: V) -> Fast<V::Value> {
        match self.start {
            Start::Empty => {
                self.parser.count()?;
                visitor.visit_none()
            }
            Start::Plain(text) if matches!(classify(text), Scalar::Null) => {
                self.parser.count()?;
                visitor.visit_none()
            }
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Fast<V::Value> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        <W: Visitor<'a>>
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct enum identifier
    }
}

/// A block mapping's entries, keys at `indent`.
struct Mapping<'p, 'a> {
    parser: &'p mut Parser<'a>,
    indent: usize,
    depth: usize,
}

impl<'p, 'a> MapAccess<'a> for Mapping<'p, 'a> {
    type Error = Fallback;

    fn next_key_seed<K: DeserializeSeed<'a>>(&mut self, seed: K) -> Fast<Option<K::Value>> {
        if !self.parser.next_entry(self.indent)? {
            return Ok(None);
        }
        let (key, after) = self.parser.scan_key()?.ok_or(Fallback)?;
        let keys = &mut self.parser.keys[self.depth];
        if keys.len() >= MAX_KEYS || keys.contains(&key) {
            return Err(Fallback);
        }
        keys.push(key.clone());
        self.parser.count()?;
        self.parser.pos = after;
        match key {
            Cow::Borrowed(key) => seed.deserialize(de::value::BorrowedStrDeserializer::new(key)),
            Cow::Owned(key) => seed.deserialize(key.into_deserializer()),
        }
        .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'a>>(&mut self, seed: V) -> Fast<V::Value> {
        let start = self.parser.value_after_key(self.indent)?;
        seed.deserialize(Node {
            parser: &mut *self.parser,
            start,
        })
    }
}

/// A block sequence's items, dashes at `indent`.
struct Sequence<'p, 'a> {
    parser: &'p mut Parser<'a>,
    indent: usize,
}

impl<'p, 'a> SeqAccess<'a> for Sequence<'p, 'a> {
    type Error = Fallback;

    fn next_element_seed<T: DeserializeSeed<'a>>(&mut self, seed: T) -> Fast<Option<T::Value>> {
        if !self.parser.next_entry(self.indent)? || !self.parser.is_dash() {
            return Ok(None);
        }
        let start = self.parser.item_start(self.indent)?;
        seed.deserialize(Node {
            parser: &mut *self.parser,
            start,
        })
        .map(Some)
    }
}
