//! The unavailable-offerings table the OfferingCache actor writes and everyone else reads:
//! offerings by instance type, whole capacity types and subnets, each with the instant it
//! expires, and the sequence numbers that tell readers something changed. Pure data; time
//! is passed in, so expiry is tested without clocks.

use std::collections::HashMap;

use tokio::time::Instant;

/// One refused offering of an instance type.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    capacity_type: String,
    zone: String,
    until: Instant,
}

/// What is unavailable now.
#[derive(Debug, Default)]
pub struct Table {
    /// Instance type → its refused offerings (a handful at most, so a list).
    offerings: HashMap<String, Vec<Entry>>,
    capacity_types: HashMap<String, Instant>,
    subnets: HashMap<String, Instant>,
    /// Per instance type: bumped when one of its offerings is added or expires.
    type_seq: HashMap<String, u64>,
    /// Bumped when a capacity type or subnet entry is added or expires (affects every type).
    global_seq: u64,
    /// Bumped on every change of any kind.
    generation: u64,
}

impl Table {
    /// Whether the offering, its capacity type, or every one of `subnet_ids` (when there are
    /// any) is unavailable.
    pub fn is_unavailable(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: &str,
        subnet_ids: &[String],
    ) -> bool {
        self.is_offering_unavailable(instance_type, zone, capacity_type)
            || self.capacity_types.contains_key(capacity_type)
            || (!subnet_ids.is_empty() && subnet_ids.iter().all(|s| self.subnets.contains_key(s)))
    }

    fn is_offering_unavailable(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: &str,
    ) -> bool {
        self.offerings.get(instance_type).is_some_and(|entries| {
            entries
                .iter()
                .any(|e| e.zone == zone && e.capacity_type == capacity_type)
        })
    }

    /// Changes whenever an entry affecting `instance_type` is added or expires.
    pub fn seq_num(&self, instance_type: &str) -> u64 {
        self.type_seq.get(instance_type).copied().unwrap_or(0) + self.global_seq
    }

    /// Changes whenever anything is added or expires.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Number of unavailable offerings, capacity types and subnets.
    pub fn len(&self) -> usize {
        self.offerings.values().map(Vec::len).sum::<usize>()
            + self.capacity_types.len()
            + self.subnets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every unavailable offering: (instance type, zone, capacity type, until), sorted.
    pub fn offerings(&self) -> Vec<(&str, &str, &str, Instant)> {
        let mut out: Vec<_> = self
            .offerings
            .iter()
            .flat_map(|(it, entries)| {
                entries.iter().map(move |e| {
                    (
                        it.as_str(),
                        e.zone.as_str(),
                        e.capacity_type.as_str(),
                        e.until,
                    )
                })
            })
            .collect();
        out.sort();
        out
    }

    /// Unavailable capacity types, each with its expiry, sorted.
    pub fn capacity_types(&self) -> Vec<(&str, Instant)> {
        sorted(&self.capacity_types)
    }

    /// Subnets out of addresses, each with its expiry, sorted.
    pub fn subnets(&self) -> Vec<(&str, Instant)> {
        sorted(&self.subnets)
    }

    /// Marks an offering unavailable until `until` (a repeated mark extends it).
    pub fn mark_offering(
        &mut self,
        instance_type: &str,
        zone: &str,
        capacity_type: &str,
        until: Instant,
    ) {
        let entries = self.offerings.entry(instance_type.to_owned()).or_default();
        match entries
            .iter_mut()
            .find(|e| e.zone == zone && e.capacity_type == capacity_type)
        {
            Some(entry) => entry.until = entry.until.max(until),
            None => entries.push(Entry {
                capacity_type: capacity_type.to_owned(),
                zone: zone.to_owned(),
                until,
            }),
        }
        *self.type_seq.entry(instance_type.to_owned()).or_default() += 1;
        self.generation += 1;
    }

    pub fn mark_capacity_type(&mut self, capacity_type: &str, until: Instant) {
        extend(&mut self.capacity_types, capacity_type, until);
        self.global_seq += 1;
        self.generation += 1;
    }

    pub fn mark_subnet(&mut self, subnet_id: &str, until: Instant) {
        extend(&mut self.subnets, subnet_id, until);
        self.global_seq += 1;
        self.generation += 1;
    }

    /// Drops entries that expired by `now`, bumping the sequence numbers they affected so
    /// cached instance types recompute availability. Returns how many expired.
    pub fn expire(&mut self, now: Instant) -> usize {
        let mut expired = 0;
        let mut changed_types = Vec::new();
        self.offerings.retain(|instance_type, entries| {
            let before = entries.len();
            entries.retain(|e| e.until > now);
            if entries.len() != before {
                expired += before - entries.len();
                changed_types.push(instance_type.clone());
            }
            !entries.is_empty()
        });
        for instance_type in changed_types {
            *self.type_seq.entry(instance_type).or_default() += 1;
        }
        let before = self.capacity_types.len() + self.subnets.len();
        self.capacity_types.retain(|_, until| *until > now);
        self.subnets.retain(|_, until| *until > now);
        let global = before - (self.capacity_types.len() + self.subnets.len());
        if global > 0 {
            self.global_seq += 1;
        }
        expired += global;
        if expired > 0 {
            self.generation += 1;
        }
        expired
    }
}

fn sorted(map: &HashMap<String, Instant>) -> Vec<(&str, Instant)> {
    let mut out: Vec<_> = map.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    out.sort();
    out
}

fn extend(entries: &mut HashMap<String, Instant>, key: &str, until: Instant) {
    let slot = entries.entry(key.to_owned()).or_insert(until);
    *slot = (*slot).max(until);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn offerings_are_keyed_by_type_zone_and_capacity_type() {
        let now = Instant::now();
        let mut table = Table::default();
        table.mark_offering(
            "m5.large",
            "us-east-1a",
            "spot",
            now + Duration::from_secs(1),
        );
        assert!(table.is_unavailable("m5.large", "us-east-1a", "spot", &[]));
        assert!(!table.is_unavailable("m5.large", "us-east-1a", "on-demand", &[]));
        assert!(!table.is_unavailable("m5.large", "us-east-1b", "spot", &[]));
        assert!(!table.is_unavailable("c5.large", "us-east-1a", "spot", &[]));
        assert_eq!(table.seq_num("m5.large"), 1);
        assert_eq!(table.seq_num("c5.large"), 0);
    }

    #[test]
    fn capacity_types_and_subnets_affect_every_type() {
        let until = Instant::now() + Duration::from_secs(1);
        let mut table = Table::default();
        table.mark_capacity_type("spot", until);
        assert!(table.is_unavailable("c5.large", "us-east-1c", "spot", &[]));
        assert!(!table.is_unavailable("c5.large", "us-east-1c", "on-demand", &[]));
        table.mark_subnet("subnet-a", until);
        let one = ["subnet-a".to_owned()];
        let two = ["subnet-a".to_owned(), "subnet-b".to_owned()];
        assert!(table.is_unavailable("c5.large", "us-east-1a", "on-demand", &one));
        assert!(!table.is_unavailable("c5.large", "us-east-1a", "on-demand", &two));
        assert_eq!(table.seq_num("anything"), 2);
        assert_eq!(table.generation(), 2);
    }

    #[test]
    fn expiry_drops_entries_and_bumps_what_they_affected() {
        let now = Instant::now();
        let mut table = Table::default();
        table.mark_offering(
            "m5.large",
            "us-east-1a",
            "spot",
            now + Duration::from_secs(1),
        );
        table.mark_offering(
            "m5.large",
            "us-east-1b",
            "spot",
            now + Duration::from_secs(5),
        );
        table.mark_offering(
            "c5.large",
            "us-east-1a",
            "spot",
            now + Duration::from_secs(5),
        );
        let (m5, c5, generation) = (
            table.seq_num("m5.large"),
            table.seq_num("c5.large"),
            table.generation(),
        );
        assert_eq!(table.expire(now), 0, "nothing is due yet");
        assert_eq!(table.generation(), generation);

        assert_eq!(table.expire(now + Duration::from_secs(1)), 1);
        assert!(!table.is_unavailable("m5.large", "us-east-1a", "spot", &[]));
        assert!(table.is_unavailable("m5.large", "us-east-1b", "spot", &[]));
        assert_eq!(table.seq_num("m5.large"), m5 + 1);
        assert_eq!(table.seq_num("c5.large"), c5, "c5.large was not affected");
        assert_eq!(table.generation(), generation + 1);

        assert_eq!(table.expire(now + Duration::from_secs(5)), 2);
        assert!(table.is_empty());
    }

    #[test]
    fn marking_again_extends_an_entry() {
        let now = Instant::now();
        let mut table = Table::default();
        table.mark_offering(
            "m5.large",
            "us-east-1a",
            "spot",
            now + Duration::from_secs(1),
        );
        table.mark_offering(
            "m5.large",
            "us-east-1a",
            "spot",
            now + Duration::from_secs(3),
        );
        assert_eq!(table.len(), 1);
        table.expire(now + Duration::from_secs(2));
        assert!(table.is_unavailable("m5.large", "us-east-1a", "spot", &[]));
    }
}
