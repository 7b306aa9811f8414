//! AMI aliases (`al2023@latest`, `al2@v20240703`, `bottlerocket@1.20.1`, `windows2022@latest`)
//! and the EKS SSM parameters they resolve through. Each family publishes one parameter per
//! architecture and variant (standard, NVIDIA, Neuron); the variant says which instance types
//! an image can run on (GPU images only on GPU types and vice versa), which becomes the
//! resolved AMI's node requirements.

use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use kerf::labels;
use thiserror::Error;

pub const VERSION_LATEST: &str = "latest";

/// Windows Server builds, as the `node.kubernetes.io/windows-build` label.
pub const WINDOWS_2019_BUILD: &str = "10.0.17763";
pub const WINDOWS_2022_BUILD: &str = "10.0.20348";
pub const WINDOWS_2025_BUILD: &str = "10.0.26100";

/// The AMI family an alias names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AliasFamily {
    Al2,
    Al2023,
    Bottlerocket,
    Windows2019,
    Windows2022,
    Windows2025,
}

/// A parsed `family@version` alias.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Alias {
    pub family: AliasFamily,
    pub version: String,
}

/// Why an alias cannot be used.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum AliasError {
    #[error(
        "amiSelectorTerms alias {0:?} is not of the form family@version (families: al2, al2023, \
         bottlerocket, windows2019, windows2022, windows2025; version: latest or a release)"
    )]
    Malformed(String),
    #[error("amiSelectorTerms alias {alias:?}: {reason}")]
    Unsupported { alias: String, reason: String },
}

/// Image flavours the EKS parameters publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    Standard,
    Nvidia,
    Neuron,
}

impl Variant {
    /// Standard images run on types without accelerators; NVIDIA ones need a GPU; Neuron
    /// ones an accelerator.
    pub fn requirements(self) -> Vec<NodeSelectorRequirement> {
        match self {
            Variant::Standard => vec![
                does_not_exist(labels::INSTANCE_ACCELERATOR_COUNT),
                does_not_exist(labels::INSTANCE_GPU_COUNT),
            ],
            Variant::Nvidia => vec![exists(labels::INSTANCE_GPU_COUNT)],
            Variant::Neuron => vec![exists(labels::INSTANCE_ACCELERATOR_COUNT)],
        }
    }
}

fn requirement(key: &str, operator: &str, values: Option<Vec<String>>) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_owned(),
        operator: operator.to_owned(),
        values,
    }
}

pub fn exists(key: &str) -> NodeSelectorRequirement {
    requirement(key, "Exists", None)
}

pub fn does_not_exist(key: &str) -> NodeSelectorRequirement {
    requirement(key, "DoesNotExist", None)
}

pub fn in_values(key: &str, values: &[&str]) -> NodeSelectorRequirement {
    requirement(
        key,
        "In",
        Some(values.iter().map(|v| (*v).to_owned()).collect()),
    )
}

/// One SSM parameter an alias reads and the requirements of the image it names (without
/// architecture, which comes from the image itself).
#[derive(Clone, Debug, PartialEq)]
pub struct AliasParameter {
    pub path: String,
    pub requirements: Vec<Vec<NodeSelectorRequirement>>,
}

impl Alias {
    pub fn parse(alias: &str) -> Result<Self, AliasError> {
        let malformed = || AliasError::Malformed(alias.to_owned());
        let (family, version) = alias.split_once('@').ok_or_else(malformed)?;
        if version.is_empty() {
            return Err(malformed());
        }
        let family = match family.to_ascii_lowercase().as_str() {
            "al2" => AliasFamily::Al2,
            "al2023" => AliasFamily::Al2023,
            "bottlerocket" => AliasFamily::Bottlerocket,
            "windows2019" => AliasFamily::Windows2019,
            "windows2022" => AliasFamily::Windows2022,
            "windows2025" => AliasFamily::Windows2025,
            _ => return Err(malformed()),
        };
        let parsed = Self {
            family,
            version: version.to_owned(),
        };
        if parsed.is_windows() && version != VERSION_LATEST {
            return Err(AliasError::Unsupported {
                alias: alias.to_owned(),
                reason: "Windows aliases only support the version \"latest\"".to_owned(),
            });
        }
        Ok(parsed)
    }

    pub fn is_windows(&self) -> bool {
        matches!(
            self.family,
            AliasFamily::Windows2019 | AliasFamily::Windows2022 | AliasFamily::Windows2025
        )
    }

    pub fn is_latest(&self) -> bool {
        self.version == VERSION_LATEST
    }

    /// The alias as written (`al2023@latest`).
    pub fn text(&self) -> String {
        let family = match self.family {
            AliasFamily::Al2 => "al2",
            AliasFamily::Al2023 => "al2023",
            AliasFamily::Bottlerocket => "bottlerocket",
            AliasFamily::Windows2019 => "windows2019",
            AliasFamily::Windows2022 => "windows2022",
            AliasFamily::Windows2025 => "windows2025",
        };
        format!("{family}@{}", self.version)
    }

    /// The EKS parameters to read for this alias on a cluster of `k8s_version` (`1.31`).
    /// Fails for combinations EKS does not publish (AL2 on 1.33+, Windows 2025 before 1.35).
    pub fn parameters(&self, k8s_version: &str) -> Result<Vec<AliasParameter>, AliasError> {
        self.check_supported(k8s_version)?;
        Ok(match self.family {
            AliasFamily::Al2 => self.al2_parameters(k8s_version),
            AliasFamily::Al2023 => self.al2023_parameters(k8s_version),
            AliasFamily::Bottlerocket => self.bottlerocket_parameters(k8s_version),
            AliasFamily::Windows2019 => windows_parameters("2019", WINDOWS_2019_BUILD, k8s_version),
            AliasFamily::Windows2022 => windows_parameters("2022", WINDOWS_2022_BUILD, k8s_version),
            AliasFamily::Windows2025 => windows_parameters("2025", WINDOWS_2025_BUILD, k8s_version),
        })
    }

    fn check_supported(&self, k8s_version: &str) -> Result<(), AliasError> {
        let minor = k8s_version
            .split('.')
            .nth(1)
            .and_then(|m| m.parse::<u32>().ok());
        let unsupported = |reason: String| AliasError::Unsupported {
            alias: self.text(),
            reason,
        };
        match (self.family, minor) {
            (AliasFamily::Al2, Some(m)) if m >= 33 => Err(unsupported(
                "AL2 aliases are no longer supported on EKS 1.33+; use al2023@latest or bottlerocket@latest"
                    .to_owned(),
            )),
            (AliasFamily::Windows2025, Some(m)) if m < 35 => Err(unsupported(format!(
                "Windows Server 2025 requires EKS version 1.35 or higher, current version: {k8s_version}"
            ))),
            _ => Ok(()),
        }
    }

    fn al2_parameters(&self, k8s: &str) -> Vec<AliasParameter> {
        let leaf = |image_prefix: &str| {
            if self.is_latest() {
                "recommended".to_owned()
            } else {
                format!("{image_prefix}-{k8s}-{}", self.version)
            }
        };
        let base = format!("/aws/service/eks/optimized-ami/{k8s}");
        vec![
            AliasParameter {
                path: format!("{base}/amazon-linux-2/{}/image_id", leaf("amazon-eks-node")),
                requirements: vec![Variant::Standard.requirements()],
            },
            AliasParameter {
                path: format!(
                    "{base}/amazon-linux-2-arm64/{}/image_id",
                    leaf("amazon-eks-arm64-node")
                ),
                requirements: vec![Variant::Standard.requirements()],
            },
            AliasParameter {
                path: format!(
                    "{base}/amazon-linux-2-gpu/{}/image_id",
                    leaf("amazon-eks-gpu-node")
                ),
                requirements: vec![
                    Variant::Neuron.requirements(),
                    Variant::Nvidia.requirements(),
                ],
            },
        ]
    }

    fn al2023_parameters(&self, k8s: &str) -> Vec<AliasParameter> {
        let combos: [(&str, Variant, &str); 5] = [
            ("x86_64", Variant::Standard, "standard"),
            ("x86_64", Variant::Nvidia, "nvidia"),
            ("x86_64", Variant::Neuron, "neuron"),
            ("arm64", Variant::Standard, "standard"),
            ("arm64", Variant::Nvidia, "nvidia"),
        ];
        combos
            .iter()
            .map(|(arch, variant, name)| {
                let leaf = if self.is_latest() {
                    "recommended".to_owned()
                } else {
                    format!("amazon-eks-node-al2023-{arch}-{name}-{k8s}-{}", self.version)
                };
                AliasParameter {
                    path: format!(
                        "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/{name}/{leaf}/image_id"
                    ),
                    requirements: vec![variant.requirements()],
                }
            })
            .collect()
    }

    fn bottlerocket_parameters(&self, k8s: &str) -> Vec<AliasParameter> {
        let version = self.version.trim_start_matches('v');
        let path = |flavour: &str, arch: &str| {
            format!("/aws/service/bottlerocket/aws-k8s-{k8s}{flavour}/{arch}/{version}/image_id")
        };
        vec![
            AliasParameter {
                path: path("", "x86_64"),
                requirements: vec![
                    Variant::Standard.requirements(),
                    Variant::Neuron.requirements(),
                ],
            },
            AliasParameter {
                path: path("", "arm64"),
                requirements: vec![Variant::Standard.requirements()],
            },
            AliasParameter {
                path: path("-nvidia", "x86_64"),
                requirements: vec![Variant::Nvidia.requirements()],
            },
            AliasParameter {
                path: path("-nvidia", "arm64"),
                requirements: vec![Variant::Nvidia.requirements()],
            },
        ]
    }
}

fn windows_parameters(year: &str, build: &str, k8s: &str) -> Vec<AliasParameter> {
    vec![AliasParameter {
        path: format!(
            "/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}/image_id"
        ),
        requirements: vec![vec![
            in_values(labels::OS, &["windows"]),
            in_values(labels::WINDOWS_BUILD, &[build]),
        ]],
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(alias: &str, k8s: &str) -> Vec<String> {
        Alias::parse(alias)
            .unwrap()
            .parameters(k8s)
            .unwrap()
            .into_iter()
            .map(|p| p.path)
            .collect()
    }

    #[test]
    fn al2023_latest_and_pinned() {
        let latest = paths("al2023@latest", "1.31");
        assert!(latest.contains(
            &"/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id".to_owned()
        ));
        assert!(latest.contains(
            &"/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/nvidia/recommended/image_id".to_owned()
        ));
        assert_eq!(latest.len(), 5);
        let pinned = paths("al2023@v20240807", "1.30");
        assert!(pinned.contains(
            &"/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/neuron/amazon-eks-node-al2023-x86_64-neuron-1.30-v20240807/image_id"
                .to_owned()
        ));
    }

    #[test]
    fn al2_paths_and_deprecation() {
        assert_eq!(
            paths("al2@latest", "1.30"),
            vec![
                "/aws/service/eks/optimized-ami/1.30/amazon-linux-2/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-arm64/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-gpu/recommended/image_id",
            ]
        );
        assert_eq!(
            paths("al2@v20240703", "1.29")[1],
            "/aws/service/eks/optimized-ami/1.29/amazon-linux-2-arm64/amazon-eks-arm64-node-1.29-v20240703/image_id"
        );
        let err = Alias::parse("al2@latest")
            .unwrap()
            .parameters("1.33")
            .unwrap_err();
        assert!(
            err.to_string().contains("no longer supported on EKS 1.33+"),
            "{err}"
        );
    }

    #[test]
    fn bottlerocket_strips_the_v_and_has_nvidia_variants() {
        let p = paths("bottlerocket@v1.20.1", "1.31");
        assert_eq!(
            p[0],
            "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/1.20.1/image_id"
        );
        assert_eq!(
            p[3],
            "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/arm64/1.20.1/image_id"
        );
        assert_eq!(
            paths("bottlerocket@latest", "1.31")[1],
            "/aws/service/bottlerocket/aws-k8s-1.31/arm64/latest/image_id"
        );
    }

    #[test]
    fn windows_latest_only_and_2025_needs_1_35() {
        assert_eq!(
            paths("windows2022@latest", "1.31"),
            vec![
                "/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.31/image_id"
            ]
        );
        assert!(matches!(
            Alias::parse("windows2019@v1"),
            Err(AliasError::Unsupported { .. })
        ));
        assert!(
            Alias::parse("windows2025@latest")
                .unwrap()
                .parameters("1.34")
                .is_err()
        );
        assert_eq!(paths("windows2025@latest", "1.35").len(), 1);
        let reqs = &Alias::parse("windows2019@latest")
            .unwrap()
            .parameters("1.31")
            .unwrap()[0]
            .requirements[0];
        assert_eq!(
            reqs[1].values.as_deref(),
            Some(&["10.0.17763".to_owned()][..])
        );
    }

    #[test]
    fn malformed_aliases() {
        for bad in ["al2023", "ubuntu@latest", "al2023@", ""] {
            assert!(
                matches!(Alias::parse(bad), Err(AliasError::Malformed(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn variants_map_to_accelerator_requirements() {
        let standard = Variant::Standard.requirements();
        assert!(standard.iter().all(|r| r.operator == "DoesNotExist"));
        assert_eq!(
            Variant::Nvidia.requirements()[0].key,
            "karpenter.k8s.aws/instance-gpu-count"
        );
        assert_eq!(
            Variant::Neuron.requirements()[0].key,
            "karpenter.k8s.aws/instance-accelerator-count"
        );
    }
}
