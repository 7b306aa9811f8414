//! The actor under paused tokio time: marks become visible to readers, entries expire after
//! the TTL (on the tick that follows), and the sequence numbers move on both; a panic
//! restarts the actor with its table intact.

use std::sync::Arc;

use super::testing::{paused, until_generation};
use super::*;
use crate::supervisor::Supervision;
use crate::testing::restarts;

#[test]
fn a_refused_offering_is_unavailable_until_its_ttl_passes() {
    paused(|| async {
        let cache = OfferingCache::start(
            UNAVAILABLE_OFFERINGS_TTL,
            MailboxDepth::new(
                "offering-cache-test",
                crate::offering_cache::OFFERING_CACHE_MAILBOX_CAPACITY,
            ),
        );
        let seq = cache.seq_num("m5.large");
        cache.mark_offerings(
            &[OfferingRef::new("spot", "m5.large", "us-east-1a")],
            "InsufficientInstanceCapacity",
        );
        until_generation(&cache, 1).await;
        assert!(cache.is_unavailable("m5.large", "us-east-1a", "spot", &[]));
        assert!(!cache.is_unavailable("m5.large", "us-east-1a", "on-demand", &[]));
        assert!(!cache.is_unavailable("m5.large", "us-east-1b", "spot", &[]));
        let marked = cache.seq_num("m5.large");
        assert_ne!(marked, seq, "adding changes the sequence number");
        assert_eq!(cache.seq_num("c5.large"), 0, "other types are unaffected");

        // Just short of the TTL, ticks have run and nothing expired.
        tokio::time::sleep(UNAVAILABLE_OFFERINGS_TTL - Duration::from_secs(1)).await;
        assert!(cache.is_unavailable("m5.large", "us-east-1a", "spot", &[]));
        assert_eq!(cache.seq_num("m5.large"), marked);

        // The first tick after the TTL sweeps it.
        tokio::time::sleep(EXPIRY_TICK + Duration::from_secs(1)).await;
        assert!(!cache.is_unavailable("m5.large", "us-east-1a", "spot", &[]));
        assert_ne!(
            cache.seq_num("m5.large"),
            marked,
            "expiry changes the sequence number"
        );
        assert!(cache.read(Table::is_empty));
    });
}

#[test]
fn the_trait_marks_capacity_types_and_subnets_for_every_type() {
    paused(|| async {
        let handle = OfferingCache::start(
            Duration::from_secs(60),
            MailboxDepth::new(
                "offering-cache-test",
                crate::offering_cache::OFFERING_CACHE_MAILBOX_CAPACITY,
            ),
        );
        let cache: Arc<dyn UnavailableOfferings> = Arc::new(handle.clone());
        let seq = cache.seq_num("c5.large");
        cache.mark_capacity_type_unavailable("spot");
        cache.mark_subnet_unavailable("subnet-a");
        cache.mark_unavailable(
            "m5.large",
            "us-east-1b",
            "on-demand",
            "InsufficientInstanceCapacity",
        );
        until_generation(&handle, 3).await;
        assert!(cache.is_unavailable("c5.large", "us-east-1c", "spot", &[]));
        assert!(cache.is_unavailable("m5.large", "us-east-1b", "on-demand", &[]));
        let one = ["subnet-a".to_owned()];
        let two = ["subnet-a".to_owned(), "subnet-b".to_owned()];
        assert!(cache.is_unavailable("c5.large", "us-east-1a", "on-demand", &one));
        assert!(!cache.is_unavailable("c5.large", "us-east-1a", "on-demand", &two));
        let marked = cache.seq_num("c5.large");
        assert!(
            marked >= seq + 2,
            "capacity type and subnet bump every type"
        );

        tokio::time::sleep(Duration::from_secs(60) + EXPIRY_TICK).await;
        assert!(!cache.is_unavailable("c5.large", "us-east-1c", "spot", &[]));
        assert!(!cache.is_unavailable("c5.large", "us-east-1a", "on-demand", &one));
        assert!(cache.seq_num("c5.large") > marked);
    });
}

#[test]
fn a_repeated_mark_keeps_the_offering_unavailable_for_another_ttl() {
    paused(|| async {
        let ttl = Duration::from_secs(60);
        let cache = OfferingCache::start(
            ttl,
            MailboxDepth::new(
                "offering-cache-test",
                crate::offering_cache::OFFERING_CACHE_MAILBOX_CAPACITY,
            ),
        );
        let refused = [OfferingRef::new("spot", "m5.large", "us-east-1a")];
        cache.mark_offerings(&refused, "InsufficientInstanceCapacity");
        until_generation(&cache, 1).await;
        tokio::time::sleep(ttl / 2).await;
        cache.mark_offerings(&refused, "InsufficientInstanceCapacity");
        until_generation(&cache, 2).await;
        tokio::time::sleep(ttl / 2 + EXPIRY_TICK).await;
        assert!(cache.is_unavailable("m5.large", "us-east-1a", "spot", &[]));
        tokio::time::sleep(ttl / 2).await;
        assert!(!cache.is_unavailable("m5.large", "us-east-1a", "spot", &[]));
    });
}

#[test]
fn a_panicking_cache_keeps_its_table_and_marks_and_sweeps_again() {
    paused(|| async {
        crate::metrics::handle();
        let ttl = Duration::from_secs(60);
        // The fault and the restart are this test's own: the mailbox takes its hook from the
        // scope it is made in.
        let scope = Supervision::with_backoff(Duration::from_millis(5));
        let cache = scope.sync_scope(|| {
            OfferingCache::start(
                ttl,
                MailboxDepth::new("offering_cache", OFFERING_CACHE_MAILBOX_CAPACITY),
            )
        });
        let before = restarts("offering_cache");
        cache.mark_offerings(
            &[OfferingRef::new("spot", "m5.large", "us-east-1a")],
            "InsufficientInstanceCapacity",
        );
        until_generation(&cache, 1).await;

        scope
            .faults()
            .arm("offering_cache", 1)
            .expect("a known actor");
        // The mark the panic takes is lost; a refused launch marks its offering again.
        cache.mark_subnet_unavailable("subnet-lost");
        for _ in 0..1000 {
            if scope.recent_restarts("offering_cache") == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(scope.recent_restarts("offering_cache"), 1, "restarted once");
        assert_eq!(restarts("offering_cache") - before, 1, "counted");
        assert_eq!(scope.faults().remaining("offering_cache"), 0);
        assert!(
            cache.is_unavailable("m5.large", "us-east-1a", "spot", &[]),
            "the table outlives the incarnation that marked it"
        );

        // The next incarnation, once its backoff passed, takes marks and runs the expiry tick.
        cache.mark_subnet_unavailable("subnet-a");
        tokio::time::sleep(Duration::from_millis(10)).await;
        until_generation(&cache, 2).await;
        let subnet = ["subnet-a".to_owned()];
        assert!(cache.is_unavailable("c5.large", "us-east-1b", "on-demand", &subnet));
        tokio::time::sleep(ttl + EXPIRY_TICK + Duration::from_secs(1)).await;
        assert!(cache.read(Table::is_empty), "swept after the restart");
    });
}
