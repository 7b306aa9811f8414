//! The CRDs' `x-kubernetes-validations` (CEL) rules, implemented in Rust. Each rule is found
//! by the message the CRD gives it, so the message a user sees is upstream's own; a test
//! walks every rule of the vendored CRDs and fails if one has no implementation here.
//! Rules over lists and maps report the offending item (`[2]`, `[key]`) rather than the
//! whole list, which is where the API server would point if it could.

use super::names::{KARPENTER_AWS_ALLOWED, KARPENTER_SH_ALLOWED, cel_label_domain};
use crate::labels;
use serde_json::Value;

/// Where below the rule's node a rule failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Locus {
    Whole,
    Index(usize),
    Key(String),
}

type Check = Box<dyn Fn(&Value) -> Vec<Locus> + Send + Sync>;
type TransitionCheck = Box<dyn Fn(&Value, &Value) -> bool + Send + Sync>;

/// How a rule is enforced.
pub enum Rule {
    /// Evaluated against the object; returns where it failed (empty: passed).
    Check(Check),
    /// Compares with the stored object (`self`, `oldSelf`): only meaningful on update, and
    /// only where the old object has the node.
    Transition(TransitionCheck),
}

fn transition(f: impl Fn(&Value, &Value) -> bool + Send + Sync + 'static) -> Option<Rule> {
    Some(Rule::Transition(Box::new(f)))
}

fn check(f: impl Fn(&Value) -> Vec<Locus> + Send + Sync + 'static) -> Option<Rule> {
    Some(Rule::Check(Box::new(f)))
}

/// A whole-node predicate.
fn holds(f: impl Fn(&Value) -> bool + Send + Sync + 'static) -> Option<Rule> {
    check(move |v| if f(v) { Vec::new() } else { vec![Locus::Whole] })
}

/// `self.all(x, p(x))` over a list: the failing items.
fn each_item(f: impl Fn(&Value) -> bool + Send + Sync + 'static) -> Option<Rule> {
    check(move |v| {
        items(v)
            .iter()
            .enumerate()
            .filter(|(_, x)| !f(x))
            .map(|(i, _)| Locus::Index(i))
            .collect()
    })
}

/// A predicate over label keys, applied to a key string or to every key of a map.
fn each_key(f: impl Fn(&str) -> bool + Send + Sync + 'static) -> Option<Rule> {
    check(move |v| match v {
        Value::String(key) => {
            if f(key) {
                Vec::new()
            } else {
                vec![Locus::Whole]
            }
        }
        Value::Object(map) => map
            .keys()
            .filter(|k| !f(k))
            .map(|k| Locus::Key(k.clone()))
            .collect(),
        _ => Vec::new(),
    })
}

/// `self.all(k, p(k, self[k]))` over a map.
fn each_entry(f: impl Fn(&str, &Value) -> bool + Send + Sync + 'static) -> Option<Rule> {
    check(move |v| {
        v.as_object()
            .into_iter()
            .flatten()
            .filter(|(k, x)| !f(k, x))
            .map(|(k, _)| Locus::Key(k.clone()))
            .collect()
    })
}

pub(crate) fn has(v: &Value, field: &str) -> bool {
    v.get(field).is_some_and(|x| !x.is_null())
}

pub(crate) fn items(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or_default()
}

fn alias_family(alias: &str) -> &str {
    alias.split('@').next().unwrap_or_default()
}

/// The implementation of the CRD rule with this message, if kerf has one.
pub fn rule_for(message: &str) -> Option<Rule> {
    requirement_rule(message)
        .or_else(|| alpha_rule(message))
        .or_else(|| nodepool_rule(message))
        .or_else(|| ami_rule(message))
        .or_else(|| ec2nodeclass_rule(message))
        .or_else(|| selector_rule(message))
        .or_else(|| tag_rule(message))
}

/// NodeOverlay's and CapacityBuffer's own rules.
fn alpha_rule(message: &str) -> Option<Rule> {
    match message {
        "requirements with operator 'NotIn' must have a value defined" => {
            each_item(|x| text(x, "operator") != "NotIn" || !items(&x["values"]).is_empty())
        }
        "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value" => {
            each_item(|x| {
                !matches!(text(x, "operator"), "Gt" | "Lt" | "Gte" | "Lte")
                    || matches!(items(&x["values"]), [v] if v.as_str().and_then(cel_int).is_some_and(|n| n >= 0))
            })
        }
        "cannot set both 'price' and 'priceAdjustment'" => {
            holds(|v| !(has(v, "price") && has(v, "priceAdjustment")))
        }
        "invalid resource restricted" => {
            each_key(|k| !crate::api::nodeoverlay::RESTRICTED_RESOURCES.contains(&k))
        }
        "If podTemplateRef is set, replicas or limits must also be set" => {
            holds(|v| !has(v, "podTemplateRef") || has(v, "replicas") || has(v, "limits"))
        }
        "You must define either PodTemplateRef or ScalableRef, but not both" => {
            holds(|v| !(has(v, "podTemplateRef") && has(v, "scalableRef")))
        }
        _ => None,
    }
}

fn requirement_rule(message: &str) -> Option<Rule> {
    match message {
        r#"label domain "karpenter.sh" is restricted"# => each_key(|k| {
            KARPENTER_SH_ALLOWED.contains(&k) || !cel_label_domain(k).ends_with(labels::GROUP)
        }),
        r#"label domain "karpenter.k8s.aws" is restricted"# => each_key(|k| {
            KARPENTER_AWS_ALLOWED.contains(&k) || !cel_label_domain(k).ends_with(labels::AWS_GROUP)
        }),
        r#"label "karpenter.sh/nodepool" is restricted"# => each_key(|k| k != labels::NODEPOOL),
        r#"label "kubernetes.io/hostname" is restricted"# => each_key(|k| k != labels::HOSTNAME),
        "requirements with operator 'In' must have a value defined" => {
            each_item(|x| text(x, "operator") != "In" || !items(&x["values"]).is_empty())
        }
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value" => {
            each_item(|x| {
                !matches!(text(x, "operator"), "Gt" | "Lt" | "Gte" | "Lte")
                    || matches!(items(&x["values"]), [v] if v.as_str().and_then(cel_int).is_some_and(|n| n >= 0))
            })
        }
        "requirements with 'minValues' must have at least that many values specified in the 'values' field" => {
            each_item(|x| {
                let Some(min) = x.get("minValues").and_then(Value::as_i64) else {
                    return true;
                };
                text(x, "operator") != "In" || items(&x["values"]).len() as i64 >= min
            })
        }
        "group may not be empty"
        | "kind may not be empty"
        | "name may not be empty"
        | "role cannot be empty"
        | "instanceProfile cannot be empty" => holds(|v| v.as_str() != Some("")),
        _ => None,
    }
}

/// CEL's `int(string)`: an optionally signed base-10 int64.
fn cel_int(s: &str) -> Option<i64> {
    s.parse().ok()
}

fn nodepool_rule(message: &str) -> Option<Rule> {
    match message {
        "'schedule' must be set with 'duration'" => {
            each_item(|x| has(x, "schedule") == has(x, "duration"))
        }
        "only 'limits.nodes' is supported on static NodePools" => holds(|spec| {
            let limits = spec.get("limits").and_then(Value::as_object);
            !has(spec, "replicas")
                || limits.is_none_or(|l| l.is_empty() || (l.len() == 1 && l.contains_key("nodes")))
        }),
        "'weight' is not supported on static NodePools" => {
            holds(|spec| !has(spec, "replicas") || !has(spec, "weight"))
        }
        "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes" => {
            transition(|new, old| has(new, "replicas") == has(old, "replicas"))
        }
        "nodeClassRef.group is immutable" => {
            transition(|new, old| new.get("group") == old.get("group"))
        }
        "nodeClassRef.kind is immutable" => {
            transition(|new, old| new.get("kind") == old.get("kind"))
        }
        "spec is immutable" => transition(|new, old| new == old),
        _ => None,
    }
}

const ALIAS_FAMILIES: [&str; 6] = [
    "al2",
    "al2023",
    "bottlerocket",
    "windows2019",
    "windows2022",
    "windows2025",
];
const WINDOWS_ALIAS_FAMILIES: [&str; 3] = ["windows2019", "windows2022", "windows2025"];

fn ami_rule(message: &str) -> Option<Rule> {
    match message {
        "'alias' is improperly formatted, must match the format 'family@version'" => {
            holds(|v| v.as_str().is_some_and(is_alias_shaped))
        }
        "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'" => {
            holds(|v| ALIAS_FAMILIES.contains(&alias_family(v.as_str().unwrap_or_default())))
        }
        "windows families may only specify version 'latest'" => holds(|v| {
            let alias = v.as_str().unwrap_or_default();
            !WINDOWS_ALIAS_FAMILIES.contains(&alias_family(alias))
                || alias.split('@').nth(1) == Some("latest")
        }),
        "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']" => {
            each_item(|x| {
                ["tags", "id", "name", "alias", "ssmParameter"]
                    .iter()
                    .any(|f| has(x, f))
            })
        }
        "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms" => {
            each_item(|x| {
                !(has(x, "id") && ["alias", "tags", "name", "owner"].iter().any(|f| has(x, f)))
            })
        }
        "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms" => {
            each_item(|x| {
                !(has(x, "alias") && ["id", "tags", "name", "owner"].iter().any(|f| has(x, f)))
            })
        }
        "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms" => {
            holds(|v| !(items(v).iter().any(|x| has(x, "alias")) && items(v).len() != 1))
        }
        "must specify amiFamily if amiSelectorTerms does not contain an alias" => holds(|spec| {
            items(&spec["amiSelectorTerms"])
                .iter()
                .any(|x| has(x, "alias"))
                || has(spec, "amiFamily")
        }),
        _ => alias_family_rule(message),
    }
}

/// `^[a-zA-Z0-9]+@.+$`
fn is_alias_shaped(alias: &str) -> bool {
    match alias.split_once('@') {
        Some((family, version)) => {
            !family.is_empty()
                && family.chars().all(|c| c.is_ascii_alphanumeric())
                && !version.is_empty()
        }
        None => false,
    }
}

/// "if set, amiFamily must be 'X' or 'Custom' when using an X alias", one per family.
fn alias_family_rule(message: &str) -> Option<Rule> {
    let (family, alias) = [
        ("AL2", "al2"),
        ("AL2023", "al2023"),
        ("Bottlerocket", "bottlerocket"),
        ("Windows2019", "windows2019"),
        ("Windows2022", "windows2022"),
        ("Windows2025", "windows2025"),
    ]
    .into_iter()
    .find(|(family, _)| {
        let article = if *family == "AL2" || *family == "AL2023" { "an" } else { "a" };
        message == format!("if set, amiFamily must be '{family}' or 'Custom' when using {article} {family} alias")
    })?;
    holds(move |spec| {
        let uses_alias = items(&spec["amiSelectorTerms"])
            .iter()
            .filter_map(|x| x.get("alias").and_then(Value::as_str))
            .any(|a| alias_family_prefix(a) == alias);
        let set = spec.get("amiFamily").and_then(Value::as_str);
        set.is_none() || !uses_alias || set == Some("Custom") || set == Some(family)
    })
}

/// CEL's `alias.find('^[^@]+')`: the leading run of non-`@` characters.
fn alias_family_prefix(alias: &str) -> &str {
    alias.split('@').next().unwrap_or_default()
}

fn ec2nodeclass_rule(message: &str) -> Option<Rule> {
    match message {
        "must specify exactly one of ['role', 'instanceProfile']" => {
            holds(|spec| has(spec, "role") != has(spec, "instanceProfile"))
        }
        "must have only one blockDeviceMappings with rootVolume" => holds(|v| {
            items(v)
                .iter()
                .filter(|x| x.get("rootVolume").and_then(Value::as_bool) == Some(true))
                .count()
                <= 1
        }),
        "snapshotID or volumeSize must be defined" => {
            holds(|ebs| has(ebs, "snapshotID") || has(ebs, "volumeSize"))
        }
        "snapshotID must be set when volumeInitializationRate is set" => holds(|ebs| {
            !has(ebs, "volumeInitializationRate")
                || (has(ebs, "snapshotID") && !text(ebs, "snapshotID").is_empty())
        }),
        "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set" => {
            holds(|v| {
                ["tcpEstablishedTimeout", "udpStreamTimeout", "udpTimeout"]
                    .iter()
                    .any(|f| has(v, f))
            })
        }
        "networkInterfaces must include a primary interface with interfaceType='interface'" => {
            holds(|v| {
                items(v).is_empty()
                    || items(v).iter().any(|x| {
                        x["deviceIndex"] == 0
                            && x["networkCardIndex"] == 0
                            && text(x, "interfaceType") == "interface"
                    })
            })
        }
        "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card" => {
            check(duplicate_interfaces)
        }
        "expected at least one, got none, ['name', 'id']" => {
            holds(|v| has(v, "name") || has(v, "id"))
        }
        "'name' and 'id' are mutually exclusive" => holds(|v| !(has(v, "name") && has(v, "id"))),
        _ => None,
    }
}

fn duplicate_interfaces(v: &Value) -> Vec<Locus> {
    let list = items(v);
    let same_card = |a: &Value, b: &Value| a["networkCardIndex"] == b["networkCardIndex"];
    list.iter()
        .enumerate()
        .filter(|(_, x)| {
            let same_slot = list
                .iter()
                .filter(|y| same_card(x, y) && x["deviceIndex"] == y["deviceIndex"])
                .count();
            let efa_on_card = list
                .iter()
                .filter(|y| same_card(x, y) && text(y, "interfaceType") == "efa-only")
                .count();
            same_slot != 1 || (text(x, "interfaceType") == "efa-only" && efa_on_card != 1)
        })
        .map(|(i, _)| Locus::Index(i))
        .collect()
}

fn selector_rule(message: &str) -> Option<Rule> {
    match message {
        "securityGroupSelectorTerms cannot be empty" | "subnetSelectorTerms cannot be empty" => {
            holds(|v| !items(v).is_empty())
        }
        "expected at least one, got none, ['tags', 'id', 'name']" => {
            each_item(|x| ["tags", "id", "name"].iter().any(|f| has(x, f)))
        }
        "expected at least one, got none, ['tags', 'id']" => {
            each_item(|x| has(x, "tags") || has(x, "id"))
        }
        "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']" => {
            each_item(|x| {
                ["tags", "id", "instanceMatchCriteria"]
                    .iter()
                    .any(|f| has(x, f))
            })
        }
        // These three are `!self.all(...)` upstream: they reject the list only when every
        // term combines the exclusive field with another one.
        "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term" => {
            unless_all(true, |x| has(x, "id") && (has(x, "tags") || has(x, "name")))
        }
        "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term" => {
            unless_all(true, |x| has(x, "name") && (has(x, "tags") || has(x, "id")))
        }
        "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term" => {
            unless_all(true, |x| has(x, "id") && has(x, "tags"))
        }
        "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term" => {
            unless_all(false, |x| {
                has(x, "id")
                    && ["tags", "ownerID", "instanceMatchCriteria"]
                        .iter()
                        .any(|f| has(x, f))
            })
        }
        _ => None,
    }
}

/// `!self.all(x, p(x))`. CEL's `all` over an empty list is true, so upstream's rule rejects
/// an empty list too; where a `cannot be empty` rule already reports that, `empty_reported`
/// keeps this one quiet rather than blaming exclusivity for a list with no terms.
fn unless_all(
    empty_reported: bool,
    f: impl Fn(&Value) -> bool + Send + Sync + 'static,
) -> Option<Rule> {
    holds(move |v| (empty_reported && items(v).is_empty()) || !items(v).iter().all(&f))
}

fn tag_rule(message: &str) -> Option<Rule> {
    let restricted_exact = |key: &'static str| each_entry(move |k, _| k != key);
    match message {
        "empty tag keys or values aren't supported" => {
            each_entry(|k, v| !k.is_empty() && v.as_str() != Some(""))
        }
        "empty tag keys aren't supported" => each_entry(|k, _| !k.is_empty()),
        "tag contains a restricted tag matching eks:eks-cluster-name" => {
            restricted_exact("eks:eks-cluster-name")
        }
        "tag contains a restricted tag matching kubernetes.io/cluster/" => {
            each_entry(|k, _| !k.starts_with("kubernetes.io/cluster"))
        }
        "tag contains a restricted tag matching karpenter.sh/nodepool" => {
            restricted_exact(labels::NODEPOOL)
        }
        "tag contains a restricted tag matching karpenter.sh/nodeclaim" => {
            restricted_exact("karpenter.sh/nodeclaim")
        }
        "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass" => {
            restricted_exact(labels::EC2NODECLASS)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(message: &str, v: Value) -> Vec<Locus> {
        match rule_for(message).expect("rule exists") {
            Rule::Check(f) => f(&v),
            Rule::Transition(_) => panic!("transition rule"),
        }
    }

    fn transits(message: &str, new: Value, old: Value) -> bool {
        match rule_for(message).expect("rule exists") {
            Rule::Transition(f) => f(&new, &old),
            Rule::Check(_) => panic!("not a transition rule"),
        }
    }

    #[test]
    fn static_and_dynamic_pools_do_not_turn_into_each_other() {
        let rule = "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes";
        assert!(transits(
            rule,
            json!({"replicas": 3}),
            json!({"replicas": 1})
        ));
        assert!(transits(rule, json!({}), json!({"weight": 2})));
        assert!(!transits(rule, json!({"replicas": 3}), json!({})));
        assert!(!transits(rule, json!({}), json!({"replicas": 0})));
        assert!(!transits(
            "spec is immutable",
            json!({"a": 1}),
            json!({"a": 2})
        ));
        assert!(transits(
            "nodeClassRef.kind is immutable",
            json!({"kind": "K", "name": "b"}),
            json!({"kind": "K", "name": "a"})
        ));
        let limits = "only 'limits.nodes' is supported on static NodePools";
        assert!(run(limits, json!({"replicas": 1, "limits": {"nodes": "3"}})).is_empty());
        assert_eq!(
            run(
                limits,
                json!({"replicas": 1, "limits": {"nodes": "3", "cpu": "1"}})
            ),
            [Locus::Whole]
        );
        assert!(run(limits, json!({"limits": {"nodes": "3", "cpu": "1"}})).is_empty());
        assert_eq!(
            run(
                "'weight' is not supported on static NodePools",
                json!({"replicas": 1, "weight": 5})
            ),
            [Locus::Whole]
        );
    }

    #[test]
    fn karpenter_sh_domain_rule_matches_cel_find_semantics() {
        let m = r#"label domain "karpenter.sh" is restricted"#;
        assert!(run(m, json!("karpenter.sh/capacity-type")).is_empty());
        assert!(run(m, json!("example.com/x")).is_empty());
        assert_eq!(run(m, json!("karpenter.sh/foo")), [Locus::Whole]);
        assert_eq!(run(m, json!("sub.karpenter.sh/foo")), [Locus::Whole]);
        assert_eq!(run(m, json!("karpenter.sh")), [Locus::Whole]);
        assert_eq!(
            run(m, json!({"ok": "1", "karpenter.sh/x": "1"})),
            [Locus::Key("karpenter.sh/x".into())]
        );
    }

    #[test]
    fn numeric_operators_need_one_non_negative_integer() {
        let m = "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value";
        let reqs = json!([
            {"key": "a", "operator": "Gt", "values": ["2"]},
            {"key": "a", "operator": "Lt", "values": ["-1"]},
            {"key": "a", "operator": "Gte", "values": ["1", "2"]},
            {"key": "a", "operator": "Lte", "values": ["x"]},
            {"key": "a", "operator": "Lte"},
            {"key": "a", "operator": "In", "values": ["x"]}
        ]);
        assert_eq!(
            run(m, reqs),
            [
                Locus::Index(1),
                Locus::Index(2),
                Locus::Index(3),
                Locus::Index(4)
            ]
        );
    }

    #[test]
    fn alias_family_rules() {
        let m = "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias";
        let spec = |family: &str| json!({"amiFamily": family, "amiSelectorTerms": [{"alias": "al2023@latest"}]});
        assert!(run(m, spec("AL2023")).is_empty());
        assert!(run(m, spec("Custom")).is_empty());
        assert_eq!(run(m, spec("Bottlerocket")), [Locus::Whole]);
        let m =
            "if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias";
        assert!(
            run(m, spec("AL2")).is_empty(),
            "rule only concerns bottlerocket aliases"
        );
    }

    #[test]
    fn security_group_exclusivity_is_all_terms_as_upstream() {
        let m = "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term";
        assert_eq!(run(m, json!([{"id": "sg-1", "name": "x"}])), [Locus::Whole]);
        assert!(
            run(
                m,
                json!([{"id": "sg-1", "name": "x"}, {"tags": {"a": "b"}}])
            )
            .is_empty()
        );
    }

    #[test]
    fn network_interface_duplicates() {
        let m = "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card";
        let v = json!([
            {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
            {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
            {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
            {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"}
        ]);
        assert_eq!(
            run(m, v),
            [
                Locus::Index(0),
                Locus::Index(1),
                Locus::Index(2),
                Locus::Index(3)
            ]
        );
    }
}
