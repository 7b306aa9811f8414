//! Who may do what: bearer-token authentication and RBAC authorization, as the real API
//! server applies them to a ServiceAccount. Off until a test turns it on with
//! [`Access::enforce`]; then every request must carry a known token (401 otherwise), and a
//! resource request is allowed only when a rule of a Role or ClusterRole bound to the user
//! (by a RoleBinding in the request's namespace, or a ClusterRoleBinding) grants its verb on
//! its resource (403 otherwise, in the real server's words). Users in `system:masters` are
//! allowed everything, as on a real cluster; discovery is open to every authenticated user.
//! The rules are read from the RBAC objects stored in the emulator at each request, so a test
//! applies a chart's rendered Roles and bindings like any other object. Every refused request
//! is recorded per user, so a test can name all a client was refused, not just the first.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError, RwLock};

use serde_json::Value;

use super::error::{ApiError, Reason};
use super::registry::{Registry, all_objects};
use super::resources::GroupResource;

/// The group whose members may do anything.
pub const MASTERS: &str = "system:masters";

/// An authenticated user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    /// The user a ServiceAccount's token authenticates as.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        Self {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".to_owned(),
            ],
        }
    }
}

/// What a resource request asks to do, in RBAC's terms.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Attributes {
    pub verb: String,
    pub group: String,
    /// `pods`, or `pods/eviction` with a subresource.
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// Tokens, enforcement and what each user was refused.
#[derive(Debug, Default)]
pub struct Access {
    tokens: RwLock<Option<HashMap<String, User>>>,
    denied: Mutex<BTreeSet<(String, Attributes)>>,
}

impl Access {
    /// Turns enforcement on with these bearer tokens.
    pub fn enforce(&self, tokens: HashMap<String, User>) {
        *self.tokens.write().unwrap_or_else(PoisonError::into_inner) = Some(tokens);
    }

    /// The user of a request's `Authorization` header; `Ok(None)` while not enforced.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Option<User>, ApiError> {
        let tokens = self.tokens.read().unwrap_or_else(PoisonError::into_inner);
        let Some(tokens) = tokens.as_ref() else {
            return Ok(None);
        };
        authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .and_then(|token| tokens.get(token.trim()))
            .cloned()
            .map(Some)
            .ok_or_else(|| ApiError::new(Reason::Unauthorized, "Unauthorized"))
    }

    /// Allows `attrs` for `user` when a bound rule grants it; records what it refuses.
    pub fn authorize(
        &self,
        registry: &Registry,
        user: &User,
        attrs: &Attributes,
    ) -> Result<(), ApiError> {
        if user.groups.iter().any(|g| g == MASTERS) {
            return Ok(());
        }
        let allowed = rules_of(registry, user, attrs.namespace.as_deref())
            .iter()
            .any(|rule| grants(rule, attrs));
        if allowed {
            return Ok(());
        }
        self.denied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((user.name.clone(), attrs.clone()));
        Err(forbidden(user, attrs))
    }

    /// Everything `user` was refused so far.
    pub fn denied_to(&self, user: &str) -> Vec<Attributes> {
        self.denied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(who, _)| who == user)
            .map(|(_, attrs)| attrs.clone())
            .collect()
    }
}

/// The rules that apply to `user` in `namespace` (cluster-wide ones, plus the namespace's).
fn rules_of(registry: &Registry, user: &User, namespace: Option<&str>) -> Vec<Value> {
    let objects = |plural: &str, ns: Option<&str>| -> Vec<Value> {
        let gr = GroupResource::new("rbac.authorization.k8s.io", plural);
        registry
            .target_of(&gr, ns.unwrap_or(""))
            .map(|t| all_objects(&t).iter().map(|o| (*o.value).clone()).collect())
            .unwrap_or_default()
    };
    let cluster_roles = objects("clusterroles", None);
    let cluster_role = |name: &str| cluster_roles.iter().find(|r| r["metadata"]["name"] == name);
    let mut rules = Vec::new();
    for binding in objects("clusterrolebindings", None) {
        if binds(&binding, user)
            && let Some(role) = cluster_role(binding["roleRef"]["name"].as_str().unwrap_or(""))
        {
            rules.extend(role_rules(role));
        }
    }
    let Some(ns) = namespace else {
        return rules;
    };
    let roles = objects("roles", Some(ns));
    for binding in objects("rolebindings", Some(ns)) {
        if !binds(&binding, user) {
            continue;
        }
        let name = binding["roleRef"]["name"].as_str().unwrap_or("");
        let role = match binding["roleRef"]["kind"].as_str() {
            Some("ClusterRole") => cluster_role(name),
            _ => roles.iter().find(|r| r["metadata"]["name"] == name),
        };
        rules.extend(role.map(role_rules).unwrap_or_default());
    }
    rules
}

fn role_rules(role: &Value) -> Vec<Value> {
    role["rules"].as_array().cloned().unwrap_or_default()
}

/// Whether a binding's subjects include `user`.
fn binds(binding: &Value, user: &User) -> bool {
    binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|subject| {
            let name = subject["name"].as_str().unwrap_or("");
            match subject["kind"].as_str() {
                Some("User") => name == user.name,
                Some("Group") => user.groups.iter().any(|g| g == name),
                Some("ServiceAccount") => {
                    let ns = subject["namespace"].as_str().unwrap_or("");
                    user.name == format!("system:serviceaccount:{ns}:{name}")
                }
                _ => false,
            }
        })
}

/// Whether one PolicyRule grants `attrs`.
fn grants(rule: &Value, attrs: &Attributes) -> bool {
    let list = |key: &str| -> Vec<&str> {
        rule[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect()
    };
    let has = |key: &str, wanted: &str| list(key).iter().any(|v| *v == "*" || *v == wanted);
    let names = list("resourceNames");
    let name_ok = names.is_empty()
        || attrs
            .name
            .as_deref()
            .is_some_and(|name| names.contains(&name));
    has("verbs", &attrs.verb)
        && has("apiGroups", &attrs.group)
        && has("resources", &attrs.resource)
        && name_ok
}

fn forbidden(user: &User, attrs: &Attributes) -> ApiError {
    let target = match &attrs.name {
        Some(name) => format!("{} {name:?}", attrs.resource),
        None => attrs.resource.clone(),
    };
    let scope = match &attrs.namespace {
        Some(ns) => format!("in the namespace {ns:?}"),
        None => "at the cluster scope".to_owned(),
    };
    ApiError::new(
        Reason::Forbidden,
        format!(
            "{target} is forbidden: User {:?} cannot {} resource {:?} in API group {:?} {scope}",
            user.name, attrs.verb, attrs.resource, attrs.group
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs(verb: &str, resource: &str, name: Option<&str>) -> Attributes {
        Attributes {
            verb: verb.into(),
            group: String::new(),
            resource: resource.into(),
            namespace: None,
            name: name.map(str::to_owned),
        }
    }

    #[test]
    fn a_rule_grants_its_verbs_groups_resources_and_names_only() {
        let rule = json!({"apiGroups": [""], "resources": ["services"], "resourceNames": ["kube-dns"], "verbs": ["get"]});
        assert!(grants(&rule, &attrs("get", "services", Some("kube-dns"))));
        assert!(!grants(&rule, &attrs("get", "services", Some("other"))));
        assert!(!grants(&rule, &attrs("list", "services", None)));
        assert!(!grants(&rule, &attrs("get", "pods", Some("kube-dns"))));
        let sub = json!({"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]});
        assert!(grants(&sub, &attrs("create", "pods/eviction", Some("p"))));
        assert!(!grants(&sub, &attrs("create", "pods", None)));
    }

    #[test]
    fn service_account_subjects_bind_the_account_user() {
        let binding = json!({"subjects": [{"kind": "ServiceAccount", "name": "karpenter", "namespace": "kube-system"}]});
        assert!(binds(
            &binding,
            &User::service_account("kube-system", "karpenter")
        ));
        assert!(!binds(
            &binding,
            &User::service_account("default", "karpenter")
        ));
    }

    #[test]
    fn without_enforcement_nobody_is_asked_for_a_token() {
        let access = Access::default();
        assert_eq!(access.authenticate(None).expect("open"), None);
        access.enforce(HashMap::from([(
            "t".to_owned(),
            User::service_account("kube-system", "karpenter"),
        )]));
        assert!(access.authenticate(None).is_err());
        assert!(access.authenticate(Some("Bearer wrong")).is_err());
        assert!(
            access
                .authenticate(Some("Bearer t"))
                .expect("known")
                .is_some()
        );
    }
}
