//! Helpers for tests that run the OfferingCache: an actix system on paused time, and a wait
//! for the actor to have applied what was sent.

use super::OfferingCacheHandle;

/// Runs `test` in an actix system on a paused current-thread runtime: `sleep` jumps the
/// clock as soon as every task (the actor included) is idle.
pub fn paused<Fut: std::future::Future<Output = ()>>(test: impl FnOnce() -> Fut) {
    let system = actix::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime builds")
    });
    system.block_on(test());
}

/// Lets the actor take what was sent (on a current-thread runtime it runs only when the
/// test yields) until the table reaches `generation`.
pub async fn until_generation(cache: &OfferingCacheHandle, generation: u64) {
    for _ in 0..1000 {
        if cache.generation() >= generation {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the actor never reached generation {generation}: {cache:?}");
}
