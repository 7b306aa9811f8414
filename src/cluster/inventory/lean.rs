//! What the inventory keeps of a pod. A plan holds every pod of the input until the solve
//! ends, so each byte per pod counts ten- or a hundred-thousandfold. The pod is checked
//! whole before this; what is dropped here is what no decision of the plan reads (the
//! scheduler, the report, the warnings and the disruption pass), as the controller's stores
//! drop it: see [`keep_what_placement_reads`].

use k8s_openapi::api::core::v1::Pod;

use crate::cluster::workloads::Expansion;
use crate::pods::keep_what_placement_reads;

/// Drops what no plan decision reads from `pod`'s spec.
pub(super) fn keep_what_plans_read(pod: &mut Pod) {
    if let Some(spec) = pod.spec.as_mut() {
        keep_what_placement_reads(spec);
    }
}

/// An expansion's pods as the inventory keeps them, without the room of the replicas
/// adoption dropped.
pub(super) fn expansion(mut expansion: Expansion) -> Expansion {
    expansion.pods.iter_mut().for_each(keep_what_plans_read);
    expansion.pods.shrink_to_fit();
    expansion
}
