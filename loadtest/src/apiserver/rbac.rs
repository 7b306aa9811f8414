//! Who may do what: bearer-token authentication and RBAC authorization, as the real API
//! server applies them to a ServiceAccount. Off until a test turns it on with
//! [`Access::enforce`]; then every request must carry a known token (401 otherwise) unless an
//! anonymous user is admitted ([`Access::admit_anonymous`], as a server with anonymous
//! authentication on), and a resource request is allowed only when a rule of a Role or
//! ClusterRole bound to the user (by a RoleBinding in the request's namespace, or a
//! ClusterRoleBinding) grants its verb on its resource (403 otherwise, in the real server's
//! words). Users in `system:masters` are allowed everything, as on a real cluster; discovery
//! is open to every authenticated user. The rules are read from the RBAC objects stored in
//! the emulator at each request, so a test applies a chart's rendered Roles and bindings like
//! any other object. Every refused request is recorded per user, so a test can name all a
//! client was refused, not just the first; and every granted rule a request used, so a test
//! can name the rules a client was granted and never needed ([`Access::unused_by`]). Usage is
//! kept per rule, verb, resource and group (not per request), so its size is bounded by the
//! roles, however long the server runs.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use serde_json::Value;

use super::error::{ApiError, Reason};
use super::registry::{Registry, all_objects};
use super::resources::GroupResource;
use super::store::StoredObject;

/// The group whose members may do anything.
pub const MASTERS: &str = "system:masters";

/// The resource of an RBAC kind (`ClusterRole` → `clusterroles`), to store a rendered
/// chart's RBAC objects with; `None` for any other kind.
pub fn plural(kind: &str) -> Option<&'static str> {
    match kind {
        "ClusterRole" => Some("clusterroles"),
        "ClusterRoleBinding" => Some("clusterrolebindings"),
        "Role" => Some("roles"),
        "RoleBinding" => Some("rolebindings"),
        _ => None,
    }
}

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

impl fmt::Display for Attributes {
    /// `get services "kube-dns" in API group "" in the namespace "kube-system"`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if let Some(name) = &self.name {
            write!(f, " {name:?}")?;
        }
        write!(f, " in API group {:?}", self.group)?;
        match &self.namespace {
            Some(ns) => write!(f, " in the namespace {ns:?}"),
            None => write!(f, " at the cluster scope"),
        }
    }
}

/// One verb on one resource of one group that a bound role's rule grants (a rule listing
/// several verbs, groups or resources grants each combination): what usage is kept by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Grant {
    /// `ClusterRole karpenter-core`, `Role kube-system/karpenter-dns`, or `ClusterRole
    /// view in default` for a ClusterRole a RoleBinding grants in one namespace.
    pub role: String,
    pub verb: String,
    pub group: String,
    pub resource: String,
    /// The rule's `resourceNames`; empty for any name.
    pub names: Vec<String>,
}

impl fmt::Display for Grant {
    /// `Role kube-system/karpenter-dns: get services named ["kube-dns"] in API group ""`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} {}", self.role, self.verb, self.resource)?;
        if !self.names.is_empty() {
            write!(f, " named {:?}", self.names)?;
        }
        write!(f, " in API group {:?}", self.group)
    }
}

/// Who authenticates: users by bearer token, and who a request without one is.
#[derive(Debug)]
struct Authentication {
    tokens: HashMap<String, User>,
    anonymous: Option<User>,
}

/// Tokens, enforcement, what each user was refused and which grants each used.
#[derive(Debug, Default)]
pub struct Access {
    authentication: RwLock<Option<Authentication>>,
    denied: Mutex<BTreeSet<(String, Attributes)>>,
    used: Mutex<HashSet<(String, Grant)>>,
    parsed: Parsed,
}

/// RBAC objects parsed once per write: every request of a user under RBAC reads all its
/// roles and bindings, and the store keeps only their JSON. By uid, with the
/// resourceVersion parsed (a write replaces the entry), so it holds one tree per RBAC object
/// ever stored.
#[derive(Debug, Default)]
struct Parsed(Mutex<HashMap<String, (u64, Arc<Value>)>>);

impl Parsed {
    fn of(&self, object: &StoredObject) -> Arc<Value> {
        let mut parsed = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match parsed.get(&object.attrs.uid) {
            Some((rv, value)) if *rv == object.rv => Arc::clone(value),
            _ => {
                let value = Arc::new(object.value());
                parsed.insert(object.attrs.uid.clone(), (object.rv, Arc::clone(&value)));
                value
            }
        }
    }
}

impl Access {
    /// Turns enforcement on with these bearer tokens.
    pub fn enforce(&self, tokens: HashMap<String, User>) {
        *self
            .authentication
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(Authentication {
            tokens,
            anonymous: None,
        });
    }

    /// Once enforced, a request without a token is `user` (a wrong token is still refused),
    /// as a server with anonymous authentication on makes it `system:anonymous`.
    pub fn admit_anonymous(&self, user: User) {
        if let Some(authentication) = self
            .authentication
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            authentication.anonymous = Some(user);
        }
    }

    /// The user of a request's `Authorization` header; `Ok(None)` while not enforced.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Option<User>, ApiError> {
        let authentication = self
            .authentication
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(authentication) = authentication.as_ref() else {
            return Ok(None);
        };
        let unauthorized = || ApiError::new(Reason::Unauthorized, "Unauthorized");
        let Some(header) = authorization else {
            return authentication
                .anonymous
                .clone()
                .map(Some)
                .ok_or_else(unauthorized);
        };
        header
            .strip_prefix("Bearer ")
            .and_then(|token| authentication.tokens.get(token.trim()))
            .cloned()
            .map(Some)
            .ok_or_else(unauthorized)
    }

    /// Allows `attrs` for `user` when a bound rule grants it, recording the grants that
    /// allowed it; records what it refuses.
    pub fn authorize(
        &self,
        registry: &Registry,
        user: &User,
        attrs: &Attributes,
    ) -> Result<(), ApiError> {
        if user.groups.iter().any(|g| g == MASTERS) {
            return Ok(());
        }
        let used: Vec<Grant> = bound_rules(
            registry,
            &self.parsed,
            user,
            Scope::Request(attrs.namespace.as_deref()),
        )
        .iter()
        .flat_map(|(role, rule)| rule.grants_for(role, attrs))
        .collect();
        if !used.is_empty() {
            let mut all = self.used.lock().unwrap_or_else(PoisonError::into_inner);
            for grant in used {
                all.insert((user.name.clone(), grant));
            }
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

    /// Every grant the roles bound to `user` (now, in any namespace) hold that no request of
    /// `user` has used so far, in order.
    pub fn unused_by(&self, registry: &Registry, user: &User) -> Vec<Grant> {
        let used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        let granted: BTreeSet<Grant> = bound_rules(registry, &self.parsed, user, Scope::Everywhere)
            .iter()
            .flat_map(|(role, rule)| rule.grants(role))
            .collect();
        granted
            .into_iter()
            .filter(|grant| !used.contains(&(user.name.clone(), grant.clone())))
            .collect()
    }
}

/// Which RoleBindings count.
#[derive(Clone, Copy)]
enum Scope<'a> {
    /// A request's: those of its namespace (none for a cluster-scoped request).
    Request(Option<&'a str>),
    /// Those of every namespace.
    Everywhere,
}

/// One PolicyRule.
struct Rule {
    verbs: Vec<String>,
    groups: Vec<String>,
    resources: Vec<String>,
    names: Vec<String>,
}

impl Rule {
    fn parse(rule: &Value) -> Self {
        let list = |key: &str| -> Vec<String> {
            rule[key]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        };
        Self {
            verbs: list("verbs"),
            groups: list("apiGroups"),
            resources: list("resources"),
            names: list("resourceNames"),
        }
    }

    /// Each verb, group and resource combination it grants, as `role`'s.
    fn grants(&self, role: &str) -> Vec<Grant> {
        self.combinations(role, |_| true, |_| true, |_| true)
    }

    /// The combinations that allow `attrs` (none when the rule does not).
    fn grants_for(&self, role: &str, attrs: &Attributes) -> Vec<Grant> {
        let name_ok = self.names.is_empty()
            || attrs
                .name
                .as_deref()
                .is_some_and(|name| self.names.iter().any(|n| n == name));
        if !name_ok {
            return Vec::new();
        }
        self.combinations(
            role,
            |v| matches(v, &attrs.verb),
            |g| matches(g, &attrs.group),
            |r| matches(r, &attrs.resource),
        )
    }

    fn combinations(
        &self,
        role: &str,
        verb: impl Fn(&str) -> bool,
        group: impl Fn(&str) -> bool,
        resource: impl Fn(&str) -> bool,
    ) -> Vec<Grant> {
        let mut out = Vec::new();
        for v in self.verbs.iter().filter(|v| verb(v)) {
            for g in self.groups.iter().filter(|g| group(g)) {
                for r in self.resources.iter().filter(|r| resource(r)) {
                    out.push(Grant {
                        role: role.to_owned(),
                        verb: v.clone(),
                        group: g.clone(),
                        resource: r.clone(),
                        names: self.names.clone(),
                    });
                }
            }
        }
        out
    }
}

/// Whether a rule's entry (`*` for any) covers `wanted`.
fn matches(entry: &str, wanted: &str) -> bool {
    entry == "*" || entry == wanted
}

/// The stored RBAC objects of kind `plural`, cluster-wide, in `namespace` or (`None` for a
/// namespaced kind) in every namespace.
fn rbac_objects(
    registry: &Registry,
    parsed: &Parsed,
    plural: &str,
    namespace: Option<&str>,
) -> Vec<Arc<Value>> {
    let gr = GroupResource::new("rbac.authorization.k8s.io", plural);
    let Some(mut target) = registry.target_of(&gr, namespace.unwrap_or("")) else {
        return Vec::new();
    };
    if namespace.is_none() {
        target.namespace = None;
    }
    all_objects(&target).iter().map(|o| parsed.of(o)).collect()
}

/// The rules that apply to `user` in `scope` (cluster-wide ones, plus the namespaces'), each
/// with the role it came from.
fn bound_rules(
    registry: &Registry,
    parsed: &Parsed,
    user: &User,
    scope: Scope<'_>,
) -> Vec<(String, Rule)> {
    let cluster_roles = rbac_objects(registry, parsed, "clusterroles", None);
    let cluster_role = |name: &str| {
        cluster_roles
            .iter()
            .find(|r| r["metadata"]["name"] == name)
            .map(|r| &**r)
    };
    let mut rules = Vec::new();
    for binding in rbac_objects(registry, parsed, "clusterrolebindings", None) {
        let name = binding["roleRef"]["name"].as_str().unwrap_or("");
        if binds(&binding, user)
            && let Some(role) = cluster_role(name)
        {
            rules.extend(role_rules(&format!("ClusterRole {name}"), role));
        }
    }
    let namespace = match scope {
        Scope::Request(None) => return rules,
        Scope::Request(Some(ns)) => Some(ns),
        Scope::Everywhere => None,
    };
    let roles = rbac_objects(registry, parsed, "roles", namespace);
    for binding in rbac_objects(registry, parsed, "rolebindings", namespace) {
        if !binds(&binding, user) {
            continue;
        }
        let ns = binding["metadata"]["namespace"].as_str().unwrap_or("");
        let name = binding["roleRef"]["name"].as_str().unwrap_or("");
        let (label, role) = match binding["roleRef"]["kind"].as_str() {
            Some("ClusterRole") => (format!("ClusterRole {name} in {ns}"), cluster_role(name)),
            _ => (
                format!("Role {ns}/{name}"),
                roles
                    .iter()
                    .find(|r| r["metadata"]["name"] == name && r["metadata"]["namespace"] == ns)
                    .map(|r| &**r),
            ),
        };
        rules.extend(role.map(|r| role_rules(&label, r)).unwrap_or_default());
    }
    rules
}

fn role_rules(label: &str, role: &Value) -> Vec<(String, Rule)> {
    role["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|rule| (label.to_owned(), Rule::parse(rule)))
        .collect()
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

    fn grants(rule: &Value, attrs: &Attributes) -> bool {
        !Rule::parse(rule)
            .grants_for("ClusterRole r", attrs)
            .is_empty()
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
    fn a_request_uses_only_the_combination_that_allows_it() {
        let rule = Rule::parse(
            &json!({"apiGroups": ["", "apps"], "resources": ["pods", "nodes"], "verbs": ["list", "watch"]}),
        );
        assert_eq!(rule.grants("ClusterRole r").len(), 8);
        let used = rule.grants_for("ClusterRole r", &attrs("watch", "nodes", None));
        assert_eq!(
            used.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["ClusterRole r: watch nodes in API group \"\""]
        );
        let any = Rule::parse(&json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}));
        assert_eq!(
            any.grants_for("ClusterRole r", &attrs("get", "pods", None))
                .len(),
            1
        );
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

    #[test]
    fn an_admitted_anonymous_user_is_who_a_request_without_a_token_is() {
        let access = Access::default();
        let anonymous = User {
            name: "system:anonymous".to_owned(),
            groups: vec![MASTERS.to_owned()],
        };
        access.admit_anonymous(anonymous.clone());
        assert_eq!(
            access.authenticate(None).expect("open"),
            None,
            "admitting does not turn enforcement on"
        );
        access.enforce(HashMap::new());
        access.admit_anonymous(anonymous.clone());
        assert_eq!(
            access.authenticate(None).expect("anonymous"),
            Some(anonymous)
        );
        assert!(
            access.authenticate(Some("Bearer wrong")).is_err(),
            "a wrong token is refused, not made anonymous"
        );
    }

    #[tokio::test]
    async fn usage_names_each_bound_grant_no_request_of_the_user_needed() {
        let server = super::super::ApiServer::start(super::super::ServerConfig::default())
            .await
            .expect("emulator starts");
        let cluster = server.cluster();
        let rbac = "rbac.authorization.k8s.io/v1";
        let subjects =
            json!([{"kind": "ServiceAccount", "name": "sa", "namespace": "kube-system"}]);
        for (plural, object) in [
            (
                "clusterroles",
                json!({"metadata": {"name": "reader"}, "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]}),
            ),
            (
                "clusterrolebindings",
                json!({"metadata": {"name": "reader"}, "subjects": subjects,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"}}),
            ),
            (
                "roles",
                json!({"metadata": {"name": "dns", "namespace": "kube-system"}, "rules": [
                {"apiGroups": [""], "resources": ["services"], "resourceNames": ["kube-dns"], "verbs": ["get"]}]}),
            ),
            (
                "rolebindings",
                json!({"metadata": {"name": "dns", "namespace": "kube-system"}, "subjects": subjects,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "dns"}}),
            ),
            // Bound to nobody: granted to no one, so never unused.
            (
                "clusterroles",
                json!({"metadata": {"name": "admin"}, "rules": [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
            ),
        ] {
            cluster.create(rbac, plural, object).expect("RBAC object");
        }
        let sa = User::service_account("kube-system", "sa");
        let other = User::service_account("default", "other");
        let access = &server.access;
        let registry = &server.registry;
        let list_pods = Attributes {
            namespace: Some("default".to_owned()),
            ..attrs("list", "pods", None)
        };
        let unused = |user: &User| -> Vec<String> {
            access
                .unused_by(registry, user)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(
            unused(&sa),
            [
                "ClusterRole reader: list pods in API group \"\"",
                "ClusterRole reader: watch pods in API group \"\"",
                "Role kube-system/dns: get services named [\"kube-dns\"] in API group \"\"",
            ]
        );
        assert!(access.authorize(registry, &other, &list_pods).is_err());
        assert!(access.authorize(registry, &sa, &list_pods).is_ok());
        let get_dns = Attributes {
            namespace: Some("kube-system".to_owned()),
            ..attrs("get", "services", Some("kube-dns"))
        };
        assert!(access.authorize(registry, &sa, &get_dns).is_ok());
        assert_eq!(
            unused(&sa),
            ["ClusterRole reader: watch pods in API group \"\""]
        );
        assert!(unused(&other).is_empty(), "nothing is bound to other");
        server.shutdown().await;
    }

    #[tokio::test]
    async fn a_changed_role_applies_to_the_next_request() {
        let server = super::super::ApiServer::start(super::super::ServerConfig::default())
            .await
            .expect("emulator starts");
        let cluster = server.cluster();
        let rbac = "rbac.authorization.k8s.io/v1";
        let pods = |verbs: Value| json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}]});
        let mut role = pods(json!(["list"]));
        role["metadata"] = json!({"name": "reader"});
        cluster.create(rbac, "clusterroles", role).expect("role");
        cluster
            .create(rbac, "clusterrolebindings", json!({"metadata": {"name": "reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "kube-system"}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"}}))
            .expect("binding");
        let sa = User::service_account("kube-system", "sa");
        let (access, registry) = (&server.access, &server.registry);
        let list = attrs("list", "pods", None);
        let watch = attrs("watch", "pods", None);
        assert!(access.authorize(registry, &sa, &list).is_ok());
        assert!(access.authorize(registry, &sa, &watch).is_err());
        // Read once (and kept parsed); the new rules count from the next request on.
        let patch = pods(json!(["watch"]));
        let kind = super::super::registry::PatchKind::Merge;
        cluster
            .patch(rbac, "clusterroles", None, "reader", kind, &patch)
            .expect("role changed");
        assert!(access.authorize(registry, &sa, &watch).is_ok());
        assert!(access.authorize(registry, &sa, &list).is_err());
        server.shutdown().await;
    }
}
