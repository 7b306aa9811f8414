//! A parallel map that keeps order: jobs go to worker threads in turn (round-robin), and
//! results come back in the order the jobs were submitted. Each worker answers its own jobs
//! in the order it got them, so the `i`-th job's result is simply worker `i mod n`'s next
//! one: nothing is reordered, and nothing waits on a job submitted after it.
//!
//! The reader uses it for a `List`'s items, which are most of a cluster dump and most of the
//! cost of reading one: its thread cuts the items out and forwards their objects, the
//! workers parse them. At most `capacity` jobs are between [`OrderedPool::submit`] and
//! [`OrderedPool::next`]; a submit beyond that first hands back the oldest result, so the
//! caller must forward it before anything else. Every channel holds `capacity`, more than
//! a worker can ever have outstanding, so no send blocks on a queue only the caller drains.

use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::Scope;

/// A worker stopped without answering (it panicked): its job's result is lost.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct WorkerLost;

pub(super) struct OrderedPool<J, O> {
    jobs: Vec<SyncSender<J>>,
    results: Vec<Receiver<O>>,
    /// The worker of each job whose result was not taken yet, oldest first.
    pending: VecDeque<usize>,
    next_worker: usize,
    capacity: usize,
}

impl<J: Send, O: Send> OrderedPool<J, O> {
    /// Starts `workers` (at least one) threads in `scope`, each running `work` on the jobs
    /// it is given; at most `capacity` (at least one) jobs are in flight. The threads end
    /// when the pool is dropped.
    pub(super) fn start<'scope, 'env, F>(
        scope: &'scope Scope<'scope, 'env>,
        workers: usize,
        capacity: usize,
        work: &'env F,
    ) -> Self
    where
        F: Fn(J) -> O + Sync,
        J: 'scope,
        O: 'scope,
    {
        let capacity = capacity.max(1);
        let workers = workers.max(1);
        let mut jobs = Vec::with_capacity(workers);
        let mut results = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (job_sender, job_receiver) = mpsc::sync_channel::<J>(capacity);
            let (result_sender, result_receiver) = mpsc::sync_channel::<O>(capacity);
            scope.spawn(move || {
                for job in job_receiver {
                    if result_sender.send(work(job)).is_err() {
                        return;
                    }
                }
            });
            jobs.push(job_sender);
            results.push(result_receiver);
        }
        Self {
            jobs,
            results,
            pending: VecDeque::with_capacity(capacity),
            next_worker: 0,
            capacity,
        }
    }

    /// Hands `job` to the next worker. When `capacity` jobs are already in flight, the
    /// oldest one's result is taken first and returned: it comes before every other.
    pub(super) fn submit(&mut self, job: J) -> Option<Result<O, WorkerLost>> {
        let oldest = if self.pending.len() >= self.capacity {
            self.next()
        } else {
            None
        };
        let worker = self.next_worker;
        self.next_worker = (worker + 1) % self.jobs.len();
        // A worker that is gone has lost this job too; `next` reports it in its turn.
        let _ = self.jobs[worker].send(job);
        self.pending.push_back(worker);
        oldest
    }

    /// The oldest job's result, once its worker has it; `None` when no job is in flight.
    pub(super) fn next(&mut self) -> Option<Result<O, WorkerLost>> {
        let worker = self.pending.pop_front()?;
        Some(self.results[worker].recv().map_err(|_| WorkerLost))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn drain<O: Send>(pool: &mut OrderedPool<u64, O>, into: &mut Vec<O>) {
        while let Some(result) = pool.next() {
            into.push(result.expect("no worker lost"));
        }
    }

    #[test]
    fn results_come_in_submission_order_however_long_each_job_takes() {
        // Early jobs take longest, so later ones finish first on the other workers.
        let work = |n: u64| {
            std::thread::sleep(Duration::from_micros((40 - n) * 200));
            n * 10
        };
        let mut out = Vec::new();
        std::thread::scope(|scope| {
            let mut pool = OrderedPool::start(scope, 3, 8, &work);
            for n in 0..40 {
                if let Some(result) = pool.submit(n) {
                    out.push(result.expect("no worker lost"));
                }
            }
            drain(&mut pool, &mut out);
        });
        assert_eq!(out, (0..40).map(|n| n * 10).collect::<Vec<_>>());
    }

    #[test]
    fn jobs_run_at_once_on_different_workers() {
        // Each job waits (up to a bound) until the other has started: only workers running
        // at once both see it.
        let started = AtomicUsize::new(0);
        let work = |_: u64| {
            started.fetch_add(1, Ordering::SeqCst);
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while started.load(Ordering::SeqCst) < 2 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            started.load(Ordering::SeqCst) == 2
        };
        let mut met = Vec::new();
        std::thread::scope(|scope| {
            let mut pool = OrderedPool::start(scope, 2, 2, &work);
            assert!(pool.submit(0).is_none());
            assert!(pool.submit(1).is_none());
            drain(&mut pool, &mut met);
        });
        assert_eq!(met, [true, true]);
    }

    #[test]
    fn no_more_than_capacity_jobs_are_in_flight() {
        let started = AtomicUsize::new(0);
        let work = |n: u64| {
            started.fetch_add(1, Ordering::SeqCst);
            n
        };
        std::thread::scope(|scope| {
            let mut pool = OrderedPool::start(scope, 2, 4, &work);
            for n in 0..4 {
                assert!(pool.submit(n).is_none(), "room for four");
            }
            // The fifth submit must first take the oldest result back.
            assert_eq!(pool.submit(4), Some(Ok(0)));
            assert_eq!(pool.pending.len(), 4);
            let mut out = Vec::new();
            drain(&mut pool, &mut out);
            assert_eq!(out, [1, 2, 3, 4]);
            assert!(pool.next().is_none());
        });
        assert_eq!(started.load(Ordering::SeqCst), 5);
    }

    #[test]
    fn a_pool_dropped_with_jobs_in_flight_ends_its_workers() {
        let work = |n: u64| n;
        std::thread::scope(|scope| {
            let mut pool = OrderedPool::start(scope, 2, 16, &work);
            for n in 0..16 {
                assert!(pool.submit(n).is_none());
            }
            drop(pool);
        });
        // The scope joined every worker: reaching here is the test.
    }

    #[test]
    fn a_worker_that_panics_is_reported_not_skipped() {
        let work = |n: u64| {
            assert_ne!(n, 1, "job 1 fails");
            n
        };
        let seen = std::sync::Mutex::new(Vec::new());
        let outcome = std::panic::catch_unwind(|| {
            std::thread::scope(|scope| {
                let mut pool = OrderedPool::start(scope, 2, 4, &work);
                for n in 0..3 {
                    assert!(pool.submit(n).is_none());
                }
                while let Some(result) = pool.next() {
                    seen.lock().expect("unpoisoned").push(result);
                }
            });
        });
        assert!(outcome.is_err(), "the scope raises the worker's panic");
        let seen = seen.into_inner().expect("unpoisoned");
        assert_eq!(seen, [Ok(0), Err(WorkerLost), Ok(2)]);
    }
}
