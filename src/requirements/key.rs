//! Label keys as requirements store them: the name plus a hash computed once, so that the
//! ordering of `Requirements` (and therefore every merge walk and binary search in a
//! compatibility check) compares one integer instead of long, shared-prefix strings such
//! as `karpenter.k8s.aws/instance-…`. The hash is fixed (no random seed), so the order of
//! keys is the same in every run; it is not alphabetical, and callers that show keys sort.
//! Keys kerf itself uses share one allocation per name, so equal keys usually compare equal
//! by pointer without reading their bytes.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock};

use crate::labels;

#[derive(Clone)]
pub(crate) struct Key {
    hash: u64,
    name: Arc<str>,
}

impl Key {
    pub(crate) fn new(name: &str) -> Key {
        let hash = hash_name(name);
        match SHARED.binary_search_by(|k| k.cmp_name(hash, name)) {
            Ok(i) => SHARED[i].clone(),
            Err(_) => Key {
                hash,
                name: Arc::from(name),
            },
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.name
    }

    /// Orders `self` against a name whose hash the caller computed with [`hash_name`].
    pub(crate) fn cmp_name(&self, hash: u64, name: &str) -> Ordering {
        self.hash.cmp(&hash).then_with(|| (*self.name).cmp(name))
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.hash == other.hash && (Arc::ptr_eq(&self.name, &other.name) || self.name == other.name)
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> Ordering {
        if Arc::ptr_eq(&self.name, &other.name) {
            return Ordering::Equal;
        }
        self.cmp_name(other.hash, &other.name)
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.name, f)
    }
}

/// One shared `Key` per label kerf's NodePools, NodeClaims and instance types always carry.
static SHARED: LazyLock<Vec<Key>> = LazyLock::new(|| {
    let extra = [
        labels::EC2NODECLASS,
        labels::REGISTERED,
        labels::INITIALIZED,
        labels::HOSTNAME,
    ];
    let mut keys: Vec<Key> = labels::WELL_KNOWN_LABELS
        .iter()
        .chain(extra.iter())
        .map(|name| Key {
            hash: hash_name(name),
            name: Arc::from(*name),
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys
});

/// A fast, fixed multiply-rotate hash over 8-byte words (the FxHash scheme); quality only
/// needs to spread label keys, not resist adversaries, since collisions fall back to a
/// string comparison.
pub(crate) fn hash_name(name: &str) -> u64 {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let mix = |h: u64, word: u64| (h.rotate_left(5) ^ word).wrapping_mul(SEED);
    let bytes = name.as_bytes();
    let mut chunks = bytes.chunks_exact(8);
    let mut h = mix(0, bytes.len() as u64);
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("chunks_exact yields 8 bytes"));
        h = mix(h, word);
    }
    let mut tail = [0u8; 8];
    let rest = chunks.remainder();
    tail[..rest.len()].copy_from_slice(rest);
    mix(h, u64::from_le_bytes(tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_names_are_equal_keys() {
        let a = Key::new("karpenter.k8s.aws/instance-family");
        let b = Key::new("karpenter.k8s.aws/instance-family");
        assert_eq!(a, b);
        assert_eq!(a.cmp(&b), Ordering::Equal);
        assert_eq!(
            a.cmp_name(hash_name(b.as_str()), b.as_str()),
            Ordering::Equal
        );
    }

    #[test]
    fn well_known_keys_share_their_name() {
        let a = Key::new(labels::ZONE);
        let b = Key::new(labels::ZONE);
        assert!(Arc::ptr_eq(&a.name, &b.name));
        let c = Key::new("example.com/team");
        let d = Key::new("example.com/team");
        assert!(!Arc::ptr_eq(&c.name, &d.name));
        assert_eq!(c, d);
    }

    #[test]
    fn names_differing_in_the_tail_differ() {
        let names = [
            "karpenter.k8s.aws/instance-gpu-count",
            "karpenter.k8s.aws/instance-gpu-name",
            "karpenter.k8s.aws/instance-cpu",
            "karpenter.k8s.aws/instance-cpu-manufacturer",
            "",
            "a",
            "b",
        ];
        let hashes: std::collections::BTreeSet<u64> = names.iter().map(|n| hash_name(n)).collect();
        assert_eq!(hashes.len(), names.len());
        let mut keys: Vec<Key> = names.iter().map(|n| Key::new(n)).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), names.len());
    }
}
