//! `kerf validate -f PATH [-f PATH ...]`: checks Karpenter manifests the way the API server
//! (and upstream's controller) would, without a cluster. Prints `FILE: KIND/NAME: OK` per
//! valid Karpenter object and `FILE: KIND/NAME: field.path: problem` per problem; other
//! kinds are noted as ignored on stderr. Exits 1 if anything was wrong or unreadable.

use kerf::manifest::{DEFAULT_MAX_YAML_NODES, Limits, ManifestError, Object};
use kerf::validation::migration::provisioner_label_hints;
use kerf::validation::{Verdict, validate_object};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Manifest file or directory (YAML or JSON, searched recursively); `-` reads stdin.
    #[arg(short = 'f', long = "filename", value_name = "PATH", required = true)]
    pub files: Vec<PathBuf>,
    /// YAML nodes (mappings, sequences, scalars) one document may hold; a guard against
    /// runaway input, sized for a `kind: List` dump of about 200,000 pods.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_YAML_NODES)]
    pub max_yaml_nodes: usize,
}

/// Counts what was found, to decide the exit code and the closing note.
#[derive(Default)]
struct Tally {
    failed: bool,
    karpenter_objects: usize,
}

pub fn run(args: Args) -> ExitCode {
    let mut tally = Tally::default();
    let limits = Limits {
        max_yaml_nodes: args.max_yaml_nodes,
        ..Limits::default()
    };
    for path in &args.files {
        let read = super::read_each(path, limits, &mut |object| match object {
            Ok(object) => check_object(&object, &mut tally),
            Err(e) => report_error(&e, &mut tally),
        });
        for error in read.err().into_iter().flatten() {
            report_error(&error, &mut tally);
        }
    }
    if tally.karpenter_objects == 0 && !tally.failed {
        eprintln!("kerf validate: no Karpenter objects found");
    }
    if tally.failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn check_object(object: &Object, tally: &mut Tally) {
    let file = &object.source.file;
    let name = object.display_name();
    match validate_object(object) {
        Verdict::Ignored => {
            eprintln!("{file}: {name}: ignored (not a Karpenter object)");
            // Still worth a word: a selector on the pre-v1 label never matches a new node.
            for problem in provisioner_label_hints(&object.value) {
                println!("{file}: {name}: warning: {problem}");
            }
        }
        Verdict::Valid(_) => {
            tally.karpenter_objects += 1;
            println!("{file}: {name}: OK");
        }
        Verdict::Invalid(problems) => {
            tally.karpenter_objects += 1;
            tally.failed = true;
            for problem in problems {
                println!("{file}: {name}: {problem}");
            }
        }
    }
}

fn report_error(error: &ManifestError, tally: &mut Tally) {
    tally.failed = true;
    println!("{error}");
}
