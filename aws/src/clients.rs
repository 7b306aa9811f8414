//! AWS SDK clients, configured the standard AWS way: credentials from the environment, web
//! identity (IRSA / Pod Identity), profiles or the instance profile; region from settings,
//! the environment or IMDS; retries with backoff on throttling (`RequestLimitExceeded`).
//! [`AwsClients::check_connectivity`] runs at start-up and turns an unreachable STS or EC2
//! endpoint into an error that names the endpoint and the usual causes from Karpenter's
//! troubleshooting guide (pod DNS, missing VPC endpoints). The controller's clients send
//! every call from the I/O runtime they are given ([`crate::io`]), never from the caller's.

use crate::errors::ApiError;
use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::config::{SharedHttpClient, SharedInterceptor};
use std::time::Duration;
use thiserror::Error;
use tokio::runtime::Handle;

/// Attempts per call, counting the first; throttled calls back off exponentially in between.
const MAX_ATTEMPTS: u32 = 5;

/// Every client the provider uses, sharing one configuration.
#[derive(Clone, Debug)]
pub struct AwsClients {
    pub ec2: aws_sdk_ec2::Client,
    pub ssm: aws_sdk_ssm::Client,
    pub pricing: aws_sdk_pricing::Client,
    pub iam: aws_sdk_iam::Client,
    pub sts: aws_sdk_sts::Client,
    /// The interruption queue's client (used only with `INTERRUPTION_QUEUE`).
    pub sqs: aws_sdk_sqs::Client,
    pub region: String,
    /// The endpoint override, when one is configured (tests, VPC endpoints).
    pub endpoint_override: Option<String>,
}

/// Why the provider could not start.
#[derive(Debug, Error)]
pub enum StartupError {
    #[error(
        "no AWS region configured: set AWS_REGION (or the region setting), or run where the \
         instance metadata service (IMDS) is reachable"
    )]
    NoRegion,
    #[error("{0}")]
    Unreachable(String),
    #[error(transparent)]
    NoHttpClient(#[from] crate::io::NoDefaultClient),
}

impl AwsClients {
    /// Clients from the standard credential and region chains; `region` overrides them. The
    /// SDK's environment settings apply, among them `AWS_ENDPOINT_URL` (and per service
    /// `AWS_ENDPOINT_URL_EC2`, ...), which points kerf at an emulator or VPC endpoints, and
    /// `AWS_MAX_ATTEMPTS`, which replaces kerf's default of [`MAX_ATTEMPTS`]. Every call, the
    /// credential providers' included, is sent from a task of `io` ([`crate::io`]).
    pub async fn from_environment(
        region: Option<String>,
        io: Handle,
    ) -> Result<Self, StartupError> {
        let mut loader =
            aws_config::defaults(BehaviorVersion::latest()).http_client(crate::io::default_on(io)?);
        if std::env::var_os("AWS_MAX_ATTEMPTS").is_none() {
            loader = loader.retry_config(retry_config());
        }
        if let Some(region) = region {
            loader = loader.region(Region::new(region));
        }
        let conf = loader.load().await;
        Self::from_sdk_config(&conf)
    }

    /// Clients for an emulator or a fixed endpoint, with static test credentials.
    pub async fn for_endpoint(endpoint: &str, region: &str) -> Self {
        Self::for_endpoint_with(endpoint, region, &[]).await
    }

    /// [`AwsClients::for_endpoint`] with `interceptors` on every client: tests use them to
    /// see each request the provider sends (the IAM policy coverage test checks each one).
    pub async fn for_endpoint_with(
        endpoint: &str,
        region: &str,
        interceptors: &[SharedInterceptor],
    ) -> Self {
        Self::endpoint_clients(endpoint, region, interceptors, None)
            .await
            .expect("the region was set explicitly")
    }

    /// [`AwsClients::for_endpoint_with`] sending every call from a task of `io`, as the
    /// controller's clients do ([`crate::io`]).
    pub async fn for_endpoint_on(
        io: Handle,
        endpoint: &str,
        region: &str,
        interceptors: &[SharedInterceptor],
    ) -> Result<Self, StartupError> {
        let http = crate::io::default_on(io)?;
        Self::endpoint_clients(endpoint, region, interceptors, Some(http)).await
    }

    async fn endpoint_clients(
        endpoint: &str,
        region: &str,
        interceptors: &[SharedInterceptor],
        http: Option<SharedHttpClient>,
    ) -> Result<Self, StartupError> {
        let creds =
            aws_sdk_ec2::config::Credentials::new("testing", "testing", None, None, "kerf-test");
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(region.to_owned()))
            .endpoint_url(endpoint)
            .credentials_provider(creds)
            .retry_config(retry_config().with_initial_backoff(Duration::from_millis(10)));
        if let Some(http) = http {
            loader = loader.http_client(http);
        }
        Self::with_interceptors(&loader.load().await, interceptors)
    }

    pub fn from_sdk_config(conf: &SdkConfig) -> Result<Self, StartupError> {
        Self::with_interceptors(conf, &[])
    }

    fn with_interceptors(
        conf: &SdkConfig,
        interceptors: &[SharedInterceptor],
    ) -> Result<Self, StartupError> {
        let region = conf.region().ok_or(StartupError::NoRegion)?.to_string();
        // Each service's builder takes the interceptors the same way; one macro, not six copies.
        macro_rules! client {
            ($service:ident $(, $extra:ident($value:expr))?) => {{
                let mut builder = $service::config::Builder::from(conf);
                $(builder = builder.$extra($value);)?
                for interceptor in interceptors {
                    builder.push_interceptor(interceptor.clone());
                }
                $service::Client::from_conf(builder.build())
            }};
        }
        Ok(Self {
            ec2: client!(aws_sdk_ec2),
            ssm: client!(aws_sdk_ssm),
            pricing: client!(
                aws_sdk_pricing,
                region(Region::new(pricing_region(&region)))
            ),
            iam: client!(aws_sdk_iam),
            sts: client!(aws_sdk_sts),
            sqs: client!(aws_sdk_sqs),
            endpoint_override: conf.endpoint_url().map(str::to_owned),
            region,
        })
    }

    /// Calls STS and EC2 once so a misconfigured network fails at start-up with advice
    /// rather than on the first launch.
    pub async fn check_connectivity(&self) -> Result<(), StartupError> {
        if let Err(e) = self.sts.get_caller_identity().send().await {
            let err = ApiError::from_sdk("GetCallerIdentity", e);
            return Err(StartupError::Unreachable(unreachable_message(
                "STS",
                &self.endpoint_for("sts"),
                &self.region,
                &err,
            )));
        }
        if let Err(e) = self.ec2.describe_availability_zones().send().await {
            let err = ApiError::from_sdk("DescribeAvailabilityZones", e);
            return Err(StartupError::Unreachable(unreachable_message(
                "EC2",
                &self.endpoint_for("ec2"),
                &self.region,
                &err,
            )));
        }
        Ok(())
    }

    fn endpoint_for(&self, service: &str) -> String {
        match &self.endpoint_override {
            Some(url) => url.clone(),
            None => format!("https://{service}.{}.amazonaws.com", self.region),
        }
    }
}

fn retry_config() -> RetryConfig {
    RetryConfig::standard().with_max_attempts(MAX_ATTEMPTS)
}

/// The Pricing API is served from a few regions only; pick the one upstream uses.
pub fn pricing_region(region: &str) -> String {
    if region.starts_with("cn-") {
        "cn-northwest-1".to_owned()
    } else if region.starts_with("ap-") {
        "ap-south-1".to_owned()
    } else if region.starts_with("eu-")
        || region.starts_with("il-")
        || region.starts_with("me-")
        || region.starts_with("af-")
    {
        "eu-central-1".to_owned()
    } else {
        "us-east-1".to_owned()
    }
}

/// The start-up error for an unreachable service, with the causes users most often hit.
pub fn unreachable_message(service: &str, endpoint: &str, region: &str, err: &ApiError) -> String {
    let mut msg = format!("cannot reach {service} at {endpoint} (region {region}): {err}.");
    if err.code.is_some() {
        // The service answered: this is a credentials or permissions problem, not network.
        msg.push_str(&format!(
            " {service} answered with an error: check the controller's IAM role / credentials \
             (IRSA or Pod Identity annotation, AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE) and \
             its policy."
        ));
        return msg;
    }
    msg.push_str(&format!(
        " Common causes: (1) DNS — the controller pod cannot resolve {endpoint}; when it runs \
         before CoreDNS is up, or CoreDNS cannot reach the VPC resolver, set `dnsPolicy: Default` \
         on the controller pod (Helm value `dnsPolicy`); (2) a private cluster without internet \
         access — create the VPC interface endpoints com.amazonaws.{region}.sts, \
         com.amazonaws.{region}.ec2, com.amazonaws.{region}.ssm (and \
         com.amazonaws.{region}.sqs for interruption handling), and set ISOLATED_VPC=true since \
         the Pricing API has no VPC endpoint; (3) a security group or network ACL blocking \
         HTTPS (443) from the controller to the endpoint."
    ));
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_failures_suggest_dns_and_vpc_endpoints() {
        let err = ApiError {
            operation: "GetCallerIdentity",
            code: None,
            message: "dispatch failure: dns error: failed to lookup address".into(),
        };
        let msg = unreachable_message(
            "STS",
            "https://sts.eu-west-1.amazonaws.com",
            "eu-west-1",
            &err,
        );
        assert!(msg.contains("cannot reach STS at https://sts.eu-west-1.amazonaws.com"));
        assert!(msg.contains("dnsPolicy: Default"));
        assert!(msg.contains("com.amazonaws.eu-west-1.sts"));
        assert!(msg.contains("ISOLATED_VPC=true"));
    }

    #[test]
    fn service_errors_point_at_credentials() {
        let err = ApiError {
            operation: "DescribeAvailabilityZones",
            code: Some("UnauthorizedOperation".into()),
            message: "denied".into(),
        };
        let msg = unreachable_message(
            "EC2",
            "https://ec2.us-east-1.amazonaws.com",
            "us-east-1",
            &err,
        );
        assert!(msg.contains("IAM role"));
        assert!(!msg.contains("dnsPolicy"));
    }

    #[test]
    fn pricing_regions() {
        assert_eq!(pricing_region("us-west-2"), "us-east-1");
        assert_eq!(pricing_region("ap-northeast-1"), "ap-south-1");
        assert_eq!(pricing_region("eu-west-1"), "eu-central-1");
        assert_eq!(pricing_region("cn-north-1"), "cn-northwest-1");
    }
}
