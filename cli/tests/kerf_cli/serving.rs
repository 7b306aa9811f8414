//! Waiting for `kerf simulate --kubeconfig-out` to keep its cluster up: shared by the test
//! files that drive the kept cluster (included by path, so files that do not need it do
//! not compile it).

use std::io::{BufRead, BufReader};
use std::process::Child;

/// Reads `child`'s standard error until the line saying the simulated cluster keeps running
/// (printed after the summary) and returns the lines read; fails the test, with those lines,
/// when the stream ends first (the run died). The rest of standard error is read and
/// dropped on a thread, so kerf neither blocks on a full pipe nor writes into a closed one.
pub fn until_serving(child: &mut Child) -> Vec<String> {
    let stderr = child.stderr.take().expect("piped stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref().map_while(Result::ok) {
        let up = line.contains("keeps running");
        seen.push(line);
        if up {
            std::thread::spawn(move || lines.for_each(drop));
            return seen;
        }
    }
    panic!("the simulated cluster did not stay up: {seen:?}");
}
