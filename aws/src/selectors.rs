//! Selector terms of an EC2NodeClass turned into EC2 `Describe*` filter sets. Terms are ORed
//! (one Describe call per filter set, results unioned) and the fields of one term ANDed;
//! terms that select by id are folded into a single id filter, a tag value `*` matches any
//! value of that key (`tag-key` filter). The term type here is the provider's own view of
//! the CRD's subnet / security-group / AMI terms, so discovery does not depend on how the
//! API types evolve.

use aws_sdk_ec2::types::Filter;
use std::collections::BTreeMap;

/// One selector term: by id, by name, and/or by tags.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SelectorTerm {
    pub id: Option<String>,
    pub name: Option<String>,
    pub tags: BTreeMap<String, String>,
}

impl SelectorTerm {
    pub fn by_id(id: &str) -> Self {
        Self {
            id: Some(id.to_owned()),
            ..Self::default()
        }
    }

    pub fn by_name(name: &str) -> Self {
        Self {
            name: Some(name.to_owned()),
            ..Self::default()
        }
    }

    pub fn by_tags<'a>(tags: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self {
            tags: tags
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            ..Self::default()
        }
    }
}

pub fn filter(name: &str, values: impl IntoIterator<Item = String>) -> Filter {
    Filter::builder()
        .name(name)
        .set_values(Some(values.into_iter().collect()))
        .build()
}

/// `tag:<key>=<value>`, or `tag-key=<key>` for the wildcard value `*`.
pub fn tag_filters(tags: &BTreeMap<String, String>) -> Vec<Filter> {
    tags.iter()
        .map(|(k, v)| {
            if v == "*" {
                filter("tag-key", [k.clone()])
            } else {
                filter(&format!("tag:{k}"), [v.clone()])
            }
        })
        .collect()
}

/// Filter sets for subnet terms: ids go to one `subnet-id` filter, each tag term is a set.
pub fn subnet_filter_sets(terms: &[SelectorTerm]) -> Vec<Vec<Filter>> {
    id_and_tag_filter_sets(terms, "subnet-id", None)
}

/// Filter sets for security-group terms: ids to one `group-id` filter, names to
/// `group-name`, tags as tag filters.
pub fn security_group_filter_sets(terms: &[SelectorTerm]) -> Vec<Vec<Filter>> {
    id_and_tag_filter_sets(terms, "group-id", Some("group-name"))
}

fn id_and_tag_filter_sets(
    terms: &[SelectorTerm],
    id_filter: &str,
    name_filter: Option<&str>,
) -> Vec<Vec<Filter>> {
    let mut ids = Vec::new();
    let mut sets = Vec::new();
    for term in terms {
        if let Some(id) = &term.id {
            ids.push(id.clone());
            continue;
        }
        let mut set = Vec::new();
        if let (Some(name), Some(filter_name)) = (&term.name, name_filter) {
            set.push(filter(filter_name, [name.clone()]));
        }
        set.extend(tag_filters(&term.tags));
        if !set.is_empty() {
            sets.push(set);
        }
    }
    if !ids.is_empty() {
        sets.push(vec![filter(id_filter, ids)]);
    }
    sets
}

/// A stable cache key for a list of terms.
pub fn terms_key(terms: &[SelectorTerm]) -> String {
    let mut sorted: Vec<&SelectorTerm> = terms.iter().collect();
    sorted.sort();
    format!("{sorted:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn describe(sets: &[Vec<Filter>]) -> Vec<Vec<(String, Vec<String>)>> {
        sets.iter()
            .map(|set| {
                set.iter()
                    .map(|f| (f.name().unwrap_or_default().to_owned(), f.values().to_vec()))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn ids_fold_into_one_filter_and_tags_form_a_set_per_term() {
        let terms = [
            SelectorTerm::by_id("subnet-1"),
            SelectorTerm::by_tags([("karpenter.sh/discovery", "demo"), ("tier", "*")]),
            SelectorTerm::by_id("subnet-2"),
        ];
        assert_eq!(
            describe(&subnet_filter_sets(&terms)),
            vec![
                vec![
                    (
                        "tag:karpenter.sh/discovery".to_owned(),
                        vec!["demo".to_owned()]
                    ),
                    ("tag-key".to_owned(), vec!["tier".to_owned()]),
                ],
                vec![(
                    "subnet-id".to_owned(),
                    vec!["subnet-1".to_owned(), "subnet-2".to_owned()]
                )],
            ]
        );
    }

    #[test]
    fn security_groups_select_by_name_too() {
        let mut term = SelectorTerm::by_name("nodes");
        term.tags.insert("team".into(), "a".into());
        assert_eq!(
            describe(&security_group_filter_sets(&[term])),
            vec![vec![
                ("group-name".to_owned(), vec!["nodes".to_owned()]),
                ("tag:team".to_owned(), vec!["a".to_owned()]),
            ]]
        );
        assert!(security_group_filter_sets(&[]).is_empty());
    }

    #[test]
    fn terms_key_ignores_order() {
        let a = [SelectorTerm::by_id("x"), SelectorTerm::by_name("y")];
        let b = [SelectorTerm::by_name("y"), SelectorTerm::by_id("x")];
        assert_eq!(terms_key(&a), terms_key(&b));
    }
}
