//! The controller's IAM policy (`deploy/iam/controller-policy.json`) checked against every
//! request the provider sends in this suite. The provider's clients carry [`PolicyCheck`], an
//! SDK interceptor that sees each request just before it is sent and refuses it, failing the
//! test with the statement that is missing, unless the policy allows it the way IAM would:
//! for each resource the call touches, an Allow statement whose action and resource match and
//! whose conditions hold — the tags the request puts on what it creates (`aws:RequestTag`,
//! tag-on-create through `ec2:CreateTags` with `ec2:CreateAction`), and the tags already on
//! what it changes or deletes (`aws:ResourceTag`, read back from moto).
//!
//! Set-up and assertions in the tests go through [`setup_clients`], which carry no check.
//! What is not modelled (and why): `iam:PassRole` (IAM evaluates it on the launch template's
//! instance profile, not on a request of its own); `aws:RequestedRegion` (every client here is
//! in [`REGION`]); `sts:GetCallerIdentity` (IAM never denies it). Each test cluster has a name
//! of its own, so `${ClusterName}` is bound from the request's `kubernetes.io/cluster/NAME`
//! tag, and matches any one name where a request names no cluster (SQS calls).

use std::collections::BTreeMap;

use aws_sdk_ec2::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents, SharedInterceptor};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use kerf::wildcard;
use kerf_aws::clients::AwsClients;
use serde_json::Value;

use crate::support::{REGION, io, moto};

/// The policy as shipped.
const POLICY: &str = include_str!("../../../deploy/iam/controller-policy.json");
/// The account moto answers as.
const ACCOUNT: &str = "123456789012";
/// Calls IAM authorises for every identity.
const ALWAYS_ALLOWED: &[&str] = &["sts:GetCallerIdentity"];
const CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";

/// Clients for the provider under test: every request is checked against the policy.
pub async fn provider_clients() -> AwsClients {
    provider_clients_allowing(&[]).await
}

/// [`provider_clients`] checked against the policy plus `statements` (JSON), for what
/// upstream documents as the user's own addition (SSM parameters of their own).
pub async fn provider_clients_allowing(statements: &[&str]) -> AwsClients {
    let extra = statements
        .iter()
        .map(|s| serde_json::from_str(s).expect("an extra statement is JSON"))
        .collect();
    let check = SharedInterceptor::new(PolicyCheck { extra });
    AwsClients::for_endpoint_on(io().clone(), moto().endpoint(), REGION, &[check])
        .await
        .expect("the provider's clients")
}

/// What a NodeClass whose `amiSelectorTerms` name the user's own SSM parameters needs beside
/// the shipped policy (as upstream documents: the policy reads only `/aws/service/*`).
pub const OWN_SSM_PARAMETERS: &str = r#"{"Sid": "ReadOwnAMIParameters", "Effect": "Allow",
    "Action": "ssm:GetParameter", "Resource": "arn:aws:ssm:us-east-1::parameter/kerf-tests/*"}"#;

/// Clients for the tests' own set-up and assertions, which the policy does not cover.
pub async fn setup_clients() -> AwsClients {
    AwsClients::for_endpoint(moto().endpoint(), REGION).await
}

#[derive(Debug)]
struct PolicyCheck {
    /// Statements beside the shipped policy's.
    extra: Vec<Value>,
}

impl Intercept for PolicyCheck {
    fn name(&self) -> &'static str {
        "PolicyCheck"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let metadata = cfg
            .load::<Metadata>()
            .ok_or("the SDK put no operation metadata in the config bag")?;
        let action = format!(
            "{}:{}",
            metadata.service().to_ascii_lowercase(),
            metadata.name()
        );
        let body = context.request().body().bytes().unwrap_or_default();
        let request = Request::parse(&action, body);
        let mut policy = Policy::shipped();
        policy.statements.extend(self.extra.iter().cloned());
        policy.authorize(&request, &MotoTags).map_err(Into::into)
    }
}

/// One request as IAM sees it: the action and its parameters.
#[derive(Debug, Default)]
pub struct Request {
    pub action: String,
    /// Query-protocol parameters (EC2, IAM), or the JSON body's top-level strings (SSM, SQS).
    pub params: BTreeMap<String, String>,
}

impl Request {
    fn parse(action: &str, body: &[u8]) -> Self {
        let text = String::from_utf8_lossy(body);
        let params = match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(map)) => map
                .into_iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k, s.to_owned())))
                .collect(),
            _ => form_params(&text),
        };
        Self {
            action: action.to_owned(),
            params,
        }
    }

    fn param(&self, key: &str) -> Option<&str> {
        self.params.get(key).map(String::as_str)
    }

    /// Values of the numbered parameters `PREFIX.N[SUFFIX]`, in order.
    fn list(&self, prefix: &str, suffix: &str) -> Vec<&str> {
        (1..)
            .map_while(|n| self.param(&format!("{prefix}.{n}{suffix}")))
            .collect()
    }

    /// Tags as `PREFIX.N.Key` / `PREFIX.N.Value`.
    fn tags(&self, prefix: &str) -> BTreeMap<String, String> {
        (1..)
            .map_while(|n| {
                let key = self.param(&format!("{prefix}.{n}.Key"))?;
                let value = self.param(&format!("{prefix}.{n}.Value")).unwrap_or("");
                Some((key.to_owned(), value.to_owned()))
            })
            .collect()
    }

    /// The resources a create call makes, each with the tags the request puts on it.
    fn created(&self, types: &[&str]) -> Vec<(String, BTreeMap<String, String>)> {
        let mut tagged = BTreeMap::new();
        for n in 1.. {
            let Some(kind) = self.param(&format!("TagSpecification.{n}.ResourceType")) else {
                break;
            };
            tagged.insert(
                kind.to_owned(),
                self.tags(&format!("TagSpecification.{n}.Tag")),
            );
        }
        types
            .iter()
            .map(|kind| ((*kind).to_owned(), tagged.remove(*kind).unwrap_or_default()))
            .collect()
    }
}

fn form_params(text: &str) -> BTreeMap<String, String> {
    text.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Tags already on a resource (`aws:ResourceTag`), and the tags a launch template gives the
/// resources launched from it (network interfaces, spot requests).
pub trait ResourceTags {
    fn tags(&self, arn: &str) -> BTreeMap<String, String>;
    fn template_tags(&self, template: &str, kind: &str) -> BTreeMap<String, String>;
}

/// Reads resource tags back from moto, on a thread of its own: the interceptor is called
/// synchronously from inside the SDK's future.
struct MotoTags;

impl ResourceTags for MotoTags {
    fn tags(&self, arn: &str) -> BTreeMap<String, String> {
        let arn = arn.to_owned();
        on_own_thread(async move { moto_tags(&arn).await })
    }

    fn template_tags(&self, template: &str, kind: &str) -> BTreeMap<String, String> {
        let (template, kind) = (template.to_owned(), kind.to_owned());
        on_own_thread(async move { moto_template_tags(&template, &kind).await })
    }
}

fn on_own_thread<F>(lookup: F) -> BTreeMap<String, String>
where
    F: std::future::Future<Output = BTreeMap<String, String>> + Send + 'static,
{
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the tag lookup");
        runtime.block_on(lookup)
    })
    .join()
    .unwrap_or_default()
}

/// The tags the template's latest version puts on resources of `kind`.
async fn moto_template_tags(template: &str, kind: &str) -> BTreeMap<String, String> {
    let c = setup_clients().await;
    let request = c
        .ec2
        .describe_launch_template_versions()
        .versions("$Latest");
    let request = if template.starts_with("lt-") {
        request.launch_template_id(template)
    } else {
        request.launch_template_name(template)
    };
    let Ok(out) = request.send().await else {
        return BTreeMap::new();
    };
    out.launch_template_versions()
        .iter()
        .filter_map(|v| v.launch_template_data())
        .flat_map(|d| d.tag_specifications())
        .filter(|spec| spec.resource_type().is_some_and(|t| t.as_str() == kind))
        .flat_map(|spec| spec.tags())
        .map(|t| (t.key().unwrap_or("").into(), t.value().unwrap_or("").into()))
        .collect()
}

async fn moto_tags(arn: &str) -> BTreeMap<String, String> {
    let c = setup_clients().await;
    let (kind, id) = arn
        .rsplit_once(':')
        .and_then(|(_, last)| last.split_once('/'))
        .unwrap_or(("", ""));
    let pairs: Vec<(String, String)> = match kind {
        "instance" => c
            .ec2
            .describe_instances()
            .instance_ids(id)
            .send()
            .await
            .map(|out| {
                out.reservations()
                    .iter()
                    .flat_map(|r| r.instances())
                    .flat_map(|i| i.tags())
                    .map(|t| (t.key().unwrap_or("").into(), t.value().unwrap_or("").into()))
                    .collect()
            })
            .unwrap_or_default(),
        "launch-template" => {
            let request = c.ec2.describe_launch_templates();
            let request = if id.starts_with("lt-") {
                request.launch_template_ids(id)
            } else {
                request.launch_template_names(id)
            };
            request
                .send()
                .await
                .map(|out| {
                    out.launch_templates()
                        .iter()
                        .flat_map(|t| t.tags())
                        .map(|t| (t.key().unwrap_or("").into(), t.value().unwrap_or("").into()))
                        .collect()
                })
                .unwrap_or_default()
        }
        "instance-profile" => c
            .iam
            .get_instance_profile()
            .instance_profile_name(id)
            .send()
            .await
            .map(|out| {
                out.instance_profile()
                    .map(|p| {
                        p.tags()
                            .iter()
                            .map(|t| (t.key().to_owned(), t.value().to_owned()))
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    pairs.into_iter().collect()
}

/// One resource a request touches, as IAM evaluates it.
#[derive(Debug)]
struct Touched {
    arn: String,
    /// Tags the request puts on it (resources it creates).
    request_tags: BTreeMap<String, String>,
    /// Whether its current tags are read (`aws:ResourceTag`): resources that exist.
    exists: bool,
    /// The launch template whose data tags it, when the request itself does not.
    template: Option<String>,
}

impl Touched {
    fn created(kind: &str, tags: BTreeMap<String, String>) -> Self {
        Self {
            arn: format!("arn:aws:ec2:{REGION}:{ACCOUNT}:{kind}/new"),
            request_tags: tags,
            exists: false,
            template: None,
        }
    }

    fn existing(arn: String) -> Self {
        Self {
            arn,
            request_tags: BTreeMap::new(),
            exists: true,
            template: None,
        }
    }
}

/// The resources each action the provider calls touches. An action not listed is refused:
/// the checker must be taught what it touches before it can say the policy allows it.
fn touched(request: &Request) -> Option<Vec<Touched>> {
    let ec2 = |kind: &str, id: &str| format!("arn:aws:ec2:{REGION}:{ACCOUNT}:{kind}/{id}");
    let shared = |kind: &str| Touched::existing(format!("arn:aws:ec2:{REGION}::{kind}/shared"));
    let touched = match request.action.as_str() {
        "ec2:CreateFleet" => {
            let templates: Vec<&str> = request
                .list(
                    "LaunchTemplateConfigs",
                    ".LaunchTemplateSpecification.LaunchTemplateId",
                )
                .into_iter()
                .chain(request.list(
                    "LaunchTemplateConfigs",
                    ".LaunchTemplateSpecification.LaunchTemplateName",
                ))
                .collect();
            let mut out: Vec<Touched> = templates
                .iter()
                .map(|id| Touched::existing(ec2("launch-template", id)))
                .collect();
            out.extend(
                request
                    .created(&["fleet", "instance", "volume", "network-interface"])
                    .into_iter()
                    .map(|(kind, tags)| Touched {
                        template: templates.first().map(|t| (*t).to_owned()),
                        ..Touched::created(&kind, tags)
                    }),
            );
            out.extend(["image", "subnet", "security-group"].map(shared));
            out
        }
        "ec2:CreateLaunchTemplate" => request
            .created(&["launch-template"])
            .into_iter()
            .map(|(kind, tags)| Touched::created(&kind, tags))
            .collect(),
        "ec2:CreateTags" => request
            .list("ResourceId", "")
            .into_iter()
            .map(|id| Touched {
                request_tags: request.tags("Tag"),
                ..Touched::existing(ec2("instance", id))
            })
            .collect(),
        "ec2:TerminateInstances" => request
            .list("InstanceId", "")
            .into_iter()
            .map(|id| Touched::existing(ec2("instance", id)))
            .collect(),
        "ec2:DeleteLaunchTemplate" => {
            let id = request
                .param("LaunchTemplateId")
                .or(request.param("LaunchTemplateName"))?;
            vec![Touched::existing(ec2("launch-template", id))]
        }
        action if action.starts_with("ec2:Describe") || action == "pricing:GetProducts" => {
            vec![Touched::existing("*".into())]
        }
        "ssm:GetParameter" => {
            let name = request.param("Name")?.trim_start_matches('/');
            vec![Touched::existing(format!(
                "arn:aws:ssm:{REGION}::parameter/{name}"
            ))]
        }
        "iam:GetInstanceProfile"
        | "iam:AddRoleToInstanceProfile"
        | "iam:RemoveRoleFromInstanceProfile"
        | "iam:DeleteInstanceProfile" => {
            let name = request.param("InstanceProfileName")?;
            vec![Touched::existing(format!(
                "arn:aws:iam::{ACCOUNT}:instance-profile/{name}"
            ))]
        }
        "iam:CreateInstanceProfile" => vec![Touched {
            arn: format!(
                "arn:aws:iam::{ACCOUNT}:instance-profile/{}",
                request.param("InstanceProfileName")?
            ),
            request_tags: request.tags("Tags.member"),
            exists: false,
            template: None,
        }],
        "sqs:GetQueueUrl" | "sqs:ReceiveMessage" | "sqs:DeleteMessage" => {
            let queue = request
                .param("QueueName")
                .or_else(|| request.param("QueueUrl")?.rsplit('/').next())?;
            vec![Touched::existing(format!(
                "arn:aws:sqs:{REGION}:{ACCOUNT}:{queue}"
            ))]
        }
        _ => return None,
    };
    Some(touched)
}

/// The policy's statements, placeholders filled for this suite (`${ClusterName}` stays).
pub struct Policy {
    statements: Vec<Value>,
}

impl Policy {
    pub fn shipped() -> Self {
        Self::parse(POLICY)
    }

    pub fn parse(text: &str) -> Self {
        let text = text
            .replace("${AWS::Partition}", "aws")
            .replace("${AWS::Region}", REGION)
            .replace("${AWS::AccountId}", ACCOUNT);
        let document: Value = serde_json::from_str(&text).expect("the policy is JSON");
        let statements = document["Statement"]
            .as_array()
            .expect("the policy has statements")
            .clone();
        Self { statements }
    }

    /// `Ok` when the policy allows `request`; else which resource no statement allows.
    pub fn authorize(&self, request: &Request, tags: &dyn ResourceTags) -> Result<(), String> {
        if ALWAYS_ALLOWED.contains(&request.action.as_str()) {
            return Ok(());
        }
        let touched = touched(request).ok_or_else(|| {
            format!(
                "{}: the IAM policy check does not know what this action touches: a test's own \
                 set-up and assertions go through `setup_clients()`; a call of the provider's \
                 needs `touched` in aws/tests/moto/iam_policy.rs taught (and the policy, if it \
                 lacks the action)",
                request.action
            )
        })?;
        for resource in &touched {
            let resource_tags = if resource.exists {
                tags.tags(&resource.arn)
            } else {
                BTreeMap::new()
            };
            let request_tags = match &resource.template {
                Some(template) if resource.request_tags.is_empty() => {
                    let kind = resource.arn.rsplit_once(':').map(|(_, k)| k).unwrap_or("");
                    tags.template_tags(template, kind.trim_end_matches("/new"))
                }
                _ => resource.request_tags.clone(),
            };
            let cluster = cluster_of(&request_tags, &resource_tags);
            let context = Context {
                request_tags: &request_tags,
                resource_tags: &resource_tags,
                create_action: None,
                cluster: cluster.as_deref(),
            };
            self.allows(&request.action, &resource.arn, &context)
                .map_err(|why| format!("{}: {}: {why}", request.action, resource.arn))?;
            if !resource.exists && !request_tags.is_empty() {
                // Tagging on create is an authorisation of its own: EC2's CreateTags with the
                // creating action, IAM's Tag<Resource>.
                let (tag_action, create_action) = match request.action.split_once(':') {
                    Some(("iam", _)) => ("iam:TagInstanceProfile", None),
                    _ => ("ec2:CreateTags", request.action.strip_prefix("ec2:")),
                };
                let tagging = Context {
                    create_action,
                    ..context
                };
                self.allows(tag_action, &resource.arn, &tagging)
                    .map_err(|why| {
                        format!(
                            "{} (tag on create): {}: {why}",
                            request.action, resource.arn
                        )
                    })?;
            }
        }
        Ok(())
    }

    fn allows(&self, action: &str, arn: &str, context: &Context<'_>) -> Result<(), String> {
        let candidates: Vec<&Value> = self
            .statements
            .iter()
            .filter(|s| s["Effect"] == "Allow")
            .filter(|s| {
                strings(&s["Action"])
                    .iter()
                    .any(|a| wildcard::matches(a, action))
            })
            .filter(|s| {
                strings(&s["Resource"])
                    .iter()
                    .any(|r| wildcard::matches(&bind(r, context.cluster), arn))
            })
            .collect();
        if candidates.is_empty() {
            return Err("no statement allows this action on this resource".into());
        }
        let mut reasons = Vec::new();
        for statement in candidates {
            match conditions_hold(&statement["Condition"], context) {
                Ok(()) => return Ok(()),
                Err(why) => reasons.push(format!(
                    "{}: {why}",
                    statement["Sid"].as_str().unwrap_or("statement")
                )),
            }
        }
        Err(reasons.join("; "))
    }
}

/// What a statement's conditions are evaluated against.
#[derive(Clone, Copy)]
struct Context<'a> {
    request_tags: &'a BTreeMap<String, String>,
    resource_tags: &'a BTreeMap<String, String>,
    create_action: Option<&'a str>,
    cluster: Option<&'a str>,
}

fn cluster_of(
    request_tags: &BTreeMap<String, String>,
    resource_tags: &BTreeMap<String, String>,
) -> Option<String> {
    request_tags
        .keys()
        .chain(resource_tags.keys())
        .find_map(|k| k.strip_prefix(CLUSTER_TAG_PREFIX).map(str::to_owned))
}

/// `text` with `${ClusterName}` bound; unbound, it matches any one name (`*`).
fn bind(text: &str, cluster: Option<&str>) -> String {
    text.replace("${ClusterName}", cluster.unwrap_or("*"))
}

fn conditions_hold(conditions: &Value, context: &Context<'_>) -> Result<(), String> {
    let Some(operators) = conditions.as_object() else {
        return Ok(());
    };
    for (operator, tests) in operators {
        for (key, wanted) in tests.as_object().into_iter().flatten() {
            let key = bind(key, context.cluster);
            let actual = value_of(&key, context)?;
            let wanted: Vec<String> = strings(wanted)
                .iter()
                .map(|w| bind(w, context.cluster))
                .collect();
            if operator == "ForAllValues:StringEquals" && key == "aws:TagKeys" {
                // Every tag key the request sets must be one of the listed ones.
                if let Some(extra) = context.request_tags.keys().find(|k| !wanted.contains(k)) {
                    return Err(format!("{operator} {key}: {extra} is not among {wanted:?}"));
                }
                continue;
            }
            let holds = match (operator.as_str(), actual) {
                ("StringEqualsIfExists", None) => true,
                ("StringEquals" | "StringEqualsIfExists", Some(v)) => wanted.contains(&v),
                ("StringLike", Some(v)) => wanted.iter().any(|w| wildcard::matches(w, &v)),
                ("StringEquals" | "StringLike", None) => false,
                (other, _) => return Err(format!("condition operator {other} is not modelled")),
            };
            if !holds {
                return Err(format!("{operator} {key} {wanted:?} does not hold"));
            }
        }
    }
    Ok(())
}

/// The value of a condition key, `None` when the request or resource has none.
fn value_of(key: &str, context: &Context<'_>) -> Result<Option<String>, String> {
    if let Some(tag) = key.strip_prefix("aws:RequestTag/") {
        return Ok(context.request_tags.get(tag).cloned());
    }
    if let Some(tag) = key.strip_prefix("aws:ResourceTag/") {
        return Ok(context.resource_tags.get(tag).cloned());
    }
    match key {
        "ec2:CreateAction" => Ok(context.create_action.map(str::to_owned)),
        "aws:TagKeys" => Ok(None),
        "aws:RequestedRegion" => Ok(Some(REGION.to_owned())),
        "iam:PassedToService" => Ok(None),
        other => Err(format!("condition key {other} is not modelled")),
    }
}

fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tags(BTreeMap<String, String>);

    impl ResourceTags for Tags {
        fn tags(&self, _arn: &str) -> BTreeMap<String, String> {
            self.0.clone()
        }

        fn template_tags(&self, _template: &str, _kind: &str) -> BTreeMap<String, String> {
            BTreeMap::new()
        }
    }

    fn owned(cluster: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (format!("{CLUSTER_TAG_PREFIX}{cluster}"), "owned".to_owned()),
            ("eks:eks-cluster-name".to_owned(), cluster.to_owned()),
            ("karpenter.sh/nodepool".to_owned(), "default".to_owned()),
        ])
    }

    fn request(action: &str, params: &[(&str, &str)]) -> Request {
        Request {
            action: action.to_owned(),
            params: params
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn terminating_is_allowed_only_for_instances_the_cluster_owns() {
        let policy = Policy::shipped();
        let terminate = request("ec2:TerminateInstances", &[("InstanceId.1", "i-1")]);
        assert!(policy.authorize(&terminate, &Tags(owned("blue"))).is_ok());
        let someone_elses = Tags(BTreeMap::from([("Name".into(), "db".into())]));
        let refused = policy
            .authorize(&terminate, &someone_elses)
            .expect_err("an instance kerf did not launch");
        assert!(refused.contains("DeleteOwnedResources"), "{refused}");
    }

    #[test]
    fn a_fleet_must_tag_what_it_creates_with_the_cluster_and_nodepool() {
        let policy = Policy::shipped();
        let mut params = vec![(
            "LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateId",
            "lt-1",
        )];
        let kinds = ["fleet", "instance", "volume", "network-interface"];
        let keys: Vec<(String, String, String)> = kinds
            .iter()
            .enumerate()
            .map(|(n, kind)| {
                (
                    format!("TagSpecification.{}.ResourceType", n + 1),
                    kind.to_string(),
                    format!("TagSpecification.{}.Tag", n + 1),
                )
            })
            .collect();
        let tag_params: Vec<(String, String)> = keys
            .iter()
            .flat_map(|(type_key, kind, tag)| {
                let mut out = vec![(type_key.clone(), kind.clone())];
                for (m, (k, v)) in owned("blue").into_iter().enumerate() {
                    out.push((format!("{tag}.{}.Key", m + 1), k));
                    out.push((format!("{tag}.{}.Value", m + 1), v));
                }
                out
            })
            .collect();
        params.extend(tag_params.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let fleet = request("ec2:CreateFleet", &params);
        assert!(policy.authorize(&fleet, &Tags(owned("blue"))).is_ok());

        let untagged = request(
            "ec2:CreateFleet",
            &[(
                "LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateId",
                "lt-1",
            )],
        );
        let refused = policy
            .authorize(&untagged, &Tags(owned("blue")))
            .expect_err("nothing tagged");
        assert!(refused.contains("fleet/new"), "{refused}");
        let foreign_template = policy
            .authorize(&fleet, &Tags(BTreeMap::new()))
            .expect_err("a launch template kerf does not own");
        assert!(
            foreign_template.contains("launch-template/lt-1"),
            "{foreign_template}"
        );
    }

    #[test]
    fn an_action_the_checker_does_not_know_is_refused_with_what_to_do() {
        let refused = Policy::shipped()
            .authorize(&request("ec2:DeleteVpc", &[]), &Tags(BTreeMap::new()))
            .expect_err("unknown");
        assert!(
            refused.contains("needs `touched` in aws/tests/moto/iam_policy.rs taught"),
            "{refused}"
        );
    }

    #[test]
    fn form_values_are_decoded() {
        assert_eq!(decode("a%2Fb+c"), "a/b c");
    }
}
