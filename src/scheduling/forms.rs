//! A pending pod's prepared scheduling form, kept across rounds: its identity, its requests
//! as placement adds them (the larger of the init containers and the containers' sum, plus
//! overhead, parsed once), and the fingerprint its class is found by. Through a scale-up the
//! same thousands of pods stay pending for round after round while nothing in their specs
//! changes, so [`PodForms`] keeps each form by uid and reuses it while the pod's
//! resourceVersion is the one it was built from; any write to the pod builds it again.
//! A round's pods share their forms with the cache instead of copying their names. The cache
//! keeps only the latest round's pods, so it holds at most one round's pending pods; a pod
//! with no uid or resourceVersion (a manifest `kerf plan` reads) is never kept.

use std::sync::Arc;

use super::intern::FxHashMap;
use super::pod::{SpecView, pod_requests};
use super::resvec::{ResId, ResNames};
use super::types::PodRef;
use crate::pods::PodLike;
use crate::room::GiveBackRoom;

/// What a round prepares of a pending pod that no other pod or node changes.
#[derive(Debug, PartialEq)]
pub struct PodForm {
    pub pod_ref: PodRef,
    /// Resource names and milli-values, or the quantity that does not parse.
    requests: Result<Vec<(String, i64)>, String>,
    /// Of the pod's [`SpecView`]: equal specs have equal fingerprints.
    pub fingerprint: u64,
}

impl PodForm {
    pub(super) fn of(pod: &impl PodLike) -> Self {
        let mut names = ResNames::default();
        let requests = pod_requests(pod, &mut names).map(|sparse| {
            sparse
                .into_iter()
                .map(|(id, value)| (names.name(id).to_owned(), value))
                .collect()
        });
        Self {
            pod_ref: pod.pod_ref(),
            requests,
            fingerprint: SpecView::of(pod).fingerprint(),
        }
    }

    /// The requests in the round's resource ids, registering names it has not seen.
    pub fn requests(&self, names: &mut ResNames) -> Result<Vec<(ResId, i64)>, String> {
        match &self.requests {
            Ok(sparse) => Ok(sparse
                .iter()
                .map(|(name, value)| (names.id(name), *value))
                .collect()),
            Err(quantity) => Err(quantity.clone()),
        }
    }
}

/// The forms of the pods the latest round prepared, by uid.
#[derive(Debug, Default)]
pub struct PodForms {
    by_uid: FxHashMap<String, Kept>,
    /// The round the forms were last asked for in: a form not asked for in it goes.
    round: u64,
    reused: u64,
}

#[derive(Debug)]
struct Kept {
    resource_version: String,
    form: Arc<PodForm>,
    round: u64,
}

impl PodForms {
    /// Starts a round: forms asked for until [`Self::finish_round`] are kept after it.
    pub fn start_round(&mut self) {
        self.round += 1;
    }

    /// Drops the forms of pods the round did not ask for (bound, deleted or held elsewhere).
    pub fn finish_round(&mut self) {
        let round = self.round;
        self.by_uid.retain(|_, kept| kept.round == round);
        self.by_uid.give_back_room();
    }

    /// A round that prepares no pod (all held on NodeClaims in flight) keeps none: through a
    /// scale-up, the round after the first would otherwise keep every pod's form alive.
    pub fn keep_none(&mut self) {
        self.by_uid.clear();
        self.by_uid.give_back_room();
    }

    /// `pod`'s form: the kept one while its resourceVersion is unchanged, else built (and
    /// kept, when the pod has a uid and a resourceVersion).
    pub fn form(&mut self, pod: &impl PodLike) -> Arc<PodForm> {
        let meta = pod.meta();
        let (Some(uid), Some(version)) = (
            meta.uid.filter(|u| !u.is_empty()),
            meta.resource_version.filter(|v| !v.is_empty()),
        ) else {
            return Arc::new(PodForm::of(pod));
        };
        if let Some(kept) = self.by_uid.get_mut(uid)
            && kept.resource_version == version
        {
            kept.round = self.round;
            self.reused += 1;
            return Arc::clone(&kept.form);
        }
        let form = Arc::new(PodForm::of(pod));
        let kept = Kept {
            resource_version: version.to_owned(),
            form: Arc::clone(&form),
            round: self.round,
        };
        self.by_uid.insert(uid.to_owned(), kept);
        form
    }

    /// Forms kept.
    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }

    /// Forms reused instead of built, since the cache was made.
    pub fn reused(&self) -> u64 {
        self.reused
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::LeanPod;
    use crate::scheduling::testing::pod;

    fn versioned(name: &str, cpu: &str, version: &str) -> LeanPod {
        let mut p = pod(name).cpu(cpu).memory("1Gi").build();
        p.metadata.resource_version = Some(version.into());
        LeanPod::from(p)
    }

    #[test]
    fn a_form_is_reused_while_the_pods_resource_version_is_unchanged() {
        let mut forms = PodForms::default();
        forms.start_round();
        let first = forms.form(&versioned("a", "500m", "1"));
        forms.finish_round();

        forms.start_round();
        let again = forms.form(&versioned("a", "500m", "1"));
        assert!(Arc::ptr_eq(&first, &again), "the kept form, not a copy");
        assert_eq!(forms.reused(), 1);

        let written = forms.form(&versioned("a", "2", "2"));
        assert!(!Arc::ptr_eq(&first, &written));
        let mut names = ResNames::default();
        let cpu = names.id("cpu");
        assert!(
            written
                .requests(&mut names)
                .expect("parses")
                .contains(&(cpu, 2000)),
            "built again from the new version: {written:?}"
        );
        forms.finish_round();
        assert_eq!(forms.len(), 1);
    }

    #[test]
    fn only_the_latest_rounds_pods_are_kept() {
        let mut forms = PodForms::default();
        forms.start_round();
        forms.form(&versioned("a", "1", "1"));
        forms.form(&versioned("b", "1", "1"));
        forms.finish_round();
        assert_eq!(forms.len(), 2);

        forms.start_round();
        forms.form(&versioned("b", "1", "1"));
        forms.finish_round();
        assert_eq!(forms.len(), 1, "a, bound meanwhile, is dropped");

        forms.keep_none();
        assert!(
            forms.is_empty(),
            "a round that prepared nothing keeps nothing"
        );
    }

    #[test]
    fn the_cache_gives_back_the_room_a_scale_up_left() {
        let mut forms = PodForms::default();
        let burst = |forms: &mut PodForms, pods: usize| {
            forms.start_round();
            for i in 0..pods {
                forms.form(&versioned(&format!("p-{i}"), "1", "1"));
            }
            forms.finish_round();
        };
        burst(&mut forms, 5_000);
        assert!(forms.by_uid.capacity() >= 5_000);
        burst(&mut forms, 10);
        assert_eq!(forms.len(), 10);
        let left = forms.by_uid.capacity();
        assert!(left <= 1024, "room for {left} left");

        burst(&mut forms, 5_000);
        forms.keep_none();
        let left = forms.by_uid.capacity();
        assert!(left <= 1024, "room for {left} left");
    }

    #[test]
    fn pods_without_uid_or_version_are_built_and_not_kept() {
        let mut forms = PodForms::default();
        forms.start_round();
        let unversioned = LeanPod::from(pod("a").cpu("1").build());
        let mut anonymous = pod("b").cpu("1").build();
        anonymous.metadata.uid = None;
        anonymous.metadata.resource_version = Some("1".into());
        let first = forms.form(&unversioned);
        let second = forms.form(&unversioned);
        forms.form(&LeanPod::from(anonymous));
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(*first, *second);
        assert!(forms.is_empty());
    }
}
