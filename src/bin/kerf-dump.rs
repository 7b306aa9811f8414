//! `kerf-dump --pods N [--running-percent P] [--format json|yaml|yaml-stream]`: writes a
//! realistic cluster dump (see `kerf::plan::fixtures`) to standard output, for benchmarks
//! of `kerf plan` and `kerf validate` on real-sized input.
//!
//! `cargo run --release -p kerf --features fixtures --bin kerf-dump -- --pods 20000 > d.yaml`

use std::io::{BufWriter, Write};
use std::process::ExitCode;

use kerf::plan::fixtures::{self, DumpFormat, DumpShape};

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("kerf-dump: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Vec<String>) -> Result<(), String> {
    let mut shape = DumpShape::pending(1000);
    let mut format = DumpFormat::Yaml;
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--pods" => shape.pods = number(&flag, &value()?)?,
            "--running-percent" => shape.running_percent = number(&flag, &value()?)?,
            "--format" => {
                format = match value()?.as_str() {
                    "json" => DumpFormat::Json,
                    "yaml" => DumpFormat::Yaml,
                    "yaml-stream" => DumpFormat::YamlStream,
                    other => return Err(format!("--format: unknown format {other}")),
                }
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    fixtures::write(fixtures::objects(shape), format, &mut out)
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write: {e}"))
}

fn number(flag: &str, text: &str) -> Result<usize, String> {
    text.parse()
        .map_err(|_| format!("{flag}: expected a number, got {text}"))
}
