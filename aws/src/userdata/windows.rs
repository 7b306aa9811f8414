//! Windows user data: one `<powershell>` block that runs the user's PowerShell first, then
//! the EKS bootstrap script `Start-EKSBootstrap.ps1` with the cluster facts, kubelet flags
//! and DNS IP.

use super::BootstrapOptions;

pub fn render(opts: &BootstrapOptions) -> String {
    let mut s = String::from("<powershell>\n");
    if let Some(custom) = opts.custom_user_data.as_deref().filter(|c| !c.is_empty()) {
        s.push_str(custom);
        s.push('\n');
    }
    s.push_str("[string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"\n");
    s.push_str(&format!(
        "& $EKSBootstrapScriptFile -EKSClusterName '{}' -APIServerEndpoint '{}'",
        opts.cluster_name, opts.cluster_endpoint
    ));
    if let Some(ca) = &opts.ca_bundle {
        s.push_str(&format!(" -Base64ClusterCA '{ca}'"));
    }
    let args = opts.kubelet_extra_args();
    if !args.is_empty() {
        s.push_str(&format!(" -KubeletExtraArgs '{}'", args.join(" ")));
    }
    if let Some(dns) = opts.kubelet.cluster_dns.first() {
        s.push_str(&format!(" -DNSClusterIP '{dns}'"));
    }
    s.push_str("\n</powershell>");
    s
}

#[cfg(test)]
mod tests {
    use super::super::test_support::options;
    use super::*;
    use std::collections::BTreeMap;

    /// The `-Name 'value'` parameters of the bootstrap invocation.
    fn parameters(script: &str) -> BTreeMap<String, String> {
        let line = script
            .lines()
            .find(|l| l.starts_with("& $EKSBootstrapScriptFile"))
            .unwrap();
        let mut params = BTreeMap::new();
        let mut rest = line;
        while let Some(dash) = rest.find(" -") {
            rest = &rest[dash + 2..];
            let (name, after) = rest.split_once(" '").unwrap();
            let (value, after) = after.split_once('\'').unwrap();
            params.insert(name.to_owned(), value.to_owned());
            rest = after;
        }
        params
    }

    #[test]
    fn bootstrap_parameters_and_custom_powershell_first() {
        let mut o = options();
        o.custom_user_data = Some("Write-Host 'custom'".into());
        let script = render(&o);
        assert!(
            script
                .starts_with("<powershell>\nWrite-Host 'custom'\n[string]$EKSBootstrapScriptFile")
        );
        assert!(script.ends_with("</powershell>"));
        let params = parameters(&script);
        assert_eq!(params["EKSClusterName"], "demo");
        assert_eq!(params["APIServerEndpoint"], "https://demo.eks.example");
        assert_eq!(params["Base64ClusterCA"], "Y2EtYnVuZGxlCg==");
        assert_eq!(params["DNSClusterIP"], "10.100.0.10");
        let kubelet = &params["KubeletExtraArgs"];
        assert!(kubelet.contains("--max-pods=58"));
        assert!(kubelet.contains(
            "--register-with-taints=\"karpenter.sh/unregistered:NoExecute,gpu=true:NoSchedule\""
        ));
    }
}
