//! Volume topology: where a pod's PersistentVolumeClaims let it run. A bound claim follows its
//! PersistentVolume's node affinity; an unbound one its StorageClass's allowed topologies.
//! Each OR'd term is an alternative; several volumes combine as the compatible cross product.
//! The CSI driver behind each claim is what a node's volume attach limit counts against.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use super::intern::Sym;
use super::req::{Req, ReqSet, Vocab, add_expressions};
use super::types::VolumeTopology;

/// Volumes attached (or to attach) through a driver: (driver, `namespace/claim`) pairs.
pub type Attached = Vec<(Sym, Sym)>;

/// Whether adding `more` to the volumes `attached` on a node would take some driver past its
/// `limits` (a driver without a limit is unlimited). A volume already attached (a claim
/// shared by two pods) counts once.
pub fn exceeds_limits(limits: &[(Sym, i64)], attached: &Attached, more: &Attached) -> bool {
    limits.iter().any(|&(driver, limit)| {
        let new = more
            .iter()
            .filter(|&&(d, claim)| d == driver && !attached.contains(&(d, claim)))
            .count();
        if new == 0 {
            return false;
        }
        let held = attached.iter().filter(|&&(d, _)| d == driver).count();
        i64::try_from(held + new).unwrap_or(i64::MAX) > limit
    })
}

/// Volume objects indexed by name.
pub struct VolumeIndex<'a> {
    pvcs: BTreeMap<(&'a str, &'a str), &'a PersistentVolumeClaim>,
    pvs: BTreeMap<&'a str, &'a PersistentVolume>,
    classes: BTreeMap<&'a str, &'a StorageClass>,
}

impl<'a> VolumeIndex<'a> {
    pub fn new(v: &'a VolumeTopology) -> VolumeIndex<'a> {
        VolumeIndex {
            pvcs: v
                .pvcs
                .iter()
                .map(|c| {
                    (
                        (
                            c.metadata.namespace.as_deref().unwrap_or("default"),
                            c.metadata.name.as_deref().unwrap_or(""),
                        ),
                        c,
                    )
                })
                .collect(),
            pvs: v
                .pvs
                .iter()
                .map(|p| (p.metadata.name.as_deref().unwrap_or(""), p))
                .collect(),
            classes: v
                .storage_classes
                .iter()
                .map(|s| (s.metadata.name.as_deref().unwrap_or(""), s))
                .collect(),
        }
    }

    /// Alternatives for a pod in `namespace` mounting `claims`; empty means unconstrained.
    pub fn alternatives(
        &self,
        namespace: &str,
        claims: &[String],
        vocab: &mut Vocab,
    ) -> Result<Vec<ReqSet>, String> {
        let mut alternatives: Vec<ReqSet> = Vec::new();
        for claim in claims {
            let per_volume = self.claim_alternatives(namespace, claim, vocab)?;
            if per_volume.is_empty() {
                continue;
            }
            alternatives = if alternatives.is_empty() {
                per_volume
            } else {
                combine(&alternatives, &per_volume, vocab)
            };
        }
        Ok(alternatives)
    }

    /// The CSI driver a claim's volume attaches through: its bound PersistentVolume's CSI
    /// driver, else its StorageClass's provisioner (as upstream resolves it). `None` when
    /// neither is known: such a volume counts against no limit.
    pub fn driver(&self, namespace: &str, claim: &str) -> Option<&'a str> {
        let spec = self.pvcs.get(&(namespace, claim))?.spec.as_ref()?;
        let from_volume = spec
            .volume_name
            .as_deref()
            .and_then(|name| self.pvs.get(name))
            .and_then(|pv| pv.spec.as_ref()?.csi.as_ref())
            .map(|csi| csi.driver.as_str());
        from_volume.or_else(|| {
            let class = spec.storage_class_name.as_deref()?;
            Some(self.classes.get(class)?.provisioner.as_str())
        })
    }

    /// The (driver, `namespace/claim`) pairs of `claims` that attach through a known driver.
    pub fn attachments(&self, namespace: &str, claims: &[String], vocab: &mut Vocab) -> Attached {
        claims
            .iter()
            .filter_map(|claim| {
                let driver = self.driver(namespace, claim)?;
                Some((
                    vocab.intern(driver),
                    vocab.intern(&format!("{namespace}/{claim}")),
                ))
            })
            .collect()
    }

    fn claim_alternatives(
        &self,
        namespace: &str,
        claim: &str,
        vocab: &mut Vocab,
    ) -> Result<Vec<ReqSet>, String> {
        let pvc = self
            .pvcs
            .get(&(namespace, claim))
            .ok_or_else(|| format!("persistentvolumeclaim \"{namespace}/{claim}\" not found"))?;
        let spec = pvc.spec.as_ref();
        if let Some(volume) = spec
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty())
        {
            let pv = self.pvs.get(volume).ok_or_else(|| {
                format!("persistentvolume \"{volume}\" of claim \"{namespace}/{claim}\" not found")
            })?;
            return pv_alternatives(pv, vocab);
        }
        let class_name = spec
            .and_then(|s| s.storage_class_name.as_deref())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("unbound persistentvolumeclaim \"{namespace}/{claim}\" must define a storage class"))?;
        let class = self.classes.get(class_name).ok_or_else(|| {
            format!("storageclass \"{class_name}\" of claim \"{namespace}/{claim}\" not found")
        })?;
        if class.volume_binding_mode.as_deref() == Some("Immediate") {
            return Err(format!(
                "persistentvolumeclaim \"{namespace}/{claim}\" with immediate volume binding mode must be bound"
            ));
        }
        let mut out = Vec::new();
        for term in class.allowed_topologies.iter().flatten() {
            let mut set = ReqSet::default();
            for e in term.match_label_expressions.iter().flatten() {
                let key = vocab.intern(&e.key);
                let values = e.values.iter().map(|v| vocab.intern(v)).collect();
                set.add(key, Req::is_in(values), &vocab.interner);
            }
            if !set.0.is_empty() {
                out.push(set);
            }
        }
        Ok(out)
    }
}

fn pv_alternatives(pv: &PersistentVolume, vocab: &mut Vocab) -> Result<Vec<ReqSet>, String> {
    let Some(terms) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| &r.node_selector_terms)
    else {
        return Ok(Vec::new());
    };
    let node_local = pv
        .spec
        .as_ref()
        .is_some_and(|s| s.local.is_some() || s.host_path.is_some());
    let mut out = Vec::new();
    for term in terms {
        let exprs: Vec<_> = term
            .match_expressions
            .iter()
            .flatten()
            // A local or hostPath volume's hostname pin is dropped: a new node has a new name.
            .filter(|e| !(node_local && e.key == crate::labels::HOSTNAME))
            .cloned()
            .collect();
        let mut set = ReqSet::default();
        add_expressions(&mut set, exprs.iter(), vocab)?;
        if !set.0.is_empty()
            || term
                .match_expressions
                .as_ref()
                .is_some_and(|e| !e.is_empty())
        {
            out.push(set);
        }
    }
    Ok(out)
}

/// Cross product of two alternative lists, keeping compatible combinations (all of them if
/// none is compatible, as upstream does).
fn combine(a: &[ReqSet], b: &[ReqSet], vocab: &Vocab) -> Vec<ReqSet> {
    let merge = |x: &ReqSet, y: &ReqSet| {
        let mut m = x.clone();
        m.add_all(y, &vocab.interner);
        m
    };
    let compatible: Vec<ReqSet> = a
        .iter()
        .flat_map(|x| b.iter().map(move |y| (x, y)))
        .filter(|(x, y)| x.intersects(y, &vocab.interner).is_ok())
        .map(|(x, y)| merge(x, y))
        .collect();
    if !compatible.is_empty() {
        return compatible;
    }
    a.iter()
        .flat_map(|x| b.iter().map(move |y| merge(x, y)))
        .collect()
}
