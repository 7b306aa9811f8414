//! The fast YAML path (`fast`) against serde-saphyr, piece by piece: wherever the fast path
//! reads a piece, it must read the same pruned value, at the same line, counting the same
//! nodes, as serde-saphyr reads it; where serde-saphyr fails, the fast path must give up.
//! Run over generated `kubectl`-shaped dumps, every YAML file of the repository, and texts
//! written to reach each scalar spelling and each construct the fast path leaves alone.

use std::path::Path;

use serde_json::{Value, json};

use super::fast;
use super::split::{Piece, Splitter};
use super::stream::{Document, Items, Limits, OneItem, parse_piece};
use crate::plan::fixtures::{self, DumpFormat, DumpShape};

/// A piece as read: the value (a document's fields and whether it had an empty `items:`),
/// its line within the piece, and its nodes.
type Read = (Value, Option<u64>, usize);

fn saphyr(piece: &Piece) -> Option<Read> {
    let limits = Limits::default();
    let mut nodes = 0;
    match piece {
        Piece::Item { text, .. } => {
            let OneItem(item) = parse_piece(text, limits, &mut nodes, 1).ok()?;
            let line = Some(item.referenced.line()).filter(|&l| l > 0);
            Some((item.value.0, line, nodes))
        }
        Piece::Document(document) => {
            let parsed: serde_saphyr::Spanned<Document> =
                parse_piece(&document.text, limits, &mut nodes, 0).ok()?;
            let line = Some(parsed.referenced.line()).filter(|&l| l > 0);
            let Document::Object { fields, items } = parsed.value else {
                return Some((json!("not an object"), line, nodes));
            };
            let items = match items {
                None => json!(false),
                Some(Items::Other(Value::Null)) => json!(true),
                Some(Items::Other(other)) => other,
                Some(Items::Sent) => json!("sent"),
            };
            Some((json!({"fields": fields, "items": items}), line, nodes))
        }
    }
}

fn fast_path(piece: &Piece) -> Option<Read> {
    let max = Limits::default().max_yaml_nodes;
    match piece {
        Piece::Item { text, .. } => {
            let parsed = fast::item(text, max)?;
            Some((parsed.value, Some(parsed.line), parsed.nodes))
        }
        Piece::Document(document) => {
            let parsed = fast::document(&document.text, max)?;
            let (fields, items) = parsed.value;
            let value = json!({"fields": fields, "items": items});
            Some((value, Some(parsed.line), parsed.nodes))
        }
    }
}

fn text_of(piece: &Piece) -> &str {
    match piece {
        Piece::Item { text, .. } => text,
        Piece::Document(document) => &document.text,
    }
}

/// Checks every piece of `text`; returns how many pieces there were and how many the
/// fast path read.
fn compare(text: &str) -> (usize, usize) {
    let mut splitter = Splitter::new(text.as_bytes());
    let (mut pieces, mut fast) = (0, 0);
    while let Ok(Some(piece)) = splitter.next_piece() {
        pieces += 1;
        if let Some(read) = fast_path(&piece) {
            fast += 1;
            assert_eq!(Some(read), saphyr(&piece), "{}", text_of(&piece));
        }
    }
    (pieces, fast)
}

fn dump(format: DumpFormat) -> String {
    let shape = DumpShape {
        pods: 300,
        running_percent: 20,
    };
    let mut out = Vec::new();
    fixtures::write(fixtures::objects(shape), format, &mut out).expect("written");
    String::from_utf8(out).expect("UTF-8")
}

#[test]
fn generated_dumps_read_alike_and_all_on_the_fast_path() {
    for format in [DumpFormat::Yaml, DumpFormat::YamlStream] {
        let (pieces, fast) = compare(&dump(format));
        assert!(pieces > 300, "{format:?}: {pieces}");
        assert_eq!(fast, pieces, "{format:?}");
    }
}

#[test]
fn every_yaml_file_of_the_repository_reads_alike() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut fast_total = 0;
    for dir in ["examples", "tests/fixtures", "deploy", "loadtest/scenarios"] {
        for file in super::manifest_files(&root.join(dir)).expect("listed") {
            if file.extension().is_some_and(|e| e == "json") {
                continue;
            }
            let text = std::fs::read_to_string(&file).expect("readable");
            fast_total += compare(&text).1;
        }
    }
    // Hand-written manifests often use flow sequences, which the fast path leaves alone.
    assert!(fast_total > 40, "the fast path read {fast_total} pieces");
}

const SCALARS: &str = r#"---   # a document marker and a comment
apiVersion: v1
kind: ConfigMap
metadata:
  name: "scalars"   # trailing comment
  labels: {}
  annotations:
    quoted: 'it''s'
    escaped: "tab\there \"q\" \\ \u00e9 \x41 \/ \U0001F600"
    url: http://example.com:8080/x#y
    colons: a:b:c
    "k:{\"type\":\"Ready\"}": k
    .: dot
data:
  ints: []
  values:
  - 0
  - 7
  - 1234567890123
  - 12345678901234567890123
  - -7
  - +7
  - 0o17
  - 017
  - 0x1F
  - 1_000
  - 1.5
  - -1.5e3
  - .5
  - 300m
  - 768Mi
  - 10%
  - 1.2.3
  - 10.0.0.1
  - 2001-12-14
  - 2001-12-14t21:59:43.10-05:00
  - 1:20
  - 0s
  - ~
  - null
  - Null
  - NULL
  - true
  - True
  - FALSE
  - yes
  - No
  - on
  - OFF
  - y
  - n
  - inf
  - nan
  - on-demand
  - --port=8080
  - -
  - - nested
    - seq
  -
    key: under a dash
  - key: compact
    other: map
  - "quoted"
  - 'single'
  empty:
  also-empty: # comment
  literal: |
    line one
      indented

    after a blank
  stripped: |-
    no newline
  folded: >
    folded
    lines

    paragraph
  folded-stripped: >-
    a
    b
  after: block scalars
...
"#;

#[test]
fn scalars_and_block_forms_are_typed_as_serde_saphyr_types_them() {
    assert_eq!(compare(SCALARS), (1, 1));
}

#[test]
fn what_the_fast_path_does_not_read_is_left_to_serde_saphyr() {
    for text in [
        "a: &x 1\nb: *x\n",
        // serde-saphyr refuses non-finite floats in a document it decodes.
        "a: .inf\n",
        "a: !!str 1\n",
        "a: {b: 1}\n",
        "a: [1]\n",
        "a: plain\n  continued\n",
        "a: \"quoted\n  continued\"\n",
        "? complex\n: key\n",
        "a: 1\nb: 2\na: 3\n",
        "<<: {a: 1}\n",
        "a:\n\tb: 1\n",
        "a: 1\r\nb: 2\r\n",
        "a: |+\n  keep\n\n",
        "a: |2\n   indented\n",
        "1: number key\n",
        "yes: boolean key\n",
        "items:\n  - a\n",
        "a: b: c\n",
        "- a\n",
        "a:\n  b: 1\n c: 2\n",
    ] {
        let mut splitter = Splitter::new(text.as_bytes());
        let piece = splitter.next_piece().expect("splits").expect("a piece");
        assert!(fast_path(&piece).is_none(), "{text:?}");
    }
}

#[test]
fn a_piece_over_the_node_limit_is_left_to_serde_saphyr() {
    let text = "- apiVersion: v1\n  kind: Pod\n  spec:\n    a: []\n";
    let nodes = fast::item(text, usize::MAX).expect("read").nodes;
    // Two mappings, four keys, two strings and the empty sequence.
    assert_eq!(nodes, 9);
    assert!(fast::item(text, nodes).is_some());
    assert!(fast::item(text, nodes - 1).is_none());
}
