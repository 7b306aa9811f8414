//! Reads the few EC2NodeClass fields that shape allocatable (AMI family, kubelet settings,
//! block device mappings, instance store policy, network interfaces) from a YAML manifest
//! into [`AllocatableSettings`], untyped through `serde_json::Value`. Stands in until the
//! typed EC2NodeClass is available; every error names the file and the field.

use kerf::catalog::{
    AllocatableSettings, AmiFamily, BlockDeviceMapping, EvictionValue, NetworkInterface,
};
use kerf::resources::{Quantity, Resources};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why a node class file could not be turned into settings.
#[derive(Debug, thiserror::Error)]
pub enum NodeClassError {
    #[error("{}: cannot read: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not valid YAML: {message}", file.display())]
    Yaml { file: PathBuf, message: String },
    #[error("{}: expected exactly one EC2NodeClass document, found {found}", file.display())]
    DocumentCount { file: PathBuf, found: usize },
    #[error("{}: EC2NodeClass {name:?}: {field}: {message}", file.display())]
    Field {
        file: PathBuf,
        name: String,
        field: String,
        message: String,
    },
}

/// Settings for the one EC2NodeClass in `file`, on top of `base` (which carries the
/// controller settings such as reserved ENIs).
pub fn read(file: &Path, base: AllocatableSettings) -> Result<AllocatableSettings, NodeClassError> {
    let text = std::fs::read_to_string(file).map_err(|source| NodeClassError::Read {
        file: file.to_owned(),
        source,
    })?;
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(&text).map_err(|e| NodeClassError::Yaml {
            file: file.to_owned(),
            message: e.to_string(),
        })?;
    let mut node_classes: Vec<&Value> = documents
        .iter()
        .filter(|doc| doc.get("kind").and_then(Value::as_str) == Some("EC2NodeClass"))
        .collect();
    if node_classes.len() != 1 {
        return Err(NodeClassError::DocumentCount {
            file: file.to_owned(),
            found: node_classes.len(),
        });
    }
    let document = node_classes.remove(0);
    let name = document
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>")
        .to_owned();
    let reader = Reader { file, name };
    reader.settings(document.get("spec").unwrap_or(&Value::Null), base)
}

struct Reader<'a> {
    file: &'a Path,
    name: String,
}

impl Reader<'_> {
    fn error(&self, field: &str, message: impl Into<String>) -> NodeClassError {
        NodeClassError::Field {
            file: self.file.to_owned(),
            name: self.name.clone(),
            field: field.to_owned(),
            message: message.into(),
        }
    }

    fn settings(
        &self,
        spec: &Value,
        base: AllocatableSettings,
    ) -> Result<AllocatableSettings, NodeClassError> {
        let mut settings = base;
        settings.ami_family = self.ami_family(spec)?;
        if let Some(kubelet) = spec.get("kubelet").filter(|v| !v.is_null()) {
            self.kubelet(kubelet, &mut settings)?;
        }
        settings.block_device_mappings = self.block_device_mappings(spec)?;
        settings.instance_store_raid0 = match spec.get("instanceStorePolicy") {
            None | Some(Value::Null) => false,
            Some(Value::String(policy)) if policy == "RAID0" => true,
            Some(other) => {
                return Err(self.error(
                    "spec.instanceStorePolicy",
                    format!("expected RAID0, got {other}"),
                ));
            }
        };
        settings.network_interfaces = self.network_interfaces(spec)?;
        Ok(settings)
    }

    fn ami_family(&self, spec: &Value) -> Result<AmiFamily, NodeClassError> {
        if let Some(family) = spec.get("amiFamily").filter(|v| !v.is_null()) {
            let family = family
                .as_str()
                .ok_or_else(|| self.error("spec.amiFamily", "expected a string"))?;
            return family.parse().map_err(|e: kerf::catalog::AmiFamilyError| {
                self.error("spec.amiFamily", e.to_string())
            });
        }
        let terms = spec
            .get("amiSelectorTerms")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (i, term) in terms.iter().enumerate() {
            if let Some(alias) = term.get("alias").and_then(Value::as_str) {
                let field = format!("spec.amiSelectorTerms[{i}].alias");
                return AmiFamily::from_alias(alias).map_err(|e| self.error(&field, e.to_string()));
            }
        }
        Err(self.error(
            "spec.amiFamily",
            "required when no spec.amiSelectorTerms[].alias is given",
        ))
    }

    fn kubelet(
        &self,
        kubelet: &Value,
        settings: &mut AllocatableSettings,
    ) -> Result<(), NodeClassError> {
        settings.kubelet.max_pods =
            self.optional_u32(kubelet, "maxPods", "spec.kubelet.maxPods")?;
        settings.kubelet.pods_per_core =
            self.optional_u32(kubelet, "podsPerCore", "spec.kubelet.podsPerCore")?;
        settings.kubelet.kube_reserved =
            self.resources(kubelet.get("kubeReserved"), "spec.kubelet.kubeReserved")?;
        settings.kubelet.system_reserved =
            self.resources(kubelet.get("systemReserved"), "spec.kubelet.systemReserved")?;
        settings.kubelet.eviction_hard =
            self.eviction(kubelet.get("evictionHard"), "spec.kubelet.evictionHard")?;
        settings.kubelet.eviction_soft =
            self.eviction(kubelet.get("evictionSoft"), "spec.kubelet.evictionSoft")?;
        Ok(())
    }

    fn optional_u32(
        &self,
        object: &Value,
        key: &str,
        field: &str,
    ) -> Result<Option<u32>, NodeClassError> {
        match object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => value
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    self.error(
                        field,
                        format!("expected a non-negative integer, got {value}"),
                    )
                }),
        }
    }

    fn string_map<'v>(
        &self,
        value: Option<&'v Value>,
        field: &str,
    ) -> Result<Vec<(&'v str, String)>, NodeClassError> {
        let Some(value) = value.filter(|v| !v.is_null()) else {
            return Ok(Vec::new());
        };
        let object = value
            .as_object()
            .ok_or_else(|| self.error(field, "expected a map"))?;
        object
            .iter()
            .map(|(key, value)| match value {
                Value::String(text) => Ok((key.as_str(), text.clone())),
                Value::Number(number) => Ok((key.as_str(), number.to_string())),
                other => Err(self.error(
                    &format!("{field}.{key}"),
                    format!("expected a quantity, got {other}"),
                )),
            })
            .collect()
    }

    fn resources(&self, value: Option<&Value>, field: &str) -> Result<Resources, NodeClassError> {
        let mut resources = Resources::new();
        for (name, text) in self.string_map(value, field)? {
            let quantity: Quantity =
                text.parse().map_err(|e: kerf::resources::QuantityError| {
                    self.error(&format!("{field}.{name}"), e.to_string())
                })?;
            resources.insert(name, quantity);
        }
        Ok(resources)
    }

    fn eviction(
        &self,
        value: Option<&Value>,
        field: &str,
    ) -> Result<BTreeMap<String, EvictionValue>, NodeClassError> {
        self.string_map(value, field)?
            .into_iter()
            .map(|(signal, text)| {
                let threshold = text
                    .parse()
                    .map_err(|e: kerf::catalog::EvictionValueError| {
                        self.error(&format!("{field}.{signal}"), e.to_string())
                    })?;
                Ok((signal.to_owned(), threshold))
            })
            .collect()
    }

    fn block_device_mappings(
        &self,
        spec: &Value,
    ) -> Result<Vec<BlockDeviceMapping>, NodeClassError> {
        let Some(list) = spec.get("blockDeviceMappings").filter(|v| !v.is_null()) else {
            return Ok(Vec::new());
        };
        let list = list
            .as_array()
            .ok_or_else(|| self.error("spec.blockDeviceMappings", "expected a list"))?;
        list.iter()
            .enumerate()
            .map(|(i, mapping)| {
                let field = |name: &str| format!("spec.blockDeviceMappings[{i}].{name}");
                let device_name = match mapping.get("deviceName") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(name)) => Some(name.clone()),
                    Some(other) => {
                        return Err(self.error(
                            &field("deviceName"),
                            format!("expected a string, got {other}"),
                        ));
                    }
                };
                let volume_size = match mapping.pointer("/ebs/volumeSize") {
                    None | Some(Value::Null) => None,
                    Some(value @ (Value::String(_) | Value::Number(_))) => {
                        let text = value
                            .as_str()
                            .map_or_else(|| value.to_string(), str::to_owned);
                        Some(text.parse().map_err(|e: kerf::resources::QuantityError| {
                            self.error(&field("ebs.volumeSize"), e.to_string())
                        })?)
                    }
                    Some(other) => {
                        return Err(self.error(
                            &field("ebs.volumeSize"),
                            format!("expected a quantity string, got {other}"),
                        ));
                    }
                };
                let root_volume = match mapping.get("rootVolume") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(root)) => *root,
                    Some(other) => {
                        return Err(self.error(
                            &field("rootVolume"),
                            format!("expected true or false, got {other}"),
                        ));
                    }
                };
                Ok(BlockDeviceMapping {
                    device_name,
                    volume_size,
                    root_volume,
                })
            })
            .collect()
    }

    fn network_interfaces(
        &self,
        spec: &Value,
    ) -> Result<Option<Vec<NetworkInterface>>, NodeClassError> {
        let Some(list) = spec.get("networkInterfaces").filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let list = list
            .as_array()
            .ok_or_else(|| self.error("spec.networkInterfaces", "expected a list"))?;
        let interfaces =
            list.iter()
                .enumerate()
                .map(|(i, nic)| {
                    let field = |name: &str| format!("spec.networkInterfaces[{i}].{name}");
                    let index = |name: &str| {
                        self.optional_u32(nic, name, &field(name))?
                            .ok_or_else(|| self.error(&field(name), "required"))
                    };
                    let efa_only = match nic.get("interfaceType").and_then(Value::as_str) {
                        Some("interface") => false,
                        Some("efa-only") => true,
                        _ => {
                            return Err(self
                                .error(&field("interfaceType"), "expected interface or efa-only"));
                        }
                    };
                    Ok(NetworkInterface {
                        network_card_index: index("networkCardIndex")?,
                        device_index: index("deviceIndex")?,
                        efa_only,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(interfaces))
    }
}
