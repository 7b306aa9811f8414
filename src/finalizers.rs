//! Karpenter's termination finalizer (`karpenter.sh/termination`) on NodeClaims and Nodes:
//! the lifecycle adds it before anything is launched, the termination drainer releases it
//! once the Node is drained and the instance gone.

use crate::labels::TERMINATION_FINALIZER;

pub fn has_termination_finalizer(finalizers: Option<&Vec<String>>) -> bool {
    finalizers
        .into_iter()
        .flatten()
        .any(|f| f == TERMINATION_FINALIZER)
}

/// `finalizers` without the termination finalizer.
pub fn without_termination_finalizer(finalizers: Option<&Vec<String>>) -> Vec<String> {
    finalizers
        .into_iter()
        .flatten()
        .filter(|f| *f != TERMINATION_FINALIZER)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_termination_finalizer_is_found_and_released_alone() {
        let finalizers = vec!["other".to_owned(), TERMINATION_FINALIZER.to_owned()];
        assert!(has_termination_finalizer(Some(&finalizers)));
        assert_eq!(without_termination_finalizer(Some(&finalizers)), ["other"]);
        assert!(!has_termination_finalizer(None));
    }
}
