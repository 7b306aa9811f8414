//! Facts about the cluster that new nodes need and upstream reads from EKS: the Kubernetes
//! version (for AMI aliases), the API endpoint and CA bundle nodes join with, the cluster
//! DNS IP and the service CIDR (AL2023's nodeadm wants it). kerf reads them from the
//! Kubernetes API instead of EKS's DescribeCluster: the version from the API server, the
//! endpoint and CA from the settings or else the client's own configuration, the DNS IP from
//! the `kube-dns` Service in `kube-system` (best effort, as upstream), and the service CIDR
//! from the `kubernetes` ServiceCIDR object (Kubernetes 1.31+) or else EKS's default range
//! inferred from the `kubernetes` Service's ClusterIP.

use std::net::IpAddr;

use anyhow::bail;
use base64::Engine as _;
use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};

/// What [`discover`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterFacts {
    /// `1.33`: the control plane's major.minor.
    pub kubernetes_version: String,
    pub cluster_endpoint: String,
    /// Base64 of the PEM CA bundle, when one is known.
    pub ca_bundle: Option<String>,
    pub kube_dns_ip: Option<String>,
    pub cluster_cidr: Option<String>,
}

/// The endpoint and CA bundle from the settings, else from the client's configuration.
pub struct Configured<'a> {
    pub cluster_endpoint: Option<&'a str>,
    pub ca_bundle: Option<&'a str>,
    pub kube_config: &'a kube::Config,
}

/// Reads every fact; fails only when the version or the endpoint cannot be known.
pub async fn discover(
    client: &Client,
    configured: &Configured<'_>,
) -> anyhow::Result<ClusterFacts> {
    let kubernetes_version = super::version::read(client).await?;
    let cluster_endpoint = match configured.cluster_endpoint {
        Some(endpoint) => endpoint.to_owned(),
        None => endpoint_from_client(configured.kube_config)?,
    };
    let ca_bundle = match configured.ca_bundle {
        Some(ca) => Some(ca.to_owned()),
        None => configured
            .kube_config
            .root_cert
            .as_deref()
            .and_then(pem_bundle),
    };
    let kube_dns_ip = kube_dns_ip(client).await;
    let cluster_cidr = cluster_cidr(client, kube_dns_ip.as_deref()).await;
    Ok(ClusterFacts {
        kubernetes_version,
        cluster_endpoint,
        ca_bundle,
        kube_dns_ip,
        cluster_cidr,
    })
}

/// The client's API server URL, which nodes can use unless it is the in-cluster Service
/// address (reachable only once a node runs kube-proxy).
fn endpoint_from_client(config: &kube::Config) -> anyhow::Result<String> {
    let url = config.cluster_url.to_string();
    let host = config.cluster_url.host().unwrap_or_default();
    let service_host = std::env::var("KUBERNETES_SERVICE_HOST").unwrap_or_default();
    if host == "kubernetes.default.svc" || (!service_host.is_empty() && host == service_host) {
        bail!(
            "CLUSTER_ENDPOINT (--cluster-endpoint) is required in-cluster: the controller \
             reaches the API server at {url}, the in-cluster Service address new nodes \
             cannot use, and kerf does not call EKS DescribeCluster; set it to the \
             cluster's API endpoint (aws eks describe-cluster --name <cluster> --query \
             cluster.endpoint)"
        );
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// Base64 of the PEM encoding of DER certificates, as the CA bundle setting holds it.
pub fn pem_bundle(certificates: &[Vec<u8>]) -> Option<String> {
    if certificates.is_empty() {
        return None;
    }
    let engine = base64::engine::general_purpose::STANDARD;
    let mut pem = String::new();
    for der in certificates {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        let body = engine.encode(der);
        for line in body.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    Some(engine.encode(pem))
}

/// The ClusterIP of `kube-system/kube-dns`, when the Service exists.
async fn kube_dns_ip(client: &Client) -> Option<String> {
    let services: Api<Service> = Api::namespaced(client.clone(), "kube-system");
    match services.get_opt("kube-dns").await {
        Ok(Some(service)) => service
            .spec
            .and_then(|s| s.cluster_ip)
            .filter(|ip| ip.parse::<IpAddr>().is_ok()),
        Ok(None) => {
            tracing::debug!("no kube-system/kube-dns Service; nodes use their AMI's DNS default");
            None
        }
        Err(error) => {
            tracing::debug!(%error, "reading kube-system/kube-dns");
            None
        }
    }
}

/// The service CIDR: the `kubernetes` ServiceCIDR's range of the DNS IP's family (or its
/// first), else EKS's default range when the `kubernetes` Service sits at its first address.
async fn cluster_cidr(client: &Client, dns_ip: Option<&str>) -> Option<String> {
    for version in ["v1", "v1beta1"] {
        let resource = ApiResource {
            group: "networking.k8s.io".to_owned(),
            version: version.to_owned(),
            api_version: format!("networking.k8s.io/{version}"),
            kind: "ServiceCIDR".to_owned(),
            plural: "servicecidrs".to_owned(),
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        if let Ok(Some(object)) = api.get_opt("kubernetes").await {
            let cidrs: Vec<String> = object.data["spec"]["cidrs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c.as_str().map(str::to_owned))
                .collect();
            if let Some(cidr) = pick_cidr(&cidrs, dns_ip) {
                return Some(cidr);
            }
        }
    }
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let ip = services
        .get_opt("kubernetes")
        .await
        .ok()
        .flatten()
        .and_then(|s| s.spec)
        .and_then(|s| s.cluster_ip)?;
    let cidr = eks_default_cidr(&ip);
    if cidr.is_none() {
        tracing::warn!(
            kubernetes_service_ip = ip,
            "cannot tell the service CIDR (no ServiceCIDR object, and the kubernetes Service is \
             not in an EKS default range); AL2023 EC2NodeClasses will not become Ready"
        );
    }
    cidr
}

/// The CIDR of the DNS IP's address family, else the first.
pub fn pick_cidr(cidrs: &[String], dns_ip: Option<&str>) -> Option<String> {
    let family = dns_ip
        .and_then(|ip| ip.parse::<IpAddr>().ok())
        .map(|ip| ip.is_ipv6());
    cidrs
        .iter()
        .find(|c| family.is_some_and(|v6| c.contains(':') == v6))
        .or_else(|| cidrs.first())
        .cloned()
}

/// EKS assigns services from 10.100.0.0/16 or 172.20.0.0/16 unless told otherwise; the
/// `kubernetes` Service takes the first address of the range.
pub fn eks_default_cidr(kubernetes_service_ip: &str) -> Option<String> {
    match kubernetes_service_ip {
        "10.100.0.1" => Some("10.100.0.0/16".to_owned()),
        "172.20.0.1" => Some("172.20.0.0/16".to_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_follow_the_dns_family_then_eks_defaults() {
        let both = vec!["10.96.0.0/12".to_owned(), "fd00:10:96::/108".to_owned()];
        assert_eq!(
            pick_cidr(&both, Some("fd00:10:96::a")).as_deref(),
            Some("fd00:10:96::/108")
        );
        assert_eq!(
            pick_cidr(&both, Some("10.96.0.10")).as_deref(),
            Some("10.96.0.0/12")
        );
        assert_eq!(pick_cidr(&both, None).as_deref(), Some("10.96.0.0/12"));
        assert_eq!(pick_cidr(&[], None), None);
        assert_eq!(
            eks_default_cidr("10.100.0.1").as_deref(),
            Some("10.100.0.0/16")
        );
        assert_eq!(
            eks_default_cidr("172.20.0.1").as_deref(),
            Some("172.20.0.0/16")
        );
        assert_eq!(eks_default_cidr("10.96.0.1"), None);
    }

    #[test]
    fn ca_bundles_are_base64_pem() {
        let bundle = pem_bundle(&[vec![1, 2, 3]]).expect("one certificate");
        let pem = base64::engine::general_purpose::STANDARD
            .decode(bundle)
            .expect("base64");
        let pem = String::from_utf8(pem).expect("text");
        assert_eq!(
            pem,
            "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n"
        );
        assert_eq!(pem_bundle(&[]), None);
    }
}
