//! The simulated kube-scheduler's `PodScheduled=False` reports, written off the scheduling
//! loop as kube-scheduler 1.34's API dispatcher (KEP-5229) writes them: a cycle queues each
//! report and goes on scheduling; a report still queued for a pod is replaced by a newer
//! one for the same pod (only the latest status matters), and dropped once the pod is bound
//! (the binding supersedes it). Written inside the cycle instead, a cycle that reported
//! thousands of pods — every pending pod's message changes each time a node is added —
//! held every later cycle, and so every binding onto the nodes that came up meanwhile,
//! until its last report was through. The queue holds at most one report per pod.
//!
//! A report is a strategic-merge patch of the one `PodScheduled` condition, as
//! kube-scheduler's `PatchPodStatus` sends: conditions merge by type, so the others on the
//! pod stay whatever the API server holds. Replacing the whole list from the scheduler's
//! cache instead dropped any condition written since the cache last saw the pod — kerf's
//! `kerf.dev/Nominated`, without which the pod's nominated node reads as a preemption and
//! kerf stops providing for it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::SchedulerStats;

/// One pod's report: its `PodScheduled` condition.
pub(crate) struct Report {
    pub namespace: String,
    pub name: String,
    pub condition: PodCondition,
}

/// Reports waiting to be written, oldest pod first, the latest report per pod.
#[derive(Default)]
struct Queue {
    order: VecDeque<String>,
    latest: HashMap<String, Report>,
}

impl Queue {
    fn push(&mut self, uid: String, report: Report) {
        if self.latest.insert(uid.clone(), report).is_none() {
            self.order.push_back(uid);
        }
    }

    fn cancel(&mut self, uid: &str) {
        self.latest.remove(uid);
    }

    /// Every queued report, in the order their pods were first queued.
    fn take(&mut self) -> Vec<Report> {
        let Queue { order, latest } = self;
        order
            .drain(..)
            .filter_map(|uid| latest.remove(&uid))
            .collect()
    }
}

/// The running writer; dropping it stops it (reports still queued are not written).
pub(crate) struct Reports {
    queue: Arc<Mutex<Queue>>,
    wake: Arc<Notify>,
    task: JoinHandle<()>,
}

impl Reports {
    /// Starts writing queued reports through `client`, `concurrency` at a time.
    pub(crate) fn start(client: Client, stats: Arc<SchedulerStats>, concurrency: usize) -> Self {
        let queue = Arc::new(Mutex::new(Queue::default()));
        let wake = Arc::new(Notify::new());
        let task = tokio::spawn(write_all(
            client,
            stats,
            concurrency.max(1),
            Arc::clone(&queue),
            Arc::clone(&wake),
        ));
        Self { queue, wake, task }
    }

    /// Queues `report` for pod `uid`, replacing one still queued for it.
    pub(crate) fn queue(&self, uid: String, report: Report) {
        self.lock().push(uid, report);
        self.wake.notify_one();
    }

    /// Drops the report still queued for pod `uid`, if any: it was bound.
    pub(crate) fn cancel(&self, uid: &str) {
        self.lock().cancel(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Reports {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Takes every queued report (in the order their pods were first queued) and writes them,
/// then waits for more.
async fn write_all(
    client: Client,
    stats: Arc<SchedulerStats>,
    concurrency: usize,
    queue: Arc<Mutex<Queue>>,
    wake: Arc<Notify>,
) {
    loop {
        let taken = queue.lock().unwrap_or_else(PoisonError::into_inner).take();
        if taken.is_empty() {
            wake.notified().await;
            continue;
        }
        futures::stream::iter(taken)
            .map(|report| write(&client, &stats, report))
            .buffer_unordered(concurrency)
            .collect::<()>()
            .await;
    }
}

async fn write(client: &Client, stats: &SchedulerStats, report: Report) {
    let api: Api<Pod> = Api::namespaced(client.clone(), &report.namespace);
    let patch = serde_json::json!({ "status": { "conditions": [report.condition] } });
    match api
        .patch_status(
            &report.name,
            &PatchParams {
                field_manager: Some(kerf::pods::SCHEDULER_FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            },
            &Patch::Strategic(&patch),
        )
        .await
    {
        Ok(_) => {
            stats.marked_unschedulable.fetch_add(1, Ordering::Relaxed);
        }
        Err(error) => {
            stats.api_errors.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%error, pod = %format!("{}/{}", report.namespace, report.name), "status patch failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(name: &str, message: &str) -> Report {
        Report {
            namespace: "default".to_owned(),
            name: name.to_owned(),
            condition: PodCondition {
                type_: "PodScheduled".to_owned(),
                message: Some(message.to_owned()),
                ..PodCondition::default()
            },
        }
    }

    fn written(reports: Vec<Report>) -> Vec<(String, String)> {
        reports
            .into_iter()
            .map(|r| {
                let message = r.condition.message.clone().unwrap_or_default();
                (r.name, message)
            })
            .collect()
    }

    #[test]
    fn a_pod_keeps_one_report_its_latest_in_its_first_place() {
        let mut queue = Queue::default();
        queue.push("a".to_owned(), report("a", "0/1"));
        queue.push("b".to_owned(), report("b", "0/1"));
        queue.push("a".to_owned(), report("a", "0/2"));
        assert_eq!(
            written(queue.take()),
            [("a".into(), "0/2".into()), ("b".into(), "0/1".into())]
        );
        assert!(queue.take().is_empty(), "taken once");
    }

    #[test]
    fn a_bound_pod_report_is_not_written() {
        let mut queue = Queue::default();
        queue.push("a".to_owned(), report("a", "0/1"));
        queue.push("b".to_owned(), report("b", "0/1"));
        queue.cancel("a");
        assert_eq!(written(queue.take()), [("b".into(), "0/1".into())]);
        queue.push("a".to_owned(), report("a", "0/3"));
        assert_eq!(
            written(queue.take()),
            [("a".into(), "0/3".into())],
            "queued again after a cancel"
        );
    }

    /// The report carries only `PodScheduled`: a condition another writer put on the pod,
    /// one the scheduler's cache may not have seen yet, stays.
    #[tokio::test]
    async fn a_report_keeps_the_other_conditions_on_the_pod() {
        use crate::apiserver::{ApiServer, ServerConfig};
        let server = ApiServer::start(ServerConfig::default())
            .await
            .expect("emulator starts");
        let url = server.url().parse().expect("url");
        let client = Client::try_from(kube::Config::new(url)).expect("client");
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": "app:1"}]}
        }))
        .expect("pod");
        pods.create(&kube::api::PostParams::default(), &pod)
            .await
            .expect("created");
        let nominated = serde_json::json!({"status": {"conditions": [
            {"type": "kerf.dev/Nominated", "status": "True", "reason": "NodeClaimRegistered"}
        ]}});
        pods.patch_status("a", &PatchParams::default(), &Patch::Strategic(&nominated))
            .await
            .expect("nominated");

        let stats = Arc::new(SchedulerStats::default());
        write(&client, &stats, report("a", "0/1 nodes are available")).await;

        let conditions = pods
            .get_status("a")
            .await
            .expect("read")
            .status
            .and_then(|s| s.conditions);
        let types: Vec<String> = conditions.into_iter().flatten().map(|c| c.type_).collect();
        assert_eq!(types, ["kerf.dev/Nominated", "PodScheduled"]);
        assert_eq!(stats.marked_unschedulable.load(Ordering::Relaxed), 1);
        server.shutdown().await;
    }
}
