//! Small helpers over `serde_json::Value` objects for the `metadata` fields the API server
//! manages (names, uids, timestamps, finalizers), and for random names and uids.

use rand::Rng;
use serde_json::{Map, Value};

/// The object's `metadata`, created if missing.
pub fn meta_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    let map = object.as_object_mut().expect("just made an object");
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("just made an object")
}

/// A string field of `metadata` (empty when absent).
pub fn meta_str<'a>(object: &'a Value, field: &str) -> &'a str {
    object
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `metadata.finalizers`.
pub fn finalizers(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|f| {
            f.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `metadata.deletionTimestamp` is set.
pub fn is_deleting(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// Everything but `metadata` and `status` (what `metadata.generation` tracks).
pub fn spec_part(object: &Value) -> Map<String, Value> {
    object
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// A random RFC 4122 version-4 uid.
pub fn new_uid() -> String {
    let n: u128 = rand::rng().random();
    let n = (n & !(0xF << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    let hex = format!("{n:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Five characters from the API server's name-suffix alphabet (no vowels, no look-alikes).
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// A stable short hash of a JSON value, in the same alphabet (used for `pod-template-hash`).
pub fn stable_hash(value: &Value) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let text = serde_json::to_string(value).expect("a serde_json::Value always serialises");
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (0..10)
        .map(|i| {
            let digit = usize::try_from((hash >> (i * 6)) % ALPHABET.len() as u64).unwrap_or(0);
            char::from(ALPHABET[digit])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn uids_look_like_uuid_v4() {
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(uid.as_bytes()[14], b'4');
        assert_ne!(uid, new_uid());
    }

    #[test]
    fn hash_is_stable_and_sensitive() {
        let a = stable_hash(&json!({"spec": {"image": "a"}}));
        assert_eq!(a, stable_hash(&json!({"spec": {"image": "a"}})));
        assert_ne!(a, stable_hash(&json!({"spec": {"image": "b"}})));
        assert_eq!(random_suffix().len(), 5);
    }
}
