//! Bottlerocket user data: TOML settings. The user's TOML is the base; kerf sets the cluster
//! facts and kubelet settings under `settings.kubernetes`, merges its node labels over the
//! user's and replaces the node taints (they must include the registration taint), and with
//! `RAID0` adds the bootstrap command that mounts instance storage.

use super::{BootstrapOptions, UserDataError};
use toml::{Table, Value};

pub fn render(opts: &BootstrapOptions) -> Result<String, UserDataError> {
    let mut root: Table = match opts.custom_user_data.as_deref() {
        Some(text) if !text.trim().is_empty() => {
            toml::from_str(text).map_err(|e| UserDataError::CustomToml(e.to_string()))?
        }
        _ => Table::new(),
    };
    let settings = child_table(&mut root, "settings")?;
    if opts.instance_store_raid0 {
        add_raid0_bootstrap(settings)?;
    }
    let kubernetes = child_table(settings, "kubernetes")?;
    apply_kubernetes(kubernetes, opts)?;
    toml::to_string(&root).map_err(|e| UserDataError::CustomToml(e.to_string()))
}

fn child_table<'a>(parent: &'a mut Table, key: &str) -> Result<&'a mut Table, UserDataError> {
    parent
        .entry(key.to_owned())
        .or_insert_with(|| Value::Table(Table::new()))
        .as_table_mut()
        .ok_or_else(|| UserDataError::CustomToml(format!("`{key}` must be a table")))
}

fn string_table(map: &std::collections::BTreeMap<String, String>) -> Value {
    Value::Table(
        map.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

fn apply_kubernetes(k8s: &mut Table, opts: &BootstrapOptions) -> Result<(), UserDataError> {
    let mut set = |key: &str, value: Value| {
        k8s.insert(key.to_owned(), value);
    };
    set("cluster-name", Value::String(opts.cluster_name.clone()));
    set("api-server", Value::String(opts.cluster_endpoint.clone()));
    if let Some(ca) = &opts.ca_bundle {
        set("cluster-certificate", Value::String(ca.clone()));
    }
    let kubelet = &opts.kubelet;
    if let Some(max_pods) = kubelet.max_pods {
        set("max-pods", Value::Integer(i64::from(max_pods)));
    }
    if let Some(dns) = kubelet.cluster_dns.first() {
        set("cluster-dns-ip", Value::String(dns.clone()));
    }
    for (key, map) in [
        ("system-reserved", &kubelet.system_reserved),
        ("kube-reserved", &kubelet.kube_reserved),
        ("eviction-hard", &kubelet.eviction_hard),
        ("eviction-soft", &kubelet.eviction_soft),
        (
            "eviction-soft-grace-period",
            &kubelet.eviction_soft_grace_period,
        ),
    ] {
        if !map.is_empty() {
            set(key, string_table(map));
        }
    }
    if let Some(v) = kubelet.eviction_max_pod_grace_period {
        set(
            "eviction-max-pod-grace-period",
            Value::Integer(i64::from(v)),
        );
    }
    if let Some(v) = kubelet.image_gc_high_threshold_percent {
        set(
            "image-gc-high-threshold-percent",
            Value::String(v.to_string()),
        );
    }
    if let Some(v) = kubelet.image_gc_low_threshold_percent {
        set(
            "image-gc-low-threshold-percent",
            Value::String(v.to_string()),
        );
    }
    if let Some(v) = kubelet.cpu_cfs_quota {
        set("cpu-cfs-quota-enforced", Value::Boolean(v));
    }
    let labels = child_table(k8s, "node-labels")?;
    for (k, v) in &opts.labels {
        labels.insert(k.clone(), Value::String(v.clone()));
    }
    let mut taints = Table::new();
    for t in &opts.taints {
        let entry = taints
            .entry(t.key.clone())
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(values) = entry {
            let value = t.value.clone().unwrap_or_default();
            values.push(Value::String(format!("{value}:{}", t.effect)));
        }
    }
    k8s.insert("node-taints".to_owned(), Value::Table(taints));
    Ok(())
}

fn add_raid0_bootstrap(settings: &mut Table) -> Result<(), UserDataError> {
    let commands = child_table(settings, "bootstrap-commands")?;
    let argv = |words: &[&str]| {
        Value::Array(
            words
                .iter()
                .map(|w| Value::String((*w).to_owned()))
                .collect(),
        )
    };
    let mut cmd = Table::new();
    cmd.insert(
        "commands".into(),
        Value::Array(vec![
            argv(&["apiclient", "ephemeral-storage", "init"]),
            argv(&["apiclient", "ephemeral-storage", "bind"]),
        ]),
    );
    cmd.insert("essential".into(), Value::Boolean(true));
    cmd.insert("mode".into(), Value::String("always".into()));
    commands.insert("000-mount-instance-storage".into(), Value::Table(cmd));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::options;
    use super::*;

    fn parsed(text: &str) -> Table {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn settings_carry_cluster_and_kubelet_facts() {
        let out = parsed(&render(&options()).unwrap());
        let k8s = out["settings"]["kubernetes"].as_table().unwrap();
        assert_eq!(k8s["cluster-name"].as_str(), Some("demo"));
        assert_eq!(k8s["api-server"].as_str(), Some("https://demo.eks.example"));
        assert_eq!(
            k8s["cluster-certificate"].as_str(),
            Some("Y2EtYnVuZGxlCg==")
        );
        assert_eq!(k8s["cluster-dns-ip"].as_str(), Some("10.100.0.10"));
        assert_eq!(k8s["max-pods"].as_integer(), Some(58));
        assert_eq!(
            k8s["eviction-hard"]["memory.available"].as_str(),
            Some("5%")
        );
        assert_eq!(
            k8s["node-labels"]["karpenter.sh/nodepool"].as_str(),
            Some("default")
        );
        assert_eq!(
            k8s["node-taints"]["karpenter.sh/unregistered"]
                .as_array()
                .unwrap()[0]
                .as_str(),
            Some(":NoExecute")
        );
        assert_eq!(
            k8s["node-taints"]["gpu"].as_array().unwrap()[0].as_str(),
            Some("true:NoSchedule")
        );
    }

    #[test]
    fn user_toml_is_merged_and_kerf_wins_on_cluster_facts() {
        let mut o = options();
        o.custom_user_data = Some(
            "[settings.kubernetes]\ncluster-name = 'spoofed'\ncloud-provider = 'external'\n\
             [settings.kubernetes.node-labels]\nteam = 'data'\n'karpenter.sh/nodepool' = 'other'\n\
             [settings.kubernetes.node-taints]\nold = ['x:NoSchedule']\n\
             [settings.ntp]\ntime-servers = ['169.254.169.123']\n"
                .into(),
        );
        o.instance_store_raid0 = true;
        let out = parsed(&render(&o).unwrap());
        let k8s = out["settings"]["kubernetes"].as_table().unwrap();
        assert_eq!(k8s["cluster-name"].as_str(), Some("demo"));
        assert_eq!(k8s["cloud-provider"].as_str(), Some("external"));
        assert_eq!(k8s["node-labels"]["team"].as_str(), Some("data"));
        assert_eq!(
            k8s["node-labels"]["karpenter.sh/nodepool"].as_str(),
            Some("default")
        );
        assert!(k8s["node-taints"].get("old").is_none());
        assert_eq!(
            out["settings"]["ntp"]["time-servers"].as_array().unwrap()[0].as_str(),
            Some("169.254.169.123")
        );
        let cmd = &out["settings"]["bootstrap-commands"]["000-mount-instance-storage"];
        assert_eq!(cmd["essential"].as_bool(), Some(true));
        assert_eq!(cmd["commands"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn invalid_user_toml_is_reported() {
        let mut o = options();
        o.custom_user_data = Some("[settings\nbroken".into());
        assert!(matches!(render(&o), Err(UserDataError::CustomToml(_))));
        o.custom_user_data = Some("settings = 3".into());
        assert!(matches!(render(&o), Err(UserDataError::CustomToml(m)) if m.contains("settings")));
    }
}
