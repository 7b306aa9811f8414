//! Serde for quantities and resource lists in their Kubernetes wire form: a quantity is a
//! canonical string (`"1536Mi"`); on input a bare number is accepted too, as apimachinery's
//! `UnmarshalJSON` accepts `cpu: 1` or `cpu: 0.5`. A resource list is a map of name to
//! quantity.

use super::list::Resources;
use super::quantity::Quantity;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use std::fmt;

impl serde::Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

struct QuantityVisitor;

impl Visitor<'_> for QuantityVisitor {
    type Value = Quantity;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes quantity such as \"100m\", \"1.5Gi\" or 2")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Quantity, E> {
        text.trim().parse().map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Quantity, E> {
        self.visit_str(&value.to_string())
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Quantity, E> {
        self.visit_str(&value.to_string())
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Quantity, E> {
        if !value.is_finite() {
            return Err(E::custom(format!(
                "quantity {value} is not a finite number"
            )));
        }
        self.visit_str(&value.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Quantity, D::Error> {
        deserializer.deserialize_any(QuantityVisitor)
    }
}

impl serde::Serialize for Resources {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (name, quantity) in self.iter() {
            map.serialize_entry(name, &quantity)?;
        }
        map.end()
    }
}

struct ResourcesVisitor;

impl<'de> Visitor<'de> for ResourcesVisitor {
    type Value = Resources;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of resource names to quantities")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Resources, A::Error> {
        let mut resources = Resources::new();
        while let Some((name, quantity)) = access.next_entry::<String, Quantity>()? {
            resources.insert(&name, quantity);
        }
        Ok(resources)
    }
}

impl<'de> serde::Deserialize<'de> for Resources {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Resources, D::Error> {
        deserializer.deserialize_map(ResourcesVisitor)
    }
}
