//! Runs the built `kerf` binary for the command-line tests: arguments, optional standard
//! input, and the finished process's output. Shared by the test files that include it.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

/// Runs `kerf ARGS`, feeding `stdin` when given (standard input is closed otherwise).
pub fn kerf(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kerf starts");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("piped stdin");
        // kerf stops reading at an input it refuses; the rest of the input is not wanted.
        if let Err(error) = pipe.write_all(input) {
            assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe, "{error}");
        }
    }
    child.wait_with_output().expect("kerf finishes")
}

/// Process output as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
