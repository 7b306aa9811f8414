//! What a simulation applies: the default EC2NodeClass, NodePool and workload, each
//! replaced by the user's files when given (`--nodepools`, `--workload`). Everything is
//! read with the manifest reader and checked as `kerf plan` checks it — the API server's
//! rules for Karpenter objects, well-formed workloads — so a bad file stops the run before
//! anything starts, with the file, object and field in the message.

use std::path::PathBuf;

use kerf::manifest::{self, Object};
use kerf::plan::inventory::{self, Inventory};

use super::defaults;
use crate::cmd::read_objects;

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

/// Reads and checks every source; the error lists every problem, one per line.
pub fn read(sources: &Sources) -> Result<Inputs, Vec<String>> {
    let mut errors = Vec::new();
    let nodepools = if sources.nodepools.is_empty() {
        defaults_of(&[
            (defaults::nodeclass(), defaults::NODECLASS_SOURCE),
            (defaults::nodepool(), defaults::NODEPOOL_SOURCE),
        ])
    } else {
        let mut objects = collect(read_objects(&sources.nodepools), &mut errors);
        if !objects.iter().any(is_default_nodeclass) {
            // The user's NodePools may rely on the default node class by name.
            objects.extend(defaults_of(&[(
                defaults::nodeclass(),
                defaults::NODECLASS_SOURCE,
            )]));
        }
        objects
    };
    let workload = if sources.workload.is_empty() {
        defaults_of(&[(defaults::workload(sources.pods), defaults::WORKLOAD_SOURCE)])
    } else {
        collect(read_objects(&sources.workload), &mut errors)
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    let all: Vec<Object> = nodepools.into_iter().chain(workload).collect();
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
        assert_eq!(names, ["NodePool/mine", "EC2NodeClass/default"]);
    }
}
