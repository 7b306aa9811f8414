//! An existing node's prepared form, kept across rounds: what placement reads of the pods it
//! holds (their workloads' shapes and how many of each count, its room left and its host
//! ports), none of which depends on the pending pods or on the round's interning. In a settled
//! cluster every round holds the same thousands of nodes and their pods, so [`NodeForms`]
//! keeps each form by node name and reuses it while the node's allocatable is equal and its
//! pods are the very same shared objects, in the same order, as when it was built (a pod's
//! write replaces its `Arc` in the cluster state). A form keeps its pods only as `Weak`
//! pointers, so a pod deleted since is never kept alive and its address never reused while
//! the form may be compared against it. The round interns each form afresh in the order a
//! fresh prepare would, so a round with kept forms solves exactly as a fresh one. Forms of
//! nodes the latest round did not hold are dropped when it finishes: the cache holds at most
//! one round's nodes.

use std::sync::{Arc, Weak};

use k8s_openapi::api::core::v1::PodAffinityTerm;

use super::intern::FxHashMap;
use super::pod::{ConstraintSpec, HostPort, pod_requests};
use super::resvec::ResNames;
use super::types::ExistingNode;
use crate::pods::{LeanPod, PodLike};
use crate::resources::Resources;
use crate::room::GiveBackRoom;

/// What placement reads of a pod on a node, alike for every pod sharing its spec and
/// template metadata (a workload's replicas): labels and namespace for topology counting, its
/// requests, host ports, required anti-affinity terms and owning daemonset.
#[derive(Debug, PartialEq)]
pub(super) struct ShapeForm {
    /// In the pod's label order, interned key then value.
    pub labels: Vec<(String, String)>,
    pub namespace: String,
    /// The resource names its requests registered, in the order they were met (also those
    /// met before an unparsable quantity), so a round registers them as a fresh one would.
    pub names: Vec<String>,
    /// Indices into `names` and milli-values, or the quantity that does not parse.
    pub requests: Result<Vec<(usize, i64)>, String>,
    pub ports: Vec<HostPort>,
    pub anti_terms: Vec<PodAffinityTerm>,
    pub daemonset: Option<(String, String)>,
}

impl ShapeForm {
    fn of(p: &LeanPod) -> Self {
        let spec = ConstraintSpec::of(p);
        let mut local = ResNames::default();
        let requests = pod_requests(p, &mut local);
        let daemonset = p
            .meta()
            .owner_references
            .iter()
            .find(|o| o.kind == "DaemonSet")
            .map(|o| (spec.namespace.clone(), o.name.clone()));
        Self {
            labels: spec
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            names: (0..local.len()).map(|i| local.name(i).to_owned()).collect(),
            requests,
            ports: spec.host_ports.clone(),
            anti_terms: crate::pods::required_anti_affinity_terms(spec.affinity.as_ref()).to_vec(),
            daemonset,
            namespace: spec.namespace,
        }
    }
}

/// What a round prepares of an existing node that no pending pod changes.
#[derive(Debug)]
pub struct NodeForm {
    /// The allocatable the form was built from.
    allocatable: Resources,
    /// The pods it was built from, in order (none for a form no cache keeps).
    pods: Vec<Weak<LeanPod>>,
    /// Each workload shape of its pods in the order first met, with how many of its pods
    /// count (neither deleting nor finished); a shape none of whose pods counts is listed too
    /// (its daemonset still runs there).
    pub(super) shapes: Vec<(Arc<ShapeForm>, u32)>,
    /// Allocatable less the counting pods' requests, by resource name, each pod subtracted in
    /// turn (saturating) as placement would.
    pub(super) room: Vec<(String, i64)>,
    /// Host ports of the counting pods, in pod order.
    pub(super) ports: Vec<HostPort>,
    /// The first counting pod's unparsable quantity: the node cannot be prepared.
    pub(super) bad: Option<String>,
}

/// The shape forms built so far this round, by the addresses of the shared spec and template
/// metadata they were built from (the round's input holds those alive, so no address is
/// reused within it).
pub(super) type ShapeForms = FxHashMap<(usize, usize), Arc<ShapeForm>>;

impl NodeForm {
    /// `node`'s form; `kept` when a cache will compare it with later rounds' nodes.
    pub(super) fn of(node: &ExistingNode, shapes: &mut ShapeForms, kept: bool) -> Self {
        let mut room: Vec<(String, i64)> = node
            .allocatable
            .iter()
            .map(|(name, q)| (name.to_owned(), q.milli_value()))
            .collect();
        let mut listed: Vec<(Arc<ShapeForm>, u32)> = Vec::new();
        // Per listed shape, the room entry of each of its requests (found once per node).
        let mut slots: Vec<Vec<usize>> = Vec::new();
        let mut ports = Vec::new();
        let mut bad = None;
        for p in &node.pods {
            let key = (
                Arc::as_ptr(p.shared_meta()) as usize,
                p.shared_spec().map_or(0, |spec| Arc::as_ptr(spec) as usize),
            );
            let shape = shapes
                .entry(key)
                .or_insert_with(|| Arc::new(ShapeForm::of(p)));
            let at = match listed.iter().position(|(s, _)| Arc::ptr_eq(s, shape)) {
                Some(at) => at,
                None => {
                    let mut slot = Vec::new();
                    for (id, _) in shape.requests.as_deref().unwrap_or_default() {
                        let name = &shape.names[*id];
                        slot.push(match room.iter().position(|(n, _)| n == name) {
                            Some(at) => at,
                            None => {
                                room.push((name.clone(), 0));
                                room.len() - 1
                            }
                        });
                    }
                    listed.push((Arc::clone(shape), 0));
                    slots.push(slot);
                    listed.len() - 1
                }
            };
            if !crate::pods::is_active(&**p) {
                continue;
            }
            listed[at].1 += 1;
            match &shape.requests {
                Ok(requests) => {
                    for ((_, value), slot) in requests.iter().zip(&slots[at]) {
                        let left = &mut room[*slot].1;
                        *left = left.saturating_sub(*value);
                    }
                }
                Err(quantity) => {
                    bad.get_or_insert_with(|| quantity.clone());
                }
            }
            ports.extend(shape.ports.iter().cloned());
        }
        Self {
            allocatable: node.allocatable.clone(),
            pods: if kept {
                node.pods.iter().map(Arc::downgrade).collect()
            } else {
                Vec::new()
            },
            shapes: listed,
            room,
            ports,
            bad,
        }
    }

    /// Whether the form was built from exactly this node's allocatable and pods.
    fn fits(&self, node: &ExistingNode) -> bool {
        self.pods.len() == node.pods.len()
            && self
                .pods
                .iter()
                .zip(&node.pods)
                .all(|(kept, pod)| std::ptr::eq(kept.as_ptr(), Arc::as_ptr(pod)))
            && self.allocatable == node.allocatable
    }
}

/// The forms of the nodes the latest round prepared, by node name.
#[derive(Debug, Default)]
pub struct NodeForms {
    by_name: FxHashMap<String, Kept>,
    /// The round the forms were last asked for in: a form not asked for in it goes.
    round: u64,
    reused: u64,
}

#[derive(Debug)]
struct Kept {
    form: Arc<NodeForm>,
    round: u64,
}

impl NodeForms {
    /// Starts a round: forms asked for until [`Self::finish_round`] are kept after it.
    pub fn start_round(&mut self) {
        self.round += 1;
    }

    /// Drops the forms of nodes the round did not hold (gone, or not in its input).
    pub fn finish_round(&mut self) {
        let round = self.round;
        self.by_name.retain(|_, kept| kept.round == round);
        self.by_name.give_back_room();
    }

    /// `node`'s form: the kept one while it fits the node, else built and kept.
    pub(super) fn form(&mut self, node: &ExistingNode, shapes: &mut ShapeForms) -> Arc<NodeForm> {
        if let Some(kept) = self.by_name.get_mut(&node.name)
            && kept.form.fits(node)
        {
            kept.round = self.round;
            self.reused += 1;
            return Arc::clone(&kept.form);
        }
        let form = Arc::new(NodeForm::of(node, shapes, true));
        let kept = Kept {
            form: Arc::clone(&form),
            round: self.round,
        };
        self.by_name.insert(node.name.clone(), kept);
        form
    }

    /// Forms kept.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Forms reused instead of built, since the cache was made.
    pub fn reused(&self) -> u64 {
        self.reused
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::testing::{pod, resources, shared};

    fn node(name: &str, pods: Vec<Arc<LeanPod>>) -> ExistingNode {
        ExistingNode {
            name: name.into(),
            allocatable: resources(&[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")]),
            pods,
            ..Default::default()
        }
    }

    fn cpu(form: &NodeForm) -> i64 {
        form.room
            .iter()
            .find(|(name, _)| name == "cpu")
            .map_or(0, |(_, v)| *v)
    }

    #[test]
    fn a_form_is_reused_while_the_nodes_pods_and_allocatable_are_the_same() {
        let pods = shared(pod("web").cpu("1").replicas("web", 3));
        let mut forms = NodeForms::default();
        let mut shapes = ShapeForms::default();
        forms.start_round();
        let first = forms.form(&node("a", pods[..2].to_vec()), &mut shapes);
        forms.finish_round();
        assert_eq!(cpu(&first), 2000);

        forms.start_round();
        let mut shapes = ShapeForms::default();
        let again = forms.form(&node("a", pods[..2].to_vec()), &mut shapes);
        assert!(Arc::ptr_eq(&first, &again), "the kept form, not a copy");
        assert_eq!(forms.reused(), 1);

        let bound = forms.form(&node("a", pods.clone()), &mut shapes);
        assert_eq!(cpu(&bound), 1000, "a pod bound since counts");
        let mut written = pods[..2].to_vec();
        written[1] = shared(pod("web").cpu("2").replicas("web", 2)).remove(1);
        let rewritten = forms.form(&node("a", written), &mut shapes);
        assert_eq!(cpu(&rewritten), 1000, "a pod written since is read again");
        let mut smaller = node("a", pods[..2].to_vec());
        smaller.allocatable = resources(&[("cpu", "3")]);
        assert_eq!(cpu(&forms.form(&smaller, &mut shapes)), 1000);
        assert_eq!(forms.reused(), 1, "none of those was reused");
        forms.finish_round();
        assert_eq!(forms.len(), 1);
    }

    #[test]
    fn only_the_latest_rounds_nodes_are_kept_and_their_pods_are_not() {
        let pods = shared(pod("web").cpu("1").replicas("web", 2));
        let mut forms = NodeForms::default();
        let mut shapes = ShapeForms::default();
        forms.start_round();
        forms.form(&node("a", vec![Arc::clone(&pods[0])]), &mut shapes);
        forms.form(&node("b", vec![Arc::clone(&pods[1])]), &mut shapes);
        forms.finish_round();
        assert_eq!(forms.len(), 2);

        forms.start_round();
        forms.form(
            &node("b", vec![Arc::clone(&pods[1])]),
            &mut ShapeForms::default(),
        );
        forms.finish_round();
        assert_eq!(forms.len(), 1, "a, gone meanwhile, is dropped");

        let web = Arc::downgrade(&pods[1]);
        drop((pods, shapes));
        assert!(
            web.upgrade().is_none(),
            "a kept form does not keep its pods alive"
        );
    }

    #[test]
    fn a_finished_pod_is_listed_but_neither_counted_nor_subtracted() {
        let mut done = pod("done").cpu("3").build();
        done.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        });
        let pods = shared(vec![done, pod("web").cpu("1").host_port(80).build()]);
        let form = NodeForm::of(&node("a", pods), &mut ShapeForms::default(), false);
        let counts: Vec<u32> = form.shapes.iter().map(|(_, c)| *c).collect();
        assert_eq!(counts, [0, 1]);
        assert_eq!(cpu(&form), 3000);
        assert_eq!(form.ports.len(), 1);
        assert!(form.bad.is_none());
    }
}
