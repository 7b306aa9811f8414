//! What a simulation applies: the default EC2NodeClass, NodePool and workload, each
//! replaced by the user's files when given (`--nodepools`, `--workload`). Everything is
//! read with the manifest reader and checked as `kerf plan` checks it — the API server's
//! rules for Karpenter objects, well-formed workloads — so a bad file stops the run before
//! anything starts, with the file, object and field in the message.

use std::collections::HashMap;
use std::path::PathBuf;

use kerf::cluster::inventory::{self, Inventory};
use kerf::manifest::{self, Limits, Object};

use super::defaults;

/// The objects to apply, split by when they are applied.
#[derive(Debug)]
pub struct Inputs {
    /// Namespaces, node classes, NodePools, storage, budgets...: applied before the
    /// controller starts.
    pub setup: Vec<Object>,
    /// Pods and the workloads that make them: applied once the controller watches.
    pub workload: Vec<Object>,
    /// The objects decoded and checked; its `pods` are the pods the workload makes.
    pub inventory: Inventory,
}

/// Where the objects come from.
#[derive(Debug, Clone)]
pub struct Sources {
    /// Scale of the default workload.
    pub pods: usize,
    pub nodepools: Vec<PathBuf>,
    pub workload: Vec<PathBuf>,
}

/// Kinds that create pods (or are pods); everything else is set-up.
const POD_MAKERS: [&str; 6] = [
    "Pod",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "Job",
    "DaemonSet",
];

/// Reads and checks every source; the error lists every problem, one per line. The default
/// NodePool is added unless the user's files (`--nodepools` or `--workload`) bring one, and
/// the default EC2NodeClass unless they bring one named `default` (their NodePools may rely
/// on it by name).
pub fn read(sources: &Sources) -> Result<Inputs, Vec<String>> {
    let mut errors = Vec::new();
    let mut all = collect(read_objects(&sources.nodepools), &mut errors);
    if sources.workload.is_empty() {
        all.extend(defaults_of(&[(
            defaults::workload(sources.pods),
            defaults::WORKLOAD_SOURCE,
        )]));
    } else {
        all.extend(collect(read_objects(&sources.workload), &mut errors));
    }
    let mut missing = Vec::new();
    if !all.iter().any(is_default_nodeclass) {
        missing.push((defaults::nodeclass(), defaults::NODECLASS_SOURCE));
    }
    if !all.iter().any(|o| o.kind == "NodePool") {
        missing.push((defaults::nodepool(), defaults::NODEPOOL_SOURCE));
    }
    all.splice(0..0, defaults_of(&missing));
    errors.extend(defined_twice(&all));
    if !errors.is_empty() {
        return Err(errors);
    }
    let inventory = inventory::inventory(&all)
        .map_err(|problems| problems.iter().map(ToString::to_string).collect::<Vec<_>>())?;
    let (workload, setup) = all
        .into_iter()
        .partition(|o| POD_MAKERS.contains(&o.kind.as_str()));
    Ok(Inputs {
        setup,
        workload,
        inventory,
    })
}

/// `SOURCE: KIND/NAME: also defined at SOURCE` for each object given twice: the API server
/// would refuse the second with AlreadyExists, after the run started.
fn defined_twice(objects: &[Object]) -> Vec<String> {
    let mut first: HashMap<(&str, Option<&str>, Option<&str>), &Object> = HashMap::new();
    let mut problems = Vec::new();
    for object in objects {
        let key = (
            object.kind.as_str(),
            object.namespace.as_deref(),
            object.name.as_deref(),
        );
        match first.get(&key) {
            Some(earlier) if object.name.is_some() => problems.push(format!(
                "{}: {}: also defined at {}",
                object.source,
                object.display_name(),
                earlier.source
            )),
            _ => {
                first.insert(key, object);
            }
        }
    }
    problems
}

fn is_default_nodeclass(object: &Object) -> bool {
    object.kind == "EC2NodeClass" && object.name.as_deref() == Some("default")
}

/// The built-in manifests; they are tested to parse, so a failure here is a bug.
fn defaults_of(texts: &[(String, &str)]) -> Vec<Object> {
    texts
        .iter()
        .flat_map(|(text, source)| {
            manifest::parse_all(text, source).expect("the built-in manifests parse")
        })
        .collect()
}

/// Every object behind every path (a file, a directory's manifests, or standard input for
/// `-`), or every read and parse error, so that one run shows everything to fix.
pub fn read_objects(paths: &[PathBuf]) -> Result<Vec<Object>, Vec<String>> {
    let mut objects = Vec::new();
    let mut errors = Vec::new();
    for path in paths {
        let mut sink = |object: Result<Object, manifest::ManifestError>| match object {
            Ok(object) => objects.push(object),
            Err(error) => errors.push(error.to_string()),
        };
        let read = if path.as_os_str() == "-" {
            manifest::stream::read(std::io::stdin(), "-", Limits::default(), &mut sink)
                .map_err(|e| vec![e])
        } else {
            manifest::read_path_objects(path, Limits::default(), &mut sink)
        };
        if let Err(failures) = read {
            errors.extend(failures.iter().map(ToString::to_string));
        }
    }
    if errors.is_empty() {
        Ok(objects)
    } else {
        Err(errors)
    }
}

fn collect(read: Result<Vec<Object>, Vec<String>>, errors: &mut Vec<String>) -> Vec<Object> {
    read.unwrap_or_else(|mut problems| {
        errors.append(&mut problems);
        Vec::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(pods: usize) -> Sources {
        Sources {
            pods,
            nodepools: Vec::new(),
            workload: Vec::new(),
        }
    }

    #[test]
    fn the_defaults_split_into_setup_and_workload() {
        let inputs = read(&sources(40)).expect("defaults are valid");
        let kinds: Vec<&str> = inputs.setup.iter().map(|o| o.kind.as_str()).collect();
        assert_eq!(kinds, ["EC2NodeClass", "NodePool"]);
        assert!(inputs.workload.iter().all(|o| o.kind == "Deployment"));
        assert_eq!(inputs.inventory.pods.len(), 40);
    }

    #[test]
    fn a_bad_workload_file_is_named() {
        let dir = std::env::temp_dir().join(format!("kerf-sim-inputs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("broken.yaml");
        std::fs::write(
            &file,
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n    - name: c\n      image: i\n      resources: {requests: {cpu: lots}}\n",
        )
        .expect("written");
        let errors = read(&Sources {
            workload: vec![file.clone()],
            ..sources(1)
        })
        .expect_err("invalid quantity");
        std::fs::remove_dir_all(&dir).expect("cleaned up");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("broken.yaml"), "{errors:?}");
        assert!(errors[0].contains("Pod/p"), "{errors:?}");
    }

    #[test]
    fn nodepools_from_a_file_keep_the_default_node_class() {
        let dir = std::env::temp_dir().join(format!("kerf-sim-pools-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("pools.yaml");
        std::fs::write(
            &file,
            defaults::nodepool().replace(
                "name: default\nspec:\n  template",
                "name: mine\nspec:\n  template",
            ),
        )
        .expect("written");
        let inputs = read(&Sources {
            nodepools: vec![file],
            ..sources(5)
        })
        .expect("valid");
        std::fs::remove_dir_all(&dir).expect("cleaned up");
        let names: Vec<String> = inputs.setup.iter().map(Object::display_name).collect();
        assert_eq!(names, ["EC2NodeClass/default", "NodePool/mine"]);
    }

    #[test]
    fn a_workload_file_may_bring_its_own_nodepools_and_node_class() {
        let dir = std::env::temp_dir().join(format!("kerf-sim-own-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("everything.yaml");
        let pool = defaults::nodepool().replace("name: default\nspec:", "name: mine\nspec:");
        let text = format!(
            "{}\n---\n{pool}\n---\n{}",
            defaults::nodeclass(),
            defaults::workload(3)
        );
        std::fs::write(&file, text).expect("written");
        let inputs = read(&Sources {
            workload: vec![file.clone()],
            ..sources(1)
        })
        .expect("valid");
        let names: Vec<String> = inputs.setup.iter().map(Object::display_name).collect();
        assert_eq!(
            names,
            ["EC2NodeClass/default", "NodePool/mine"],
            "no defaults added"
        );
        assert_eq!(inputs.inventory.pods.len(), 3);

        let errors = read(&Sources {
            nodepools: vec![file.clone()],
            workload: vec![file.clone()],
            ..sources(1)
        })
        .expect_err("every object twice");
        std::fs::remove_dir_all(&dir).expect("cleaned up");
        assert!(
            errors
                .iter()
                .any(|e| e.contains("NodePool/mine: also defined at")
                    && e.contains("everything.yaml")),
            "{errors:?}"
        );
    }
}
