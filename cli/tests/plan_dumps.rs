//! `kerf plan` and `kerf validate` on realistic cluster dumps (`kerf::plan::fixtures`, shaped
//! like `kubectl get -o yaml|json`): a file and standard input give the same answer, YAML and
//! JSON the same plan, and a document above `--max-yaml-nodes` is refused in kerf's words.

mod kerf_cli;

use std::process::Output;

use kerf::plan::fixtures::{self, DumpFormat, DumpShape};
use kerf_cli::{kerf, text};

fn dump(format: DumpFormat) -> Vec<u8> {
    let shape = DumpShape {
        pods: 300,
        running_percent: 20,
    };
    let mut out = Vec::new();
    fixtures::write(fixtures::objects(shape), format, &mut out).expect("written");
    out
}

/// A dump written to a scratch file, removed when dropped.
struct DumpFile(std::path::PathBuf);

impl DumpFile {
    fn new(name: &str, contents: &[u8]) -> Self {
        let path = std::env::temp_dir().join(format!("kerf-dump-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).expect("dump written");
        Self(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }
}

impl Drop for DumpFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What one run printed, with the dump's file name written as `-`.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `args` on `input` read from a file and from stdin.
fn file_and_stdin(args: &[&str], input: &[u8], name: &str) -> [Run; 2] {
    let file = DumpFile::new(name, input);
    let mut with_file = args.to_vec();
    with_file.extend(["-f", file.path()]);
    let mut with_stdin = args.to_vec();
    with_stdin.extend(["-f", "-"]);
    let run = |output: Output| Run {
        code: output.status.code(),
        stdout: text(&output.stdout).replace(file.path(), "-"),
        stderr: text(&output.stderr).replace(file.path(), "-"),
    };
    [
        run(kerf(&with_file, None)),
        run(kerf(&with_stdin, Some(input))),
    ]
}

#[test]
fn plan_answers_alike_from_a_file_and_stdin_in_yaml_and_json() {
    let mut reports = Vec::new();
    for (format, name) in [(DumpFormat::Yaml, "d.yaml"), (DumpFormat::Json, "d.json")] {
        let [file, stdin] = file_and_stdin(&["plan", "-o", "json"], &dump(format), name);
        assert_eq!(file.code, Some(0), "{}", file.stderr);
        assert_eq!(stdin.code, Some(0), "{}", stdin.stderr);
        assert_eq!(file.stdout, stdin.stdout, "{name}");
        assert_eq!(file.stderr, stdin.stderr, "{name}");
        let report: serde_json::Value = serde_json::from_str(&file.stdout).expect("JSON report");
        assert!(
            report["unschedulable"]
                .as_array()
                .is_some_and(Vec::is_empty),
            "{report}"
        );
        assert!(
            report["nodeClaims"]
                .as_array()
                .is_some_and(|c| !c.is_empty()),
            "{report}"
        );
        reports.push(report);
    }
    assert_eq!(reports[0], reports[1], "YAML and JSON dumps plan alike");
}

#[test]
fn a_document_above_the_node_limit_is_refused_in_kerfs_words() {
    let runs = file_and_stdin(
        &["plan", "--max-yaml-nodes", "5000"],
        &dump(DumpFormat::Yaml),
        "big.yaml",
    );
    for run in runs {
        assert_eq!(run.code, Some(1));
        assert!(run.stdout.is_empty());
        assert_eq!(
            run.stderr.trim_end(),
            "-: the document has more than 5000 nodes; raise it with --max-yaml-nodes"
        );
    }
    // The same cluster as a stream of documents is below the limit document by document.
    let mut stream = Vec::new();
    let shape = DumpShape::pending(300);
    fixtures::write(
        fixtures::objects(shape),
        DumpFormat::YamlStream,
        &mut stream,
    )
    .expect("written");
    let output = kerf(
        &["plan", "--max-yaml-nodes", "5000", "-f", "-"],
        Some(&stream),
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
}

#[test]
fn validate_reads_dumps_from_a_file_and_stdin_alike() {
    let [file, stdin] = file_and_stdin(&["validate"], &dump(DumpFormat::Json), "v.json");
    assert_eq!(file.code, Some(0), "{}", file.stderr);
    assert_eq!(stdin.code, Some(0), "{}", stdin.stderr);
    assert_eq!(file.stdout, stdin.stdout);
    assert_eq!(file.stderr, stdin.stderr);
    for object in [
        "NodePool/default",
        "EC2NodeClass/default",
        "NodeClaim/default-00000",
    ] {
        assert!(
            stdin.stdout.contains(&format!("-: {object}: OK")),
            "{}",
            stdin.stdout
        );
    }
    assert!(
        stdin.stderr.contains("-: Pod/web-0-"),
        "other kinds are listed as ignored: {}",
        stdin.stderr
    );
}
