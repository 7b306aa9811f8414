//! Reading a manifest stream one object at a time. A cluster dump is one `kind: List` of
//! 100,000 objects or a stream of as many documents, hundreds of megabytes; neither the whole
//! text nor a whole document's tree is ever held: parser events decode straight into pruned
//! objects (`prune`), each handed to the caller as soon as it is read.
//!
//! YAML is cut at line boundaries (`split`) into documents and the items of a block-style
//! `List`, each parsed from its own text by the fast reader (`fast`) where it can, else by
//! serde-saphyr; JSON is cut by a byte scanner (`json`). One thread cuts, a pool parses
//! (`ordered`), the caller takes objects in input order, and a failure ends the stream where
//! a one-threaded reader would.
//!
//! The YAML budget guards against hostile input: serde-saphyr's alias and anchor caps stay,
//! and the per-document node count, which one `List` dump reaches legitimately, is sized
//! for real dumps ([`DEFAULT_MAX_YAML_NODES`], `--max-yaml-nodes`) and reported in kerf's
//! words. Totals a streamed dump never holds (bytes, documents) are not limited.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::rc::Rc;
use std::sync::mpsc::{self, SyncSender};

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use serde_saphyr::Spanned;
use serde_saphyr::budget::{BudgetBreach, BudgetReport};

use super::fast;
use super::json;
use super::ordered::{OrderedPool, WorkerLost};
use super::prune::{PrunedObject, root_field};
use super::split::{Piece, SplitError, Splitter};
use super::typed::PodItem;
use super::{ManifestError, Object, Source, json_type};

/// YAML nodes (mappings, sequences and scalars) one document may hold. A `kubectl get -o
/// yaml` pod with its `managedFields` and status is 300–500 nodes, so this admits a single
/// `kind: List` of about 200,000 real pods, while still stopping a runaway document before
/// it has cost minutes of parsing.
pub const DEFAULT_MAX_YAML_NODES: usize = 100_000_000;

/// Limits on the input, for `kerf plan` and `kerf validate`'s `--max-yaml-nodes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// YAML nodes per document; see [`DEFAULT_MAX_YAML_NODES`].
    pub max_yaml_nodes: usize,
    /// Hand a `List`'s `v1` Pods over typed ([`Object::pod`]) rather than as a `Value`, where
    /// they can be (see `typed`): `kerf plan` reads them so, at half the cost.
    pub typed_pods: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_yaml_nodes: DEFAULT_MAX_YAML_NODES,
            typed_pods: false,
        }
    }
}

/// How many objects the reader may hand over ahead of the caller: enough to keep both
/// busy, few enough that the objects in flight cost nothing next to what the caller keeps.
const OBJECTS_IN_FLIGHT: usize = 256;

/// Reads every object of `input` (named `file` in messages), YAML or JSON, and hands each to
/// `sink` as soon as it is read — a `List`'s items one by one: an object, or the problem with
/// that document (a broken document does not hide the good ones around it). A syntax error
/// or an exceeded limit ends the stream, since the document boundaries after it cannot be
/// trusted; it is returned after the objects before it were handed over.
///
/// The text is cut on a thread of its own and its items parsed on a pool of threads while
/// `sink` runs on the caller's, with at most [`OBJECTS_IN_FLIGHT`] objects between them.
pub fn read<R: Read + Send>(
    input: R,
    file: &str,
    limits: Limits,
    sink: &mut dyn FnMut(Result<Object, ManifestError>),
) -> Result<(), ManifestError> {
    let (sender, receiver) = mpsc::sync_channel(OBJECTS_IN_FLIGHT);
    std::thread::scope(|scope| {
        let parser = scope.spawn(move || parse(input, file, limits, sender));
        for object in receiver {
            sink(object);
        }
        parser.join().unwrap_or_else(|_| Err(reader_failed(file)))
    })
}

/// The reading thread: cuts `input`, has its items parsed by the pool, and sends its objects
/// in order until the input ends or fails.
fn parse<R: Read>(
    input: R,
    file: &str,
    limits: Limits,
    sender: SyncSender<Result<Object, ManifestError>>,
) -> Result<(), ManifestError> {
    let mut input = BufReader::with_capacity(1 << 16, input);
    let is_json = starts_with_json(&mut input).map_err(|e| read_error(file, &e))?;
    let context = ItemContext {
        sender,
        file: file.to_owned(),
        document: 0,
        line: Rc::new(Cell::new(None)),
    };
    ITEMS.with(|items| *items.borrow_mut() = Some(context));
    let work = |job| parse_item(file, limits, job);
    let result = std::thread::scope(|scope| {
        let mut pool = OrderedPool::start(scope, item_workers(), ITEMS_IN_FLIGHT, &work);
        if is_json {
            read_json(input, file, limits, &mut pool)
        } else {
            read_yaml(input, file, limits, &mut pool)
        }
    });
    ITEMS.with(|items| items.borrow_mut().take());
    result
}

/// Items parsed but not yet handed over, at most: enough that a worker never idles for
/// want of work while the cutter is ahead, few enough that their text and objects cost
/// nothing next to what the caller keeps.
const ITEMS_IN_FLIGHT: usize = 64;

/// Threads that parse items: one per core, at most four (beyond that the cutting thread,
/// which is one, cannot keep them busy).
fn item_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// The pool that parses a `List`'s items (see `ordered`).
type ItemPool = OrderedPool<ItemJob, ParsedItem>;

/// A `List` item to parse, with what locating its object needs.
enum ItemJob {
    Yaml {
        text: String,
        first_line: u64,
        document: usize,
        /// The document's YAML nodes left when the item was cut (at least what is left).
        remaining: usize,
    },
    Json {
        bytes: Vec<u8>,
        at: json::At,
        document: usize,
    },
}

/// A parsed item: how many YAML nodes it held, and what became of it.
struct ParsedItem {
    nodes: usize,
    result: ItemResult,
}

enum ItemResult {
    /// An object, or the problem with it; the stream goes on after it.
    Object(Result<Object, ManifestError>),
    /// The item could not be parsed: the stream ends here.
    Fatal(ManifestError),
}

/// Parses one item, on one of the pool's threads.
fn parse_item(file: &str, limits: Limits, job: ItemJob) -> ParsedItem {
    match job {
        ItemJob::Yaml {
            text,
            first_line,
            document,
            remaining,
        } => yaml_item(file, limits, &text, first_line, document, remaining),
        ItemJob::Json {
            bytes,
            at,
            document,
        } => json_item(file, limits, &bytes, at, document),
    }
}

/// Hands the next item over (or ends the stream at it); false once the caller stopped
/// listening. The document's node count includes the item's, against the limit.
fn forward(
    item: Result<ParsedItem, WorkerLost>,
    nodes: &mut usize,
    file: &str,
    limits: Limits,
) -> Result<bool, ManifestError> {
    let item = item.map_err(|WorkerLost| reader_failed(file))?;
    *nodes = nodes.saturating_add(item.nodes);
    if *nodes > limits.max_yaml_nodes {
        return Err(ManifestError::TooManyNodes {
            file: file.to_owned(),
            limit: limits.max_yaml_nodes,
        });
    }
    match item.result {
        ItemResult::Object(object) => Ok(send(object)),
        ItemResult::Fatal(error) => Err(error),
    }
}

/// Hands over every item still in the pool, in order; false once the caller stopped
/// listening.
fn drain(
    pool: &mut ItemPool,
    nodes: &mut usize,
    file: &str,
    limits: Limits,
) -> Result<bool, ManifestError> {
    while let Some(item) = pool.next() {
        if !forward(item, nodes, file, limits)? {
            return Ok(false);
        }
    }
    Ok(true)
}

fn reader_failed(file: &str) -> ManifestError {
    ManifestError::Parse {
        file: file.to_owned(),
        line: None,
        message: "the manifest reader failed unexpectedly".to_owned(),
    }
}

/// Where a `List`'s items go as they are decoded: serde gives a visitor no way to reach its
/// caller, so the parser thread keeps the channel (and the document being read) here.
struct ItemContext {
    sender: SyncSender<Result<Object, ManifestError>>,
    file: String,
    /// 1-based number of the document being read.
    document: usize,
    /// The line the document starts at, where the format cannot locate each item.
    line: Rc<Cell<Option<u64>>>,
}

thread_local! {
    static ITEMS: RefCell<Option<ItemContext>> = const { RefCell::new(None) };
}

fn with_context<T>(f: impl FnOnce(&mut ItemContext) -> T) -> Option<T> {
    ITEMS.with(|items| items.borrow_mut().as_mut().map(f))
}

/// Sends one object; false once the caller stopped listening.
fn send(object: Result<Object, ManifestError>) -> bool {
    with_context(|context| context.sender.send(object).is_ok()).unwrap_or(false)
}

fn start_document(document: usize, line: Option<u64>) {
    with_context(|context| {
        context.document = document;
        context.line.set(line);
    });
}

fn source(line: Option<u64>) -> Option<Source> {
    with_context(|context| Source {
        file: context.file.clone(),
        document: context.document,
        line: line.or(context.line.get()),
    })
}

/// JSON starts with `{` or `[` after blanks; anything else is YAML (of which JSON is a
/// subset, but a much slower way to read it). Nothing is consumed, so lines count from the
/// start. Input that is blank for its whole first buffer is read as YAML.
fn starts_with_json<R: BufRead>(input: &mut R) -> std::io::Result<bool> {
    let buffer = input.fill_buf()?;
    let first = buffer.iter().find(|b| !b.is_ascii_whitespace());
    Ok(matches!(first, Some(b'{' | b'[')))
}

fn read_error(file: &str, error: &std::io::Error) -> ManifestError {
    ManifestError::ReadFile {
        path: file.to_owned(),
        message: error.to_string(),
    }
}

/// Reads YAML piece by piece (see `split`): each document, and each item of a `List`, is
/// parsed from its own text, the items on the pool's threads. The node limit holds per
/// document, over its items together.
fn read_yaml<R: BufRead>(
    input: R,
    file: &str,
    limits: Limits,
    pool: &mut ItemPool,
) -> Result<(), ManifestError> {
    let mut splitter = Splitter::new(input);
    let mut document = 1;
    // Nodes read so far in the current document, its items handed over included.
    let mut nodes = 0;
    start_document(document, None);
    loop {
        let piece = match splitter.next_piece() {
            Ok(Some(piece)) => piece,
            Ok(None) => break,
            // The items cut before the failure come first, and may fail first.
            Err(error) => {
                drain(pool, &mut nodes, file, limits)?;
                return Err(split_error(file, error));
            }
        };
        let sent = match piece {
            Piece::Item { text, first_line } => {
                let job = ItemJob::Yaml {
                    text,
                    first_line,
                    document,
                    remaining: limits.max_yaml_nodes.saturating_sub(nodes),
                };
                match pool.submit(job) {
                    Some(oldest) => forward(oldest, &mut nodes, file, limits)?,
                    None => true,
                }
            }
            Piece::Document(text) => {
                // Its items come before it.
                if !drain(pool, &mut nodes, file, limits)? {
                    return Ok(());
                }
                let at = |line| text.line(line);
                let remaining = limits.max_yaml_nodes.saturating_sub(nodes);
                let (mut value, line) = match fast::document(&text.text, remaining) {
                    Some(parsed) => {
                        let (fields, items) = parsed.value;
                        let items = items.then_some(Items::Other(Value::Null));
                        (Document::Object { fields, items }, Some(parsed.line))
                    }
                    None => {
                        let parsed: Spanned<Document> =
                            parse_piece(&text.text, limits, &mut nodes, 0)
                                .map_err(|e| yaml_error(file, limits, &e, at))?;
                        (parsed.value, known_line(parsed.referenced.line()))
                    }
                };
                let source = Source {
                    file: file.to_owned(),
                    document,
                    line: line.map(at),
                };
                if let (Some(_), Document::Object { items, .. }) = (text.cut, &mut value) {
                    *items = Some(Items::Sent);
                }
                document += 1;
                nodes = 0;
                start_document(document, None);
                expand(value, source)
            }
        };
        if !sent {
            return Ok(());
        }
    }
    drain(pool, &mut nodes, file, limits)?;
    Ok(())
}

/// Parses one YAML item of the current document, which had `remaining` nodes left.
fn yaml_item(
    file: &str,
    limits: Limits,
    text: &str,
    first_line: u64,
    document: usize,
    remaining: usize,
) -> ParsedItem {
    let at = |line| first_line - 1 + line;
    let source = |line: Option<u64>| Source {
        file: file.to_owned(),
        document,
        line: line.map(at),
    };
    if limits.typed_pods
        && let Some(parsed) = fast::item_as::<PodItem>(text, remaining)
    {
        let pod = super::pod_object(parsed.value.0, source(Some(parsed.line)));
        return ParsedItem {
            nodes: parsed.nodes,
            result: ItemResult::Object(Ok(pod)),
        };
    }
    if let Some(parsed) = fast::item(text, remaining) {
        return ParsedItem {
            nodes: parsed.nodes,
            result: ItemResult::Object(super::to_object(parsed.value, source(Some(parsed.line)))),
        };
    }
    // parse_piece counts against the limit from the nodes before the item.
    let before = limits.max_yaml_nodes.saturating_sub(remaining);
    let mut counted = before;
    match parse_piece::<OneItem>(text, limits, &mut counted, ITEM_WRAPPER_NODES) {
        Ok(OneItem(item)) => ParsedItem {
            nodes: counted - before,
            result: ItemResult::Object(super::to_object(
                item.value.0,
                source(known_line(item.referenced.line())),
            )),
        },
        Err(error) => ParsedItem {
            nodes: 0,
            result: ItemResult::Fatal(item_error(yaml_error(file, limits, &error, at), &error)),
        },
    }
}

/// The sequence node around an item's text, which the whole document does not have.
const ITEM_WRAPPER_NODES: usize = 1;

/// Parses one piece, counting its nodes (less `wrapper`) into `nodes` against the limit.
pub(super) fn parse_piece<'a, T: de::Deserialize<'a>>(
    text: &'a str,
    limits: Limits,
    nodes: &mut usize,
    wrapper: usize,
) -> Result<T, serde_saphyr::Error> {
    let allowed = limits
        .max_yaml_nodes
        .saturating_sub(*nodes)
        .saturating_add(wrapper);
    let counted = Rc::new(Cell::new(0));
    let report = Rc::clone(&counted);
    let on_report: Rc<RefCell<dyn FnMut(BudgetReport)>> =
        Rc::new(RefCell::new(move |r: BudgetReport| report.set(r.nodes)));
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_reader_input_bytes: None,
            max_nodes: allowed,
            // Every node is at most a start and an end event: let the node count trip first.
            max_events: allowed.saturating_mul(2).saturating_add(16),
            max_total_scalar_bytes: usize::MAX,
        },
        budget_report_cb: Some(on_report),
    };
    let parsed = serde_saphyr::from_str_with_options(text, options);
    *nodes = nodes.saturating_add(counted.get().saturating_sub(wrapper));
    parsed
}

/// An alias that finds no anchor in its item may mean one in another item, which a `List`
/// read item by item cannot reach: say so.
fn item_error(error: ManifestError, cause: &serde_saphyr::Error) -> ManifestError {
    match (error, cause.without_snippet()) {
        (
            ManifestError::Parse {
                file,
                line,
                message,
            },
            serde_saphyr::Error::UnknownAnchor { .. },
        ) => ManifestError::Parse {
            file,
            line,
            message: format!(
                "{message} (kerf reads a List's items one at a time: an alias cannot name an \
                 anchor in another item)"
            ),
        },
        (error, _) => error,
    }
}

fn split_error(file: &str, error: SplitError) -> ManifestError {
    match error {
        SplitError::Read(e) => read_error(file, &e),
        SplitError::NotUtf8 { line } => ManifestError::Parse {
            file: file.to_owned(),
            line: Some(line),
            message: "the text is not UTF-8".to_owned(),
        },
    }
}

/// A `List` item's text: a block sequence of one item.
pub(super) struct OneItem(pub Spanned<PrunedObject>);

impl<'de> de::Deserialize<'de> for OneItem {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(OneItemVisitor)
    }
}

struct OneItemVisitor;

impl<'de> Visitor<'de> for OneItemVisitor {
    type Value = OneItem;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("one item of a List")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<OneItem, A::Error> {
        let item = seq
            .next_element()?
            .ok_or_else(|| de::Error::custom("an empty List item"))?;
        // The splitter cuts at every item's dash: a second one here is a splitter bug.
        if seq.next_element::<de::IgnoredAny>()?.is_some() {
            return Err(de::Error::custom("two List items where one was cut"));
        }
        Ok(OneItem(item))
    }
}

/// kerf's error for `error`, its lines mapped to the input's by `at`.
fn yaml_error(
    file: &str,
    limits: Limits,
    error: &serde_saphyr::Error,
    at: impl Fn(u64) -> u64,
) -> ManifestError {
    let error = error.without_snippet();
    if let serde_saphyr::Error::Budget {
        breach: BudgetBreach::Nodes { .. },
        ..
    } = error
    {
        return ManifestError::TooManyNodes {
            file: file.to_owned(),
            limit: limits.max_yaml_nodes,
        };
    }
    if let serde_saphyr::Error::DuplicateMappingKey {
        key: Some(key),
        location,
    } = error
        && let Some(line) = known_line(location.line())
    {
        return ManifestError::DuplicateKey {
            file: file.to_owned(),
            line: at(line),
            column: location.column(),
            key: key.clone(),
            first: None,
        };
    }
    ManifestError::Parse {
        file: file.to_owned(),
        line: error.location().and_then(|l| known_line(l.line())).map(&at),
        message: input_lines(&first_line(&error.to_string()), &at),
    }
}

/// serde-saphyr reports line 0 where it does not know the line.
fn known_line(line: u64) -> Option<u64> {
    (line > 0).then_some(line)
}

/// saphyr's message is followed by a source snippet; the first line says it all, once
/// rid of the position in the piece parsed (kerf names the input's line instead).
fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or(message);
    let line = line.strip_prefix("error: ").unwrap_or(line);
    strip_position(line).unwrap_or(line).to_owned()
}

/// `message` with each `line N` in it (numbered within the piece parsed) mapped by `at`.
fn input_lines(message: &str, at: &impl Fn(u64) -> u64) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(found) = rest.find("line ") {
        let (before, after) = rest.split_at(found + "line ".len());
        out.push_str(before);
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        match after[..digits].parse::<u64>() {
            Ok(line) if line > 0 => out.push_str(&at(line).to_string()),
            _ => out.push_str(&after[..digits]),
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

/// `MESSAGE` from `line N column M: MESSAGE`.
fn strip_position(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("line ")?;
    let (number, rest) = rest.split_once(" column ")?;
    let (column, message) = rest.split_once(": ")?;
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    (digits(number) && digits(column)).then_some(message)
}

/// Reads JSON piece by piece (see `json`): each document, and each element of a document's
/// top-level `items`, is decoded from its own bytes, located at its own line; the items on
/// the pool's threads.
fn read_json<R: BufRead>(
    input: R,
    file: &str,
    limits: Limits,
    pool: &mut ItemPool,
) -> Result<(), ManifestError> {
    let mut document = 1;
    let mut failed = None;
    // JSON has no node limit: items count none.
    let mut nodes = 0;
    start_document(document, None);
    let cut = json::cut(input, &mut |piece| match piece {
        json::Piece::Item { bytes, at } => match pool.submit(ItemJob::Json {
            bytes,
            at,
            document,
        }) {
            Some(oldest) => keep_going(forward(oldest, &mut nodes, file, limits), &mut failed),
            None => true,
        },
        json::Piece::Document(text) => {
            // Its items come before it.
            if !keep_going(drain(pool, &mut nodes, file, limits), &mut failed) {
                return false;
            }
            start_document(document, Some(text.at.line));
            match serde_json::from_slice(&text.bytes) {
                Ok(value) => {
                    let source = Source {
                        file: file.to_owned(),
                        document,
                        line: Some(text.at.line),
                    };
                    document += 1;
                    expand(value, source)
                }
                Err(e) => {
                    failed = Some(json_error(file, &e, |l, c| text.position(l, c)));
                    false
                }
            }
        }
        json::Piece::Broken { message, at } => {
            if keep_going(drain(pool, &mut nodes, file, limits), &mut failed) {
                failed = Some(ManifestError::Parse {
                    file: file.to_owned(),
                    line: Some(at.line),
                    message: format!("{message} at line {} column {}", at.line, at.column),
                });
            }
            false
        }
    });
    // The items cut before the input ended (or failed to read) come first.
    if failed.is_none() {
        keep_going(drain(pool, &mut nodes, file, limits), &mut failed);
    }
    match failed {
        Some(error) => Err(error),
        None => cut.map_err(|e| read_error(file, &e)),
    }
}

/// Whether to go on after `forwarded`, recording its error in `failed`.
fn keep_going(forwarded: Result<bool, ManifestError>, failed: &mut Option<ManifestError>) -> bool {
    forwarded.unwrap_or_else(|error| {
        *failed = Some(error);
        false
    })
}

/// Decodes one JSON item of document `document`, starting at `at`.
fn json_item(
    file: &str,
    limits: Limits,
    bytes: &[u8],
    at: json::At,
    document: usize,
) -> ParsedItem {
    let source = Source {
        file: file.to_owned(),
        document,
        line: Some(at.line),
    };
    let result = match typed_pod(limits, bytes) {
        Some(pod) => ItemResult::Object(Ok(super::pod_object(pod, source))),
        None => match serde_json::from_slice(bytes) {
            Ok(PrunedObject(value)) => ItemResult::Object(super::to_object(value, source)),
            Err(e) => ItemResult::Fatal(json_error(file, &e, |l, c| json::offset(at, l, c))),
        },
    };
    ParsedItem { nodes: 0, result }
}

/// A JSON item as a typed pod, where asked for and it is one (see `typed`).
fn typed_pod(limits: Limits, bytes: &[u8]) -> Option<k8s_openapi::api::core::v1::Pod> {
    if !limits.typed_pods {
        return None;
    }
    serde_json::from_slice::<PodItem>(bytes)
        .ok()
        .map(|item| item.0)
}

/// kerf's error for serde_json's `error` on a piece, its position mapped to the input's.
fn json_error(
    file: &str,
    error: &serde_json::Error,
    position: impl Fn(u64, u64) -> (u64, u64),
) -> ManifestError {
    let message = error.to_string();
    if error.line() == 0 {
        return ManifestError::Parse {
            file: file.to_owned(),
            line: None,
            message,
        };
    }
    let (line, column) = position(error.line() as u64, error.column() as u64);
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    let message = match message.strip_suffix(&suffix) {
        Some(text) => format!("{text} at line {line} column {column}"),
        None => message,
    };
    ManifestError::Parse {
        file: file.to_owned(),
        line: Some(line),
        message,
    }
}

/// One document: an object's top-level fields, with a `List`'s items decoded one by one
/// (each pruned as soon as it is read), or the JSON type of a document that is not a mapping.
#[derive(Debug)]
pub(super) enum Document {
    Object {
        fields: Map<String, Value>,
        items: Option<Items>,
    },
    NotAnObject(&'static str),
}

#[derive(Debug)]
pub(super) enum Items {
    /// A sequence whose items were sent as they were read.
    Sent,
    Other(Value),
}

impl<'de> de::Deserialize<'de> for Document {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DocumentVisitor)
    }
}

struct DocumentVisitor;

impl DocumentVisitor {
    fn not_an_object<E>(value: &Value) -> Result<Document, E> {
        Ok(Document::NotAnObject(json_type(value)))
    }
}

impl<'de> Visitor<'de> for DocumentVisitor {
    type Value = Document;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Document, A::Error> {
        let mut fields = Map::new();
        let mut items = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                items = Some(map.next_value::<Items>()?);
            } else if let Some(value) = root_field(&mut map, &key)? {
                fields.insert(key, value);
            }
        }
        Ok(Document::Object { fields, items })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Document, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(Document::NotAnObject("array"))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Document, E> {
        Ok(Document::NotAnObject("boolean"))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Document, E> {
        Self::not_an_object(&Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Document, E> {
        Self::not_an_object(&Value::from(v))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Document, E> {
        Ok(Document::NotAnObject("number"))
    }

    fn visit_str<E>(self, _: &str) -> Result<Document, E> {
        Ok(Document::NotAnObject("string"))
    }

    fn visit_unit<E>(self) -> Result<Document, E> {
        Ok(Document::NotAnObject("null"))
    }
}

impl<'de> de::Deserialize<'de> for Items {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ItemsVisitor)
    }
}

struct ItemsVisitor;

impl<'de> Visitor<'de> for ItemsVisitor {
    type Value = Items;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items, A::Error> {
        while let Some(item) = seq.next_element::<Spanned<PrunedObject>>()? {
            let line = known_line(item.referenced.line());
            let Some(source) = source(line) else {
                return Err(de::Error::custom("a List read outside the manifest reader"));
            };
            if !send(super::to_object(item.value.0, source)) {
                return Err(de::Error::custom("the reader's caller stopped"));
            }
        }
        Ok(Items::Sent)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Items, A::Error> {
        let value = de::Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Items::Other(value))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Items, E> {
        Ok(Items::Other(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Items, E> {
        Ok(Items::Other(Value::from(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Items, E> {
        Ok(Items::Other(Value::from(v)))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Items, E> {
        Ok(Items::Other(Value::from(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Items, E> {
        Ok(Items::Other(Value::String(v.to_owned())))
    }

    fn visit_unit<E>(self) -> Result<Items, E> {
        Ok(Items::Other(Value::Null))
    }

    fn visit_none<E>(self) -> Result<Items, E> {
        Ok(Items::Other(Value::Null))
    }
}

/// Hands over a document (a `List`'s items were sent while it was read); false once the
/// caller stopped listening.
fn expand(document: Document, source: Source) -> bool {
    let (fields, items) = match document {
        Document::Object { fields, items } => (fields, items),
        Document::NotAnObject(found) => {
            return send(Err(ManifestError::Document {
                source_ref: source,
                message: format!("expected a Kubernetes object (a mapping), found {found}"),
            }));
        }
    };
    let kind = fields.get("kind").and_then(Value::as_str).unwrap_or("");
    let is_list = kind.ends_with("List");
    let problem = |message: String| {
        Err(ManifestError::Document {
            source_ref: source.clone(),
            message,
        })
    };
    match (is_list, items) {
        (true, None | Some(Items::Sent | Items::Other(Value::Null))) => true,
        (true, Some(Items::Other(_))) => {
            send(problem("kind List: items must be a list".to_owned()))
        }
        // Only a List has items at its top level; they were read as objects already.
        (false, Some(Items::Sent)) => send(problem(format!(
            "a top-level items list is only read in a kind List (found kind {kind})"
        ))),
        (false, Some(Items::Other(value))) => {
            let mut fields = fields;
            fields.insert("items".to_owned(), value);
            send(super::to_object(Value::Object(fields), source))
        }
        (false, None) => send(super::to_object(Value::Object(fields), source)),
    }
}
