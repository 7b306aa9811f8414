//! Schedulers come and go with their NodePools, and a batch solved part by part on their
//! threads is exactly the sequential solve.

use kerf::labels::{HOSTNAME, ZONE};
use kerf::scheduling::testing::*;
use kerf::scheduling::{SchedulingInput, solve};

use super::*;

/// Three tainted pools with their own pods, pods linking two pools, pods no pool takes.
fn input(seed: u64) -> SchedulingInput {
    let mut rng = Rng::new(seed);
    let teams = ["a", "b", "c"];
    let mut node_pools = Vec::new();
    let mut pods = Vec::new();
    for (i, team) in teams.iter().enumerate() {
        let mut pool = node_pool(
            &format!("pool-{team}"),
            fake_instance_types(2 + rng.below(5) as u32),
        );
        pool.taints = vec![taint("team", Some(team), "NoSchedule")];
        pool.weight = i as i32;
        node_pools.push(pool);
        let mut builder = pod("x")
            .labels(&[("app", team)])
            .cpu(&format!("{}m", 200 + 100 * rng.below(20)))
            .toleration(Some("team"), "Equal", Some(team), None);
        if rng.below(2) == 0 {
            builder = builder.spread(ZONE, 1, "DoNotSchedule", &[("app", team)]);
        } else {
            builder = builder.anti_affinity_to(HOSTNAME, &[("app", team)]);
        }
        pods.extend(builder.replicas(team, 1 + rng.below(6)));
    }
    // Tolerates every team: links all three pools into one part.
    if rng.below(2) == 0 {
        pods.extend(
            pod("any")
                .cpu("500m")
                .toleration(Some("team"), "Exists", None, None)
                .replicas("any", 2),
        );
    }
    // Tolerates nothing: no pool takes them (a pool-less part).
    pods.extend(pod("lost").cpu("1").replicas("lost", 1 + rng.below(3)));
    SchedulingInput {
        pods: shared(pods),
        node_pools,
        ..Default::default()
    }
}

fn names(pools: &[&str]) -> Vec<String> {
    pools.iter().map(|p| (*p).to_owned()).collect()
}

#[tokio::test]
async fn parts_solved_on_the_schedulers_equal_the_sequential_solve() {
    let mut schedulers = Schedulers::new(Arc::new(watch::channel(Vec::new()).0));
    schedulers.reconcile(["pool-a", "pool-b", "pool-c"]);
    for seed in 0..24 {
        let mut input = input(seed);
        input.options.parallel = false;
        let sequential = solve(&input).expect("valid input");
        input.options.parallel = true;
        let batch = Batch::prepare(&input).expect("valid input");
        assert!(batch.parts().len() >= 2, "seed {seed}: {batch:?}");
        let result = schedulers.solve(&batch).await;
        assert_eq!(result, sequential, "seed {seed}");
        assert!(!result.errors.is_empty(), "the pool-less pods fail");
    }
}

#[tokio::test]
async fn without_running_schedulers_parts_are_solved_in_place() {
    let mut schedulers = Schedulers::new(Arc::new(watch::channel(Vec::new()).0));
    let input = input(7);
    let batch = Batch::prepare(&input).expect("valid input");
    let result = schedulers.solve(&batch).await;
    assert_eq!(result, solve(&input).expect("valid input"));
}

#[tokio::test]
async fn schedulers_start_and_stop_with_their_node_pools() {
    let (sender, published) = watch::channel(Vec::new());
    let mut schedulers = Schedulers::new(Arc::new(sender));
    schedulers.reconcile(["a", "b"]);
    assert_eq!(*published.borrow(), names(&["a", "b"]));
    let b_thread = schedulers.running["b"].thread.thread().clone();
    assert_eq!(b_thread.name(), Some("nodepool-b"));

    schedulers.reconcile(["a", "b", "c"]);
    assert_eq!(*published.borrow(), names(&["a", "b", "c"]));
    schedulers.reconcile(["c", "a"]);
    assert_eq!(*published.borrow(), names(&["a", "c"]));
    assert_eq!(schedulers.names(), names(&["a", "c"]));
}

#[tokio::test]
async fn a_stopped_scheduler_thread_ends() {
    let mut schedulers = Schedulers::new(Arc::new(watch::channel(Vec::new()).0));
    schedulers.reconcile(["a"]);
    let scheduler = schedulers.running.remove("a").expect("running");
    let NodePoolScheduler { mailbox, thread } = scheduler;
    drop(mailbox);
    tokio::task::spawn_blocking(move || thread.join())
        .await
        .expect("joined")
        .expect("the thread ended without panicking");
}

#[tokio::test]
async fn a_panicking_part_is_reported_unsolved_and_the_scheduler_solves_the_next() {
    crate::metrics::handle();
    let scope = Supervision::with_backoff(std::time::Duration::from_millis(1));
    let mut schedulers = Schedulers::new(Arc::new(watch::channel(Vec::new()).0));
    // Started in the scope: the scheduler's mailbox is hooked to its fault counter.
    scope.sync_scope(|| schedulers.reconcile(["pool-a", "pool-b", "pool-c"]));
    let before = crate::testing::restarts("node_pool_scheduler");
    let mut input = input(3);
    input.options.parallel = false;
    let sequential = solve(&input).expect("valid input");
    input.options.parallel = true;
    let batch = Batch::prepare(&input).expect("valid input");
    scope
        .faults()
        .arm("node_pool_scheduler", 1)
        .expect("a known actor");
    let hit = schedulers.solve(&batch).await;
    assert_ne!(hit, sequential, "one part's pods reported unsolved");
    // Whichever part took the armed message: its pods are reported as not solved.
    assert!(
        hit.errors.values().any(|e| e.contains("did not complete")),
        "{hit:?}"
    );
    assert_eq!(crate::testing::restarts("node_pool_scheduler") - before, 1);
    assert_eq!(schedulers.names().len(), 3, "every scheduler still runs");
    assert_eq!(schedulers.solve(&batch).await, sequential, "solved again");
}
