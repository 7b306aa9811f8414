//! Kubernetes name rules (qualified names, label values, DNS subdomains) and Karpenter's
//! label restrictions: which label keys users may put in NodePool requirements and template
//! labels. The allowed `karpenter.k8s.aws` keys are the list the CRD's CEL rules carry
//! (a test holds the two together).

use crate::labels;

/// The `karpenter.sh` labels allowed despite the restricted domain.
pub const KARPENTER_SH_ALLOWED: [&str; 2] = [labels::CAPACITY_TYPE, labels::NODEPOOL];

/// The `karpenter.k8s.aws` labels allowed despite the restricted domain.
pub const KARPENTER_AWS_ALLOWED: [&str; 29] = [
    labels::INSTANCE_TENANCY,
    labels::CAPACITY_RESERVATION_TYPE,
    labels::CAPACITY_RESERVATION_ID,
    labels::CAPACITY_RESERVATION_INTERRUPTIBLE,
    labels::EC2NODECLASS,
    labels::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
    labels::INSTANCE_NITRO_ENCLAVES_SUPPORTED,
    labels::INSTANCE_CATEGORY,
    labels::INSTANCE_HYPERVISOR,
    labels::INSTANCE_FAMILY,
    labels::INSTANCE_GENERATION,
    labels::INSTANCE_LOCAL_NVME,
    labels::INSTANCE_SIZE,
    labels::INSTANCE_CPU,
    labels::INSTANCE_CPU_MANUFACTURER,
    labels::INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
    labels::INSTANCE_MEMORY,
    labels::INSTANCE_EBS_BANDWIDTH,
    labels::INSTANCE_NETWORK_BANDWIDTH,
    labels::INSTANCE_GPU_NAME,
    labels::INSTANCE_GPU_MANUFACTURER,
    labels::INSTANCE_GPU_COUNT,
    labels::INSTANCE_GPU_MEMORY,
    labels::INSTANCE_ACCELERATOR_NAME,
    labels::INSTANCE_ACCELERATOR_MANUFACTURER,
    labels::INSTANCE_ACCELERATOR_COUNT,
    labels::INSTANCE_CAPABILITY_FLEX,
    labels::PLACEMENT_GROUP_ID,
    labels::PLACEMENT_GROUP_PARTITION,
];

/// Domains reserved for the kubelet and for Karpenter.
const RESTRICTED_DOMAINS: [&str; 4] = ["kubernetes.io", "k8s.io", labels::GROUP, labels::AWS_GROUP];

/// Sub-domains of the restricted ones that users may still use.
const DOMAIN_EXCEPTIONS: [&str; 3] = [
    "kops.k8s.io",
    "node.kubernetes.io",
    "node-restriction.kubernetes.io",
];

/// Labels in restricted domains that Karpenter knows and lets users constrain.
const CORE_WELL_KNOWN: [&str; 9] = [
    labels::NODEPOOL,
    labels::ZONE,
    labels::REGION,
    labels::INSTANCE_TYPE,
    labels::ARCH,
    labels::OS,
    labels::CAPACITY_TYPE,
    labels::WINDOWS_BUILD,
    labels::ZONE_ID,
];

/// Deprecated label names that requirements are normalised from.
const NORMALIZED: [(&str, &str); 5] = [
    ("failure-domain.beta.kubernetes.io/zone", labels::ZONE),
    ("failure-domain.beta.kubernetes.io/region", labels::REGION),
    ("beta.kubernetes.io/arch", labels::ARCH),
    ("beta.kubernetes.io/os", labels::OS),
    ("beta.kubernetes.io/instance-type", labels::INSTANCE_TYPE),
];

/// The key a requirement on `key` is really about (`beta.kubernetes.io/arch` → `kubernetes.io/arch`).
pub fn normalized_label(key: &str) -> &str {
    NORMALIZED
        .iter()
        .find(|(from, _)| *from == key)
        .map_or(key, |(_, to)| to)
}

pub fn is_well_known_label(key: &str) -> bool {
    CORE_WELL_KNOWN.contains(&key) || KARPENTER_AWS_ALLOWED.contains(&key)
}

/// The part of a label key CEL's `find("^([^/]+)")` sees: everything before the first `/`
/// (the whole key when there is none).
pub fn cel_label_domain(key: &str) -> &str {
    key.split('/').next().unwrap_or_default()
}

/// Upstream's runtime restriction (`IsRestrictedLabel`): labels in the kubelet's and
/// Karpenter's domains may not be set unless well known or in an exempt sub-domain.
pub fn restricted_label_error(key: &str) -> Option<String> {
    if is_well_known_label(key) {
        return None;
    }
    let domain = key.split_once('/').map_or("", |(domain, _)| domain);
    let exempt = DOMAIN_EXCEPTIONS.iter().any(|d| domain.ends_with(d));
    let restricted = !exempt && RESTRICTED_DOMAINS.iter().any(|d| domain.ends_with(d));
    (restricted || key == labels::HOSTNAME).then(|| {
        format!(
            "label {key:?} is restricted; use a well-known label or a custom label outside the domains {}",
            RESTRICTED_DOMAINS.join(", ")
        )
    })
}

const QUALIFIED_NAME_CHARS: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `IsQualifiedName`: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters. Returns what is wrong (empty when valid).
pub fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let (prefix, name) = match value.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, value),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            errors.push("prefix part must be non-empty".to_owned());
        } else {
            errors.extend(
                dns_subdomain_errors(prefix)
                    .into_iter()
                    .map(|e| format!("prefix part {e}")),
            );
        }
    }
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errors.push("name part must be no more than 63 characters".to_owned());
    }
    if !name.is_empty() && !is_label_value_shape(name) {
        errors.push(format!("name part {QUALIFIED_NAME_CHARS}"));
    }
    errors
}

/// `IsValidLabelValue`: empty, or at most 63 alphanumerics, '-', '_', '.' starting and ending
/// alphanumeric.
pub fn label_value_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 characters".to_owned());
    }
    if !value.is_empty() && !is_label_value_shape(value) {
        errors.push(format!("a valid label value {QUALIFIED_NAME_CHARS}"));
    }
    errors
}

fn is_label_value_shape(value: &str) -> bool {
    let bytes = value.as_bytes();
    let edge_ok = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    edge_ok(bytes.first())
        && edge_ok(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `IsDNS1123Subdomain`: at most 253 characters of lowercase DNS labels joined by dots.
pub fn dns_subdomain_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 253 {
        errors.push("must be no more than 253 characters".to_owned());
    }
    let label_ok = |label: &str| {
        let bytes = label.as_bytes();
        !bytes.is_empty()
            && bytes
                .first()
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && bytes
                .last()
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
    };
    if !value.split('.').all(label_ok) {
        errors.push(
            "must be a lowercase RFC 1123 subdomain: lowercase alphanumeric characters, '-' or '.', starting and ending with an alphanumeric character"
                .to_owned(),
        );
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        assert!(qualified_name_errors("app").is_empty());
        assert!(qualified_name_errors("example.com/team").is_empty());
        assert!(qualified_name_errors("a_b.c-d").is_empty());
        assert!(!qualified_name_errors("-app").is_empty());
        assert!(!qualified_name_errors("Example.com/x").is_empty());
        assert!(!qualified_name_errors("/x").is_empty());
        assert!(!qualified_name_errors("a/").is_empty());
        assert!(!qualified_name_errors(&"x".repeat(64)).is_empty());
    }

    #[test]
    fn label_values() {
        assert!(label_value_errors("").is_empty());
        assert!(label_value_errors("on-demand").is_empty());
        assert!(!label_value_errors("a b").is_empty());
        assert!(!label_value_errors("a.").is_empty());
        assert!(!label_value_errors(&"x".repeat(64)).is_empty());
    }

    #[test]
    fn runtime_label_restrictions() {
        assert!(restricted_label_error(labels::ZONE).is_none());
        assert!(restricted_label_error(labels::INSTANCE_FAMILY).is_none());
        assert!(restricted_label_error("node.kubernetes.io/lifecycle").is_none());
        assert!(restricted_label_error("example.com/team").is_none());
        assert!(restricted_label_error("team").is_none());
        assert!(restricted_label_error("kubernetes.io/custom").is_some());
        assert!(restricted_label_error("foo.k8s.io/x").is_some());
        assert!(restricted_label_error("kubernetes.io/hostname").is_some());
        assert!(restricted_label_error("karpenter.k8s.aws/unknown").is_some());
        assert_eq!(normalized_label("beta.kubernetes.io/arch"), labels::ARCH);
    }

    #[test]
    fn cel_domain_is_text_before_first_slash() {
        assert_eq!(cel_label_domain("karpenter.sh/x"), "karpenter.sh");
        assert_eq!(cel_label_domain("karpenter.sh"), "karpenter.sh");
        assert_eq!(cel_label_domain("a/b/c"), "a");
    }
}
