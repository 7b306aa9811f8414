//! The NodeOverlay status controller (`nodeoverlay.controller` upstream, with the
//! `NodeOverlay` gate): every overlay's `ValidationSucceeded` (`False` with reason
//! `RuntimeValidation` or `Conflict`) and the root `Ready`, from the same evaluation every
//! snapshot makes ([`kerf::overlay::evaluate`] over the NodePools' instance types, built with
//! the Provisioner's instance-type cache, so a pass re-resolves nothing). The overlays
//! themselves reach every provisioning round and disruption pass through cluster state
//! (`Inventory::node_overlays`); this loop only reports. Passes run while leading, on any
//! overlay, NodePool or node class change, and every [`PERIOD`]; writes are merge patches of
//! the status locked to the version read.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kerf::api::nodeoverlay::{CONDITION_READY, CONDITION_VALIDATION_SUCCEEDED};
use kerf::api::{Condition, ConditionStatus, Conditions, NodeOverlay};
use kerf::catalog::Catalog;
use kerf::cluster::ControllerSettings;
use kerf::cluster::snapshot;
use kerf::overlay::Verdict;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;

use crate::instance_types::InstanceTypeCache;
use crate::lifecycle::patch::locked;
use crate::offering_cache::OfferingCacheHandle;
use crate::provisioner::inventory;
use crate::requeue::{self, Trigger};
use crate::state::ClusterState;

/// Upstream's controller name (reconcile metrics).
pub const CONTROLLER: &str = "nodeoverlay.controller";
/// How often statuses are recomputed without a change announcing it: instance types change
/// with the provider's catalog refreshes and the OfferingCache, which no watch announces.
pub const PERIOD: Duration = Duration::from_secs(30);
/// `ValidationSucceeded=False` reasons, as upstream.
pub const REASON_RUNTIME_VALIDATION: &str = "RuntimeValidation";
pub const REASON_CONFLICT: &str = "Conflict";

/// What a pass evaluates with: the Provisioner's instance-type sources.
#[derive(Clone)]
pub struct Deps {
    pub client: Client,
    pub state: Arc<ClusterState>,
    pub catalog: Catalog,
    pub offerings: Option<OfferingCacheHandle>,
    pub instance_types: InstanceTypeCache,
    pub controller: ControllerSettings,
}

/// The conditions `overlay` should carry for `verdict`, keeping each transition time while
/// its status holds.
pub fn conditions(overlay: &NodeOverlay, verdict: &Verdict, now: Timestamp) -> Vec<Condition> {
    let (status, reason, message) = match verdict {
        Verdict::Applied => (
            ConditionStatus::True,
            CONDITION_VALIDATION_SUCCEEDED,
            String::new(),
        ),
        Verdict::Invalid(message) => (
            ConditionStatus::False,
            REASON_RUNTIME_VALIDATION,
            message.clone(),
        ),
        Verdict::Conflict => (
            ConditionStatus::False,
            REASON_CONFLICT,
            "conflict with another overlay".to_owned(),
        ),
    };
    let old = overlay
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let condition = |type_: &str, reason: &str, message: &str| {
        let since = old
            .condition(type_)
            .filter(|c| c.status == status)
            .map_or(Time(now), |c| c.last_transition_time.clone());
        Condition {
            type_: type_.to_owned(),
            status,
            observed_generation: overlay.metadata.generation,
            last_transition_time: since,
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    };
    let ready_reason = if status == ConditionStatus::True {
        CONDITION_READY
    } else {
        "UnhealthyDependents"
    };
    let ready_message = if status == ConditionStatus::True {
        String::new()
    } else {
        format!("{CONDITION_VALIDATION_SUCCEEDED}={status:?}")
    };
    vec![
        condition(CONDITION_READY, ready_reason, &ready_message),
        condition(CONDITION_VALIDATION_SUCCEEDED, reason, &message),
    ]
}

/// One pass: evaluates every overlay and writes the statuses that changed; returns the
/// names written.
pub async fn reconcile(deps: &Deps) -> Result<Vec<String>, String> {
    let overlays = deps.state.node_overlays.snapshot();
    if overlays.is_empty() {
        return Ok(Vec::new());
    }
    let inventory = inventory::of(&deps.state, Vec::new());
    let verdicts = {
        let mut source = deps
            .instance_types
            .round(&deps.catalog, deps.offerings.as_ref());
        let built = snapshot::build_with(&inventory, deps.controller, &mut source);
        deps.instance_types.finish_round();
        built.map_err(|e| e.to_string())?.overlays
    };
    let api: Api<NodeOverlay> = Api::all(deps.client.clone());
    let mut written = Vec::new();
    for overlay in overlays {
        let Some(verdict) = verdicts.get(overlay.name()) else {
            continue;
        };
        if let Verdict::Invalid(message) = verdict {
            tracing::warn!(overlay = overlay.name(), %message, "NodeOverlay failed validation");
        }
        let mut wanted = (*overlay).clone();
        wanted.status.get_or_insert_default().conditions =
            conditions(&overlay, verdict, Timestamp::now());
        let Some(patch) = locked(
            &*overlay,
            &wanted,
            overlay.metadata.resource_version.as_deref(),
        ) else {
            continue;
        };
        match api
            .patch_status(
                overlay.name(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
        {
            Ok(_) => written.push(overlay.name().to_owned()),
            // Gone, or changed since read: the next pass starts from the newer object.
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(format!("patching NodeOverlay {}: {e}", overlay.name())),
        }
    }
    Ok(written)
}

/// Runs passes until `shutdown`.
pub async fn run(
    deps: Deps,
    trigger: Trigger,
    leader: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
) {
    let state = Arc::clone(&deps.state);
    requeue::run(state, trigger, leader, shutdown, move || {
        let deps = deps.clone();
        async move {
            if let Err(error) =
                crate::metrics::reconcile(CONTROLLER, async { reconcile(&deps).await }).await
            {
                tracing::warn!(%error, "nodeoverlay status");
            }
            PERIOD
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_say_why_and_keep_their_transition_time() {
        let mut overlay: NodeOverlay = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": "o", "generation": 3},
            "spec": {"requirements": []}
        }))
        .expect("overlay");
        let t0 = Timestamp::from_second(1_000).expect("time");
        let applied = conditions(&overlay, &Verdict::Applied, t0);
        assert!(applied.is_condition_true(CONDITION_READY));
        assert!(applied.is_condition_true(CONDITION_VALIDATION_SUCCEEDED));
        assert_eq!(applied[1].observed_generation, Some(3));
        overlay.status = Some(kerf::api::NodeOverlayStatus {
            conditions: applied,
        });
        let later = Timestamp::from_second(2_000).expect("time");
        let same = conditions(&overlay, &Verdict::Applied, later);
        assert_eq!(same[0].last_transition_time, Time(t0), "status held");
        let conflict = conditions(&overlay, &Verdict::Conflict, later);
        let validation = conflict
            .condition(CONDITION_VALIDATION_SUCCEEDED)
            .expect("present");
        assert_eq!(
            (validation.status, validation.reason.as_str()),
            (ConditionStatus::False, REASON_CONFLICT)
        );
        assert_eq!(validation.last_transition_time, Time(later));
        assert!(!conflict.is_condition_true(CONDITION_READY));
    }
}
