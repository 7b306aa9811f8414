//! The OfferingCache: the single writer of the unavailable-offerings state — offerings
//! (capacity type × instance type × zone), whole capacity types and subnets whose launch
//! recently failed — so the next solves plan around them, as upstream's
//! `UnavailableOfferings` cache does. Writers (the NodeClaim lifecycle on an insufficient-capacity
//! error, the AWS provider on fleet errors) send marks through a bounded mailbox; readers
//! (the Provisioner building instance types, the AWS provider filtering launch overrides)
//! read a shared [`Table`] under a read lock without messaging. Entries expire
//! [`UNAVAILABLE_OFFERINGS_TTL`] after their last mark, swept by a periodic tick; every add
//! and every expiry bumps sequence numbers readers use to know when to refresh what they
//! cached. [`OfferingCacheHandle`] implements the core's [`UnavailableOfferings`] trait, so a
//! cloud provider can share the actor's state.

mod table;

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use actix::prelude::*;
use kerf::cloudprovider::{OfferingRef, UnavailableOfferings};
use tokio::time::Instant;

use crate::mailbox::{DeliverError, MailboxDepth, Outbox};
use crate::supervisor;
pub use kerf::cloudprovider::UNAVAILABLE_OFFERINGS_TTL;
pub use table::Table;

/// Marks arrive in bursts: one failed CreateFleet refuses up to 60 instance types × the
/// region's zones (≈360 offerings), and a provider marking through the trait sends one
/// message per offering; a few such failures at once fit. Marks are sent with `try_send`:
/// a mark dropped on a full mailbox is counted and costs little, because the next launch
/// that tries the same offering fails again and marks it again.
pub const OFFERING_CACHE_MAILBOX_CAPACITY: usize = 1024;

/// How often expired entries are swept. An entry stays unavailable between
/// [`UNAVAILABLE_OFFERINGS_TTL`] and that plus this tick; readers see exactly what the actor
/// swept, so availability and sequence numbers never disagree.
pub const EXPIRY_TICK: Duration = Duration::from_secs(10);

/// A launch failure to record.
#[derive(Message, Debug, Clone, PartialEq, Eq)]
#[rtype(result = "()")]
pub enum Mark {
    /// Offerings the cloud refused; `reason` is its error code, for logs.
    Offerings {
        offerings: Vec<OfferingRef>,
        reason: String,
    },
    /// A whole capacity type (spot without its service-linked role).
    CapacityType(String),
    /// A subnet without free addresses.
    Subnet(String),
}

/// The actor.
pub struct OfferingCache {
    table: Arc<RwLock<Table>>,
    ttl: Duration,
    depth: MailboxDepth,
}

impl OfferingCache {
    /// Starts the actor (inside an actix `System`), supervised on the calling arbiter, with
    /// entries living `ttl`; returns the handle readers and writers share. The table lives
    /// beside the actor, so a restarted incarnation keeps every entry marked before a panic.
    pub fn start(ttl: Duration, depth: MailboxDepth) -> OfferingCacheHandle {
        let table = Arc::new(RwLock::new(Table::default()));
        let (shared, mailbox) = (Arc::clone(&table), depth.clone());
        let addr = supervisor::start_here("offering_cache", depth.clone(), move || {
            Some(Self {
                table: Arc::clone(&shared),
                ttl,
                depth: mailbox.clone(),
            })
        });
        OfferingCacheHandle {
            table,
            marks: Outbox::new(&addr, depth),
        }
    }

    fn write(&self, change: impl FnOnce(&mut Table)) {
        change(&mut self.table.write().unwrap_or_else(PoisonError::into_inner));
    }
}

impl Actor for OfferingCache {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(EXPIRY_TICK, |act, ctx| {
            let now = Instant::now();
            let mut expired = 0;
            act.write(|table| expired = table.expire(now));
            if expired > 0 {
                tracing::debug!(expired, "unavailable offerings expired");
            }
            // Without handles nobody can read or mark any more; the tick alone would keep
            // the actor alive for good.
            if !ctx.connected() {
                ctx.stop();
            }
        });
    }
}

impl Handler<Mark> for OfferingCache {
    type Result = ();

    fn handle(&mut self, mark: Mark, _ctx: &mut Context<Self>) {
        self.depth.taken();
        let until = Instant::now() + self.ttl;
        let ttl_seconds = self.ttl.as_secs();
        match mark {
            Mark::Offerings { offerings, reason } => {
                for o in &offerings {
                    tracing::debug!(
                        instance_type = %o.instance_type,
                        zone = %o.zone,
                        capacity_type = %o.capacity_type,
                        %reason,
                        ttl_seconds,
                        "removing offering from offerings"
                    );
                }
                self.write(|table| {
                    for o in &offerings {
                        table.mark_offering(&o.instance_type, &o.zone, &o.capacity_type, until);
                    }
                });
            }
            Mark::CapacityType(capacity_type) => {
                tracing::debug!(%capacity_type, ttl_seconds, "capacity type unavailable");
                self.write(|table| table.mark_capacity_type(&capacity_type, until));
            }
            Mark::Subnet(subnet_id) => {
                tracing::debug!(%subnet_id, ttl_seconds, "subnet unavailable");
                self.write(|table| table.mark_subnet(&subnet_id, until));
            }
        }
    }
}

/// What readers and writers hold: the shared table (read without messaging) and the
/// actor's mailbox (for marks). Cheap to clone; share it as `Arc<dyn UnavailableOfferings>`
/// with a cloud provider.
#[derive(Clone)]
pub struct OfferingCacheHandle {
    table: Arc<RwLock<Table>>,
    marks: Outbox<Mark>,
}

impl OfferingCacheHandle {
    /// Records offerings the cloud refused (one message for all of them).
    pub fn mark_offerings(&self, offerings: &[OfferingRef], reason: &str) {
        if offerings.is_empty() {
            return;
        }
        self.send(Mark::Offerings {
            offerings: offerings.to_vec(),
            reason: reason.to_owned(),
        });
    }

    /// Reads the current table; many lookups under one lock.
    pub fn read<T>(&self, f: impl FnOnce(&Table) -> T) -> T {
        f(&self.table.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// A read-only view of the table, for readers that must not mark (and must not keep the
    /// actor's mailbox open).
    pub fn view(&self) -> TableView {
        TableView(Arc::clone(&self.table))
    }

    /// Changes whenever anything is added or expires: the key of caches that depend on the
    /// whole table.
    pub fn generation(&self) -> u64 {
        self.read(Table::generation)
    }

    fn send(&self, mark: Mark) {
        match self.marks.try_deliver(mark) {
            Ok(()) => {}
            // Counted by the outbox; the next failing launch marks the offering again.
            Err(DeliverError::Full(_)) => {}
            Err(error @ DeliverError::Closed(_)) => {
                tracing::warn!(%error, "marking an offering unavailable");
            }
        }
    }
}

/// The table, read-only ([`OfferingCacheHandle::view`]).
#[derive(Clone)]
pub struct TableView(Arc<RwLock<Table>>);

impl TableView {
    /// Reads the current table.
    pub fn read<T>(&self, f: impl FnOnce(&Table) -> T) -> T {
        f(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }
}

impl std::fmt::Debug for OfferingCacheHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfferingCacheHandle")
            .field("entries", &self.read(Table::len))
            .field("generation", &self.generation())
            .finish()
    }
}

impl UnavailableOfferings for OfferingCacheHandle {
    fn is_unavailable(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: &str,
        subnet_ids: &[String],
    ) -> bool {
        self.read(|t| t.is_unavailable(instance_type, zone, capacity_type, subnet_ids))
    }

    fn mark_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str, reason: &str) {
        self.mark_offerings(
            &[OfferingRef::new(capacity_type, instance_type, zone)],
            reason,
        );
    }

    fn mark_capacity_type_unavailable(&self, capacity_type: &str) {
        self.send(Mark::CapacityType(capacity_type.to_owned()));
    }

    fn mark_subnet_unavailable(&self, subnet_id: &str) {
        self.send(Mark::Subnet(subnet_id.to_owned()));
    }

    fn seq_num(&self, instance_type: &str) -> u64 {
        self.read(|t| t.seq_num(instance_type))
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
