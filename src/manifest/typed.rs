//! Decoding a `v1` Pod straight into k8s-openapi's `Pod`, pruned as `prune` prunes a
//! `Value`. A cluster dump is mostly pods, and building each as a `serde_json::Value` (a map
//! per object, a `String` per key and scalar) only to convert it into a `Pod` and drop it
//! doubled the cost of reading them. Here the parser's events (the fast YAML reader's or
//! serde_json's) drive the `Pod`'s own decoder through a wrapper that skips what `prune`
//! skips, at the same field paths, so the `Pod` is the one the `Value` would have given.
//!
//! Only what is sure to decode as the `Value` path would is read here: an item whose first
//! two keys are `apiVersion: v1` and `kind: Pod`, each key once. Anything else, and any
//! error, is left to the `Value` path (the caller reads the piece again that way), so
//! messages about a broken pod are exactly the ones that path gives.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, IntoDeserializer, MapAccess,
    SeqAccess, Visitor,
};

use super::prune::{Field, Level, element, field};

/// A pod read straight into its typed form.
#[derive(Debug)]
pub(crate) struct PodItem(pub Pod);

impl<'de> de::Deserialize<'de> for PodItem {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(PodItemVisitor)
    }
}

struct PodItemVisitor;

/// Why an item was left to the `Value` path; never shown (the `Value` path reports).
const NOT_READ_HERE: &str = "not a v1 Pod read by the typed path";

impl<'de> Visitor<'de> for PodItemVisitor {
    type Value = PodItem;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a v1 Pod")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PodItem, A::Error> {
        let (mut api_version, mut kind) = (false, false);
        while !(api_version && kind) {
            let key = map.next_key::<Text<'de>>()?;
            let (seen, expected) = match key.as_ref().map(|key| &*key.0) {
                Some("apiVersion") => (&mut api_version, "v1"),
                Some("kind") => (&mut kind, "Pod"),
                _ => return Err(de::Error::custom(NOT_READ_HERE)),
            };
            if *seen || map.next_value::<Text<'de>>()?.0 != expected {
                return Err(de::Error::custom(NOT_READ_HERE));
            }
            *seen = true;
        }
        let mut metadata = None;
        let mut spec = None;
        let mut status = None;
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            let level = match field(Level::Root, &key) {
                Field::Keep(level) => level,
                Field::Skip | Field::Empty => return Err(de::Error::custom(NOT_READ_HERE)),
            };
            match &*key {
                "metadata" if metadata.is_none() => {
                    metadata = Some(map.next_value_seed(Pruned::<ObjectMeta>::at(level))?);
                }
                "spec" if spec.is_none() => {
                    spec = Some(map.next_value_seed(Pruned::<Option<PodSpec>>::at(level))?);
                }
                "status" if status.is_none() => {
                    status = Some(map.next_value_seed(Pruned::<Option<PodStatus>>::at(level))?);
                }
                "metadata" | "spec" | "status" | "apiVersion" | "kind" => {
                    return Err(de::Error::custom(NOT_READ_HERE));
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(PodItem(Pod {
            metadata: metadata.unwrap_or_default(),
            spec: spec.flatten(),
            status: status.flatten(),
        }))
    }
}

/// A key or short string, borrowed from the input where the parser can lend it.
struct Text<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
        Ok(Text(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
        Ok(Text(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Text<'de>, E> {
        Ok(Text(Cow::Owned(v)))
    }
}

/// `T` decoded with the pruning of `level`.
struct Pruned<T> {
    level: Level,
    target: PhantomData<T>,
}

impl<T> Pruned<T> {
    fn at(level: Level) -> Self {
        Self {
            level,
            target: PhantomData,
        }
    }
}

impl<'de, T: de::Deserialize<'de>> DeserializeSeed<'de> for Pruned<T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<T, D::Error> {
        T::deserialize(Pruning {
            inner: deserializer,
            level: self.level,
        })
    }
}

/// Any seed, decoded with the pruning of `level`.
struct PrunedSeed<S> {
    seed: S,
    level: Level,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for PrunedSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(Pruning {
            inner: deserializer,
            level: self.level,
        })
    }
}

/// A deserializer whose maps and sequences leave out what `prune` leaves out at `level`.
struct Pruning<D> {
    inner: D,
    level: Level,
}

impl<D> Pruning<D> {
    fn wrap<V>(&self, visitor: V) -> PruningVisitor<V> {
        PruningVisitor {
            inner: visitor,
            level: self.level,
        }
    }
}

macro_rules! forward_pruned {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
                let visitor = self.wrap(visitor);
                self.inner.$method($($arg,)* visitor)
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Pruning<D> {
    type Error = D::Error;

    forward_pruned! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_ignored_any(visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// The visitor of a [`Pruning`] deserializer: hands the inner visitor pruned maps and
/// sequences, everything else as it is.
struct PruningVisitor<V> {
    inner: V,
    level: Level,
}

macro_rules! forward_scalars {
    ($($method:ident($ty:ty);)*) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
                self.inner.$method(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for PruningVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_scalars! {
        visit_bool(bool);
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
        visit_f32(f32);
        visit_f64(f64);
        visit_char(char);
        visit_str(&str);
        visit_borrowed_str(&'de str);
        visit_string(String);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Pruning {
            inner: deserializer,
            level: self.level,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(Pruning {
            inner: deserializer,
            level: self.level,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(PrunedSeq {
            inner: seq,
            level: element(self.level),
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(PrunedMap {
            inner: map,
            level: self.level,
            next: Field::Keep(Level::Any),
        })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.inner.visit_enum(data)
    }
}

/// A sequence whose elements are pruned at `level`.
struct PrunedSeq<A> {
    inner: A,
    level: Level,
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for PrunedSeq<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.inner.next_element_seed(PrunedSeed {
            seed,
            level: self.level,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// A mapping at `level`: skipped keys never reach the inner visitor, emptied values reach
/// it as an empty mapping, kept values are pruned at their own level.
struct PrunedMap<A> {
    inner: A,
    level: Level,
    /// What to do with the value of the key just handed over.
    next: Field,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for PrunedMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        while let Some(Text(key)) = self.inner.next_key::<Text<'de>>()? {
            match field(self.level, &key) {
                Field::Skip => {
                    self.inner.next_value::<IgnoredAny>()?;
                }
                next => {
                    self.next = next;
                    let key: de::value::CowStrDeserializer<'_, A::Error> = key.into_deserializer();
                    return seed.deserialize(key).map(Some);
                }
            }
        }
        Ok(None)
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        match self.next {
            Field::Keep(level) => self.inner.next_value_seed(PrunedSeed { seed, level }),
            Field::Skip | Field::Empty => {
                self.inner.next_value::<IgnoredAny>()?;
                seed.deserialize(EmptyMap(PhantomData))
            }
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// The empty mapping an emptied value (see `prune`) is read as, present where optional.
struct EmptyMap<E>(PhantomData<E>);

impl<'de, E: de::Error> Deserializer<'de> for EmptyMap<E> {
    type Error = E;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, E> {
        visitor.visit_map(de::value::MapDeserializer::<_, E>::new(
            std::iter::empty::<((), ())>(),
        ))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, E> {
        visitor.visit_some(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::prune::PrunedObject;
    use serde_json::json;

    /// The typed path and the `Value` path give the same pod, from JSON and from YAML.
    fn both_paths(value: &serde_json::Value) -> Pod {
        let text = value.to_string();
        let typed: PodItem = serde_json::from_str(&text).expect("typed path reads it");
        let PrunedObject(pruned) = serde_json::from_str(&text).expect("value path reads it");
        let via_value: Pod = serde_json::from_value(pruned).expect("a pod");
        assert_eq!(typed.0, via_value);
        typed.0
    }

    #[test]
    fn a_pod_reads_as_the_value_path_reads_it() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "labels": {"app": "a"},
                "creationTimestamp": "2026-11-20T08:15:42Z",
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
            "spec": {
                "containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}],
                    "livenessProbe": {"exec": {}},
                    "resources": {"requests": {"cpu": "1", "memory": 5}},
                    "ports": [{"containerPort": 80, "hostPort": 80}]}],
                "volumes": [
                    {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "d"}}],
                "nodeSelector": null,
                "tolerations": [{"key": "k", "operator": "Exists"}]},
            "status": {"phase": "Pending", "containerStatuses": [{"name": "c"}],
                "conditions": [{"type": "PodScheduled", "status": "False",
                    "lastTransitionTime": "2026-11-20T08:15:42Z"}]},
            "extra": {"x": [1, 2]}
        });
        let read = both_paths(&pod);
        let spec = read.spec.expect("spec");
        assert!(read.metadata.managed_fields.is_none());
        assert!(spec.containers[0].env.is_none());
        let volumes = spec.volumes.expect("volumes");
        let projected = volumes[0].projected.as_ref().expect("kept, emptied");
        assert!(projected.sources.is_none());
        assert!(read.status.expect("status").container_statuses.is_none());
    }

    #[test]
    fn anything_but_a_plain_v1_pod_is_left_to_the_value_path() {
        for text in [
            r#"{"kind": "Pod", "metadata": {}, "apiVersion": "v1"}"#,
            r#"{"apiVersion": "v1", "kind": "Node"}"#,
            r#"{"apiVersion": "apps/v1", "kind": "Pod"}"#,
            r#"{"apiVersion": "v1", "kind": "Pod", "spec": {}, "spec": {}}"#,
            r#"{"apiVersion": "v1", "kind": "Pod", "kind": "Pod"}"#,
            r#"{"apiVersion": "v1", "kind": "Pod", "spec": {"containers": "x"}}"#,
        ] {
            assert!(serde_json::from_str::<PodItem>(text).is_err(), "{text}");
        }
        let read: PodItem = serde_json::from_str(r#"{"kind": "Pod", "apiVersion": "v1"}"#)
            .expect("either order of the first two keys");
        assert_eq!(read.0, Pod::default());
    }
}
