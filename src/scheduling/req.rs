//! The scheduler's internal requirements algebra over interned keys and values. It has the
//! semantics of upstream Karpenter's `scheduling.Requirements` (In, NotIn, Exists,
//! DoesNotExist, Gt, Lt as inclusive bounds, minValues; `Intersects` and `Compatible` with
//! undefined well-known labels allowed) but stores sorted integer sets, so intersections are
//! merges of small sorted slices and requirement sets hash cheaply for the solver's caches.

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use super::intern::{Interner, Sym};
use super::types::{NodeSelectorRequirementWithMinValues, Operator};
use crate::labels;

/// One key's requirement: a (possibly complemented) value set with optional integer bounds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Req {
    /// When true, `values` lists excluded values (NotIn/Exists); otherwise allowed values.
    pub complement: bool,
    /// Sorted, unique.
    pub values: Vec<Sym>,
    /// Boxed, and `None` without a bound: only numeric requirements have bounds, and a round
    /// holds one requirement for every label of every node and instance type.
    bounds: Option<Box<Bounds>>,
    pub min_values: Option<u32>,
}

/// The inclusive integer bounds of a Gt, Lt, Gte or Lte requirement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct Bounds {
    gte: Option<i64>,
    lte: Option<i64>,
}

impl Bounds {
    /// The bounds both allow.
    fn meet(a: Option<&Bounds>, b: Option<&Bounds>) -> Bounds {
        let [a, b] = [a, b].map(|b| b.copied().unwrap_or_default());
        Bounds {
            gte: max_opt(a.gte, b.gte),
            lte: min_opt(a.lte, b.lte),
        }
    }

    /// Whether no integer is within them.
    fn is_void(&self) -> bool {
        matches!((self.gte, self.lte), (Some(g), Some(l)) if g > l)
    }

    /// Whether `v` is within them: any value when there are none, else an integer in range.
    fn admit(&self, v: Sym, interner: &Interner) -> bool {
        if self.gte.is_none() && self.lte.is_none() {
            return true;
        }
        let Some(n) = interner.number(v) else {
            return false;
        };
        self.gte.is_none_or(|g| n >= g) && self.lte.is_none_or(|l| n <= l)
    }

    fn boxed(self) -> Option<Box<Bounds>> {
        (self.gte.is_some() || self.lte.is_some()).then(|| Box::new(self))
    }
}

/// The operator a requirement would be written with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Req {
    pub fn exists() -> Req {
        Req {
            complement: true,
            values: Vec::new(),
            bounds: None,
            min_values: None,
        }
    }

    pub fn does_not_exist() -> Req {
        Req {
            complement: false,
            values: Vec::new(),
            bounds: None,
            min_values: None,
        }
    }

    pub fn is_in(mut values: Vec<Sym>) -> Req {
        values.sort_unstable();
        values.dedup();
        Req {
            complement: false,
            values,
            bounds: None,
            min_values: None,
        }
    }

    pub fn single(value: Sym) -> Req {
        Req::is_in(vec![value])
    }

    /// Builds a requirement from an operator and its (interned) values; `numbers` are the
    /// parsed values for Gt/Lt. Returns `None` for a Gt/Lt whose value is not one integer.
    pub fn from_operator(op: Operator, values: &[Sym], interner: &Interner) -> Option<Req> {
        Some(match op {
            Operator::In => Req::is_in(values.to_vec()),
            Operator::NotIn => {
                let mut r = Req::is_in(values.to_vec());
                r.complement = true;
                r
            }
            Operator::Exists => Req::exists(),
            Operator::DoesNotExist => Req::does_not_exist(),
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                let [v] = values else { return None };
                let n = interner.number(*v)?;
                let mut r = Req::exists();
                let mut bounds = Bounds::default();
                // Gt and Lt become the inclusive bounds Gte n+1 and Lte n-1.
                let bound = match op {
                    Operator::Gt => n.checked_add(1),
                    Operator::Lt => n.checked_sub(1),
                    _ => Some(n),
                };
                let Some(bound) = bound else {
                    return Some(Req::does_not_exist());
                };
                if matches!(op, Operator::Gt | Operator::Gte) {
                    bounds.gte = Some(bound);
                } else {
                    bounds.lte = Some(bound);
                }
                r.bounds = bounds.boxed();
                r
            }
        })
    }

    pub fn op(&self) -> Op {
        match (self.complement, self.values.is_empty()) {
            (true, false) => Op::NotIn,
            (true, true) => Op::Exists,
            (false, false) => Op::In,
            (false, true) => Op::DoesNotExist,
        }
    }

    /// The inclusive lower bound, if any.
    pub fn gte(&self) -> Option<i64> {
        self.bounds.as_ref().and_then(|b| b.gte)
    }

    /// The inclusive upper bound, if any.
    pub fn lte(&self) -> Option<i64> {
        self.bounds.as_ref().and_then(|b| b.lte)
    }

    /// Whether the requirement is numeric (has a bound).
    pub fn is_bounded(&self) -> bool {
        self.bounds.is_some()
    }

    #[inline]
    fn within(&self, v: Sym, interner: &Interner) -> bool {
        self.bounds.as_ref().is_none_or(|b| b.admit(v, interner))
    }

    /// Whether `value` satisfies the requirement.
    #[inline]
    pub fn has(&self, value: Sym, interner: &Interner) -> bool {
        let listed = self.values.binary_search(&value).is_ok();
        listed != self.complement && self.within(value, interner)
    }

    /// The only allowed value, when there is exactly one.
    pub fn single_value(&self) -> Option<Sym> {
        match (self.complement, self.values.as_slice()) {
            (false, [v]) => Some(*v),
            _ => None,
        }
    }

    /// Number of allowed values; `usize::MAX` for complements.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        if self.complement {
            usize::MAX - self.values.len()
        } else {
            self.values.len()
        }
    }

    /// The requirement allowing what both allow (upstream `Intersection`).
    pub fn intersection(&self, other: &Req, interner: &Interner) -> Req {
        let complement = self.complement && other.complement;
        let bounds = Bounds::meet(self.bounds.as_deref(), other.bounds.as_deref());
        let min_values = max_opt(self.min_values, other.min_values);
        if bounds.is_void() {
            return Req {
                min_values,
                ..Req::does_not_exist()
            };
        }
        let mut values = match (self.complement, other.complement) {
            (true, true) => union(&self.values, &other.values),
            (true, false) => difference(&other.values, &self.values),
            (false, true) => difference(&self.values, &other.values),
            (false, false) => intersect(&self.values, &other.values),
        };
        values.retain(|v| bounds.admit(*v, interner));
        Req {
            complement,
            values,
            bounds: if complement { bounds.boxed() } else { None },
            min_values,
        }
    }

    /// Whether some value satisfies both (upstream `HasIntersection`).
    pub fn has_intersection(&self, other: &Req, interner: &Interner) -> bool {
        let bounds = Bounds::meet(self.bounds.as_deref(), other.bounds.as_deref());
        if bounds.is_void() {
            return false;
        }
        match (self.complement, other.complement) {
            (true, true) => true,
            (true, false) => other
                .values
                .iter()
                .any(|v| self.values.binary_search(v).is_err() && bounds.admit(*v, interner)),
            (false, true) => self
                .values
                .iter()
                .any(|v| other.values.binary_search(v).is_err() && bounds.admit(*v, interner)),
            (false, false) => {
                let (small, large) = if self.values.len() <= other.values.len() {
                    (&self.values, &other.values)
                } else {
                    (&other.values, &self.values)
                };
                small
                    .iter()
                    .any(|v| large.binary_search(v).is_ok() && bounds.admit(*v, interner))
            }
        }
    }

    /// Upstream's textual form, e.g. `topology.kubernetes.io/zone In [a b]`.
    pub fn render(&self, key: Sym, interner: &Interner) -> String {
        let op = match self.op() {
            Op::In => "In",
            Op::NotIn => "NotIn",
            Op::Exists => "Exists",
            Op::DoesNotExist => "DoesNotExist",
        };
        let mut s = format!("{} {}", interner.name(key), op);
        if matches!(self.op(), Op::In | Op::NotIn) {
            let mut names: Vec<String> = self
                .values
                .iter()
                .map(|v| interner.name(*v).into_owned())
                .collect();
            names.sort();
            let extra = names.len().saturating_sub(5);
            names.truncate(5);
            if extra > 0 {
                names.push(format!("and {extra} others"));
            }
            let _ = write!(s, " [{}]", names.join(" "));
        }
        if let Some(g) = self.gte() {
            let _ = write!(s, " >={g}");
        }
        if let Some(l) = self.lte() {
            let _ = write!(s, " <={l}");
        }
        if let Some(m) = self.min_values {
            let _ = write!(s, " minValues {m}");
        }
        s
    }

    /// The public form of this requirement, as `Requirement::to_node_selector_requirements`
    /// writes it: bounds become Gte/Lte (which cannot overflow, unlike Gt/Lt at the i64
    /// limits) and the values a bounded requirement still excludes become a NotIn.
    pub fn to_public(
        &self,
        key: Sym,
        interner: &Interner,
    ) -> Vec<NodeSelectorRequirementWithMinValues> {
        let key_name = interner.name(key).into_owned();
        let mk = |operator, values: Vec<String>| NodeSelectorRequirementWithMinValues {
            key: key_name.clone(),
            operator,
            values,
            min_values: self.min_values.map(i64::from),
        };
        let mut names: Vec<String> = self
            .values
            .iter()
            .map(|v| interner.name(*v).into_owned())
            .collect();
        names.sort();
        if !self.is_bounded() {
            let op = match self.op() {
                Op::In => Operator::In,
                Op::NotIn => Operator::NotIn,
                Op::Exists => Operator::Exists,
                Op::DoesNotExist => Operator::DoesNotExist,
            };
            return vec![mk(op, names)];
        }
        let gte = self.gte().map(|g| mk(Operator::Gte, vec![g.to_string()]));
        let lte = self.lte().map(|l| mk(Operator::Lte, vec![l.to_string()]));
        let excluded = (!names.is_empty()).then(|| mk(Operator::NotIn, names));
        [gte, lte, excluded].into_iter().flatten().collect()
    }
}

fn max_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

fn union(a: &[Sym], b: &[Sym]) -> Vec<Sym> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    out.extend_from_slice(a);
    out.extend_from_slice(b);
    out.sort_unstable();
    out.dedup();
    out
}

fn difference(a: &[Sym], b: &[Sym]) -> Vec<Sym> {
    a.iter()
        .copied()
        .filter(|v| b.binary_search(v).is_err())
        .collect()
}

fn intersect(a: &[Sym], b: &[Sym]) -> Vec<Sym> {
    a.iter()
        .copied()
        .filter(|v| b.binary_search(v).is_ok())
        .collect()
}

/// Why two requirement sets are incompatible.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// The incoming requirement names a custom label the node side never defines.
    Undefined(Sym),
    /// Both define the key but no value satisfies both: (key, incoming, existing).
    Disjoint(Sym, Box<(Req, Req)>),
}

impl Conflict {
    pub fn render(&self, interner: &Interner) -> String {
        match self {
            Conflict::Undefined(k) => {
                format!("label {:?} does not have known values", interner.name(*k))
            }
            Conflict::Disjoint(k, pair) => format!(
                "key {}, {} not in {}",
                interner.name(*k),
                pair.0.render(*k, interner),
                pair.1.render(*k, interner)
            ),
        }
    }
}

/// A set of requirements keyed by label key, sorted by key id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReqSet(pub Vec<(Sym, Req)>);

impl ReqSet {
    #[inline]
    pub fn get(&self, key: Sym) -> Option<&Req> {
        self.0
            .binary_search_by_key(&key, |(k, _)| *k)
            .ok()
            .map(|i| &self.0[i].1)
    }

    pub fn has(&self, key: Sym) -> bool {
        self.get(key).is_some()
    }

    /// Narrows the requirement of `key` (or sets it) to its intersection with `req`.
    pub fn add(&mut self, key: Sym, req: Req, interner: &Interner) {
        match self.0.binary_search_by_key(&key, |(k, _)| *k) {
            Ok(i) => {
                let merged = req.intersection(&self.0[i].1, interner);
                self.0[i].1 = merged;
            }
            Err(i) => self.0.insert(i, (key, req)),
        }
    }

    /// Sets the requirement of `key`, replacing any existing one.
    pub fn set(&mut self, key: Sym, req: Req) {
        match self.0.binary_search_by_key(&key, |(k, _)| *k) {
            Ok(i) => self.0[i].1 = req,
            Err(i) => self.0.insert(i, (key, req)),
        }
    }

    pub fn add_all(&mut self, other: &ReqSet, interner: &Interner) {
        for (k, r) in &other.0 {
            self.add(*k, r.clone(), interner);
        }
    }

    /// Upstream `Intersects`: every shared key has a common value, except that two negative
    /// requirements (NotIn/DoesNotExist) never conflict.
    pub fn intersects(&self, incoming: &ReqSet, interner: &Interner) -> Result<(), Conflict> {
        let (mut i, mut j) = (0, 0);
        while i < self.0.len() && j < incoming.0.len() {
            let (ka, ra) = &self.0[i];
            let (kb, rb) = &incoming.0[j];
            match ka.cmp(kb) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    if !ra.has_intersection(rb, interner) && (!negative(rb) || !negative(ra)) {
                        return Err(Conflict::Disjoint(*ka, Box::new((rb.clone(), ra.clone()))));
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        Ok(())
    }

    /// Upstream `Compatible` with undefined well-known labels allowed: custom keys the
    /// incoming side requires positively must be defined here; then `intersects`.
    pub fn compatible(&self, incoming: &ReqSet, vocab: &Vocab) -> Result<(), Conflict> {
        for (k, r) in &incoming.0 {
            if vocab.is_well_known(*k) || negative(r) || self.has(*k) {
                continue;
            }
            return Err(Conflict::Undefined(*k));
        }
        self.intersects(incoming, &vocab.interner)
    }

    /// Strict `Compatible` (no undefined labels allowed), as used against existing nodes.
    pub fn compatible_strict(
        &self,
        incoming: &ReqSet,
        interner: &Interner,
    ) -> Result<(), Conflict> {
        for (k, r) in &incoming.0 {
            if negative(r) || self.has(*k) {
                continue;
            }
            return Err(Conflict::Undefined(*k));
        }
        self.intersects(incoming, interner)
    }

    pub fn has_min_values(&self) -> bool {
        self.0.iter().any(|(_, r)| r.min_values.is_some())
    }

    /// Upstream's textual form: requirements sorted, comma separated.
    pub fn render(&self, interner: &Interner) -> String {
        let mut parts: Vec<String> = self.0.iter().map(|(k, r)| r.render(*k, interner)).collect();
        parts.sort();
        parts.join(", ")
    }
}

/// Adds node selector expressions to `reqs`, naming the expression an error comes from.
pub fn add_expressions<'a>(
    reqs: &mut ReqSet,
    exprs: impl Iterator<Item = &'a NodeSelectorRequirement>,
    vocab: &mut Vocab,
) -> Result<(), String> {
    for e in exprs {
        let op: Operator = e.operator.parse().map_err(|_| {
            format!(
                "node selector requirement {:?} has unknown operator {:?}",
                e.key, e.operator
            )
        })?;
        // Deprecated aliases mean the well-known label, as upstream's NewRequirement reads them.
        let key = vocab.intern(labels::normalize_label_key(&e.key));
        let values: Vec<Sym> = e.values.iter().flatten().map(|v| vocab.intern(v)).collect();
        let req = Req::from_operator(op, &values, &vocab.interner).ok_or_else(|| {
            format!(
                "node selector requirement {:?} {} needs a single integer value",
                e.key, e.operator
            )
        })?;
        reqs.add(key, req, &vocab.interner);
    }
    Ok(())
}

/// NotIn or DoesNotExist: requirements that never need the other side to define the key.
#[inline]
pub fn negative(r: &Req) -> bool {
    matches!(r.op(), Op::NotIn | Op::DoesNotExist)
}

/// The interner plus the ids of well-known labels (those Karpenter may leave undefined on a
/// NodePool because instance types and offerings define them).
#[derive(Clone, Debug)]
pub struct Vocab {
    pub interner: Interner,
    well_known: Vec<Sym>,
    pub zone: Sym,
    pub zone_id: Sym,
    pub capacity_type: Sym,
    pub hostname: Sym,
    pub instance_type: Sym,
    pub nodepool: Sym,
}

impl Default for Vocab {
    fn default() -> Self {
        Vocab::new()
    }
}

impl Vocab {
    pub fn new() -> Vocab {
        let mut interner = Interner::default();
        let mut well_known: Vec<Sym> = labels::WELL_KNOWN_LABELS
            .iter()
            .map(|l| interner.intern(l))
            .collect();
        well_known.sort_unstable();
        Vocab {
            zone: interner.intern(labels::ZONE),
            zone_id: interner.intern(labels::ZONE_ID),
            capacity_type: interner.intern(labels::CAPACITY_TYPE),
            hostname: interner.intern(labels::HOSTNAME),
            instance_type: interner.intern(labels::INSTANCE_TYPE),
            nodepool: interner.intern(labels::NODEPOOL),
            interner,
            well_known,
        }
    }

    #[inline]
    pub fn is_well_known(&self, key: Sym) -> bool {
        self.well_known.binary_search(&key).is_ok()
    }

    pub fn intern(&mut self, s: &str) -> Sym {
        self.interner.intern(s)
    }

    /// Interns a public requirement, reading a deprecated key as the label it aliases; `None`
    /// when a numeric operator's value is not one integer or minValues is negative.
    pub fn requirement(&mut self, r: &NodeSelectorRequirementWithMinValues) -> Option<(Sym, Req)> {
        let key = self.intern(labels::normalize_label_key(&r.key));
        let values: Vec<Sym> = r.values.iter().map(|v| self.interner.intern(v)).collect();
        let mut req = Req::from_operator(r.operator, &values, &self.interner)?;
        req.min_values = match r.min_values {
            None => None,
            Some(m) => Some(u32::try_from(m).ok()?),
        };
        Some((key, req))
    }

    /// Requirements equal to a label map (each label `In` its value); deprecated label keys
    /// are read as the well-known label they alias, as `Requirements::from_labels` does.
    pub fn label_set<'a>(
        &mut self,
        labels: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> ReqSet {
        self.label_set_with_room(labels, 0)
    }

    /// [`Self::label_set`] with room for `room` more requirements, which the caller adds.
    pub fn label_set_with_room<'a>(
        &mut self,
        labels: impl IntoIterator<Item = (&'a String, &'a String)>,
        room: usize,
    ) -> ReqSet {
        let labels = labels.into_iter();
        // Sized once: a round builds one for every node and instance type, and growing by
        // doubling would leave up to half of each unused.
        let mut set = ReqSet(Vec::with_capacity(labels.size_hint().0 + room));
        for (k, v) in labels {
            let key = self.intern(crate::labels::normalize_label_key(k));
            let val = self.intern(v);
            set.add(key, Req::single(val), &self.interner);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_set_is_sized_to_its_labels() {
        let mut vocab = Vocab::new();
        let labels: std::collections::BTreeMap<String, String> = (0..40)
            .map(|i| (format!("example.com/label-{i}"), format!("value-{i}")))
            .collect();
        let set = vocab.label_set(labels.iter());
        assert_eq!(set.0.len(), 40);
        assert_eq!(set.0.capacity(), 40, "no room left over from growing");
        let mut roomy = vocab.label_set_with_room(labels.iter(), 1);
        roomy.add(vocab.hostname, Req::single(0), &vocab.interner);
        assert_eq!(roomy.0.capacity(), 41, "the room asked for, and no more");
    }

    #[test]
    fn a_requirement_set_entry_stays_small() {
        // A round holds one for every label of every node and instance type.
        let (entry, req) = (size_of::<(Sym, Req)>(), size_of::<Req>());
        assert!(
            req <= 48 && entry <= 56,
            "{req} B a requirement, {entry} B an entry"
        );
    }

    fn vocab_with(names: &[&str]) -> (Vocab, Vec<Sym>) {
        let mut v = Vocab::new();
        let ids = names.iter().map(|n| v.intern(n)).collect();
        (v, ids)
    }

    #[test]
    fn in_and_not_in_intersect_to_difference() {
        let (v, s) = vocab_with(&["a", "b", "c"]);
        let i = &v.interner;
        let in_ab = Req::is_in(vec![s[0], s[1]]);
        let not_b = Req::from_operator(Operator::NotIn, &[s[1]], i).expect("valid");
        let both = in_ab.intersection(&not_b, i);
        assert_eq!(both, Req::is_in(vec![s[0]]));
        assert!(in_ab.has_intersection(&not_b, i));
        assert!(!Req::is_in(vec![s[1]]).has_intersection(&not_b, i));
        assert_eq!(not_b.op(), Op::NotIn);
        assert!(!not_b.has(s[1], i) && not_b.has(s[2], i));
    }

    #[test]
    fn gt_lt_are_inclusive_bounds_on_integer_values() {
        let (mut v, _) = vocab_with(&[]);
        let four = v.intern("4");
        let eight = v.intern("8");
        let text = v.intern("large");
        let i = &v.interner;
        let gt4 = Req::from_operator(Operator::Gt, &[four], i).expect("integer");
        assert!(!gt4.has(four, i));
        assert!(gt4.has(eight, i));
        assert!(!gt4.has(text, i), "non-integers never satisfy bounds");
        let lt8 = Req::from_operator(Operator::Lt, &[eight], i).expect("integer");
        let window = gt4.intersection(&lt8, i);
        assert_eq!((window.gte(), window.lte()), (Some(5), Some(7)));
        let lt4 = Req::from_operator(Operator::Lt, &[four], i).expect("integer");
        assert_eq!(gt4.intersection(&lt4, i).op(), Op::DoesNotExist);
        assert!(Req::from_operator(Operator::Gt, &[text], i).is_none());
    }

    #[test]
    fn compatible_allows_undefined_well_known_but_not_custom_labels() {
        let mut v = Vocab::new();
        let zone = v.zone;
        let a = v.intern("zone-a");
        let team = v.intern("team");
        let red = v.intern("red");
        let pool = ReqSet::default();
        let mut pod = ReqSet::default();
        pod.add(zone, Req::single(a), &v.interner);
        assert!(pool.compatible(&pod, &v).is_ok());
        pod.add(team, Req::single(red), &v.interner);
        assert_eq!(pool.compatible(&pod, &v), Err(Conflict::Undefined(team)));
        let mut not_red = ReqSet::default();
        not_red.add(
            team,
            Req::from_operator(Operator::NotIn, &[red], &v.interner).expect("ok"),
            &v.interner,
        );
        assert!(
            pool.compatible(&not_red, &v).is_ok(),
            "negative custom requirements pass"
        );
        assert!(
            pool.compatible_strict(
                &{
                    let mut z = ReqSet::default();
                    z.add(zone, Req::single(a), &v.interner);
                    z
                },
                &v.interner
            )
            .is_err(),
            "strict mode allows nothing undefined"
        );
    }

    #[test]
    fn disjoint_requirements_name_the_key() {
        let mut v = Vocab::new();
        let zone = v.zone;
        let a = v.intern("zone-a");
        let b = v.intern("zone-b");
        let mut node = ReqSet::default();
        node.add(zone, Req::single(a), &v.interner);
        let mut pod = ReqSet::default();
        pod.add(zone, Req::single(b), &v.interner);
        let err = node.intersects(&pod, &v.interner).expect_err("disjoint");
        assert_eq!(
            err.render(&v.interner),
            "key topology.kubernetes.io/zone, topology.kubernetes.io/zone In [zone-b] not in topology.kubernetes.io/zone In [zone-a]"
        );
        let mut dne = ReqSet::default();
        dne.add(zone, Req::does_not_exist(), &v.interner);
        let mut not_a = ReqSet::default();
        not_a.add(
            zone,
            Req::from_operator(Operator::NotIn, &[a], &v.interner).expect("ok"),
            &v.interner,
        );
        assert!(
            dne.intersects(&not_a, &v.interner).is_ok(),
            "two negatives never conflict"
        );
    }

    #[test]
    fn public_form_round_trips_bounds() {
        let mut v = Vocab::new();
        let cpu = v.intern(crate::labels::INSTANCE_CPU);
        let (k, r) = v
            .requirement(&NodeSelectorRequirementWithMinValues {
                key: crate::labels::INSTANCE_CPU.into(),
                operator: Operator::Gt,
                values: vec!["3".into()],
                min_values: None,
            })
            .expect("valid");
        assert_eq!(k, cpu);
        let out = r.to_public(k, &v.interner);
        assert_eq!(out[0].operator, Operator::Gte);
        assert_eq!(out[0].values, vec!["4".to_string()]);
    }
}
