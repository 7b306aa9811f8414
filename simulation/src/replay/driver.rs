//! Applying a replay log's events to the simulated cluster, as the captured cluster's
//! clients and controllers did: a Deployment is created, scaled and deleted as an object (the
//! emulator's Deployment and ReplicaSet controllers make and remove its pods); a Job, which
//! nothing in the simulated cluster runs, is run here: up to `parallelism` pods at a time
//! until `completions` have run, each removed once it has been bound for its duration
//! (divided by the replay's speed), as a finished pod stops holding its node's resources.
//! A write the emulator refuses is counted and named, never fatal: the replay goes on.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kerf::cluster::inventory;
use kerf_loadtest::apiserver::{Cluster, PatchKind, Reason};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::log::{self, Action, Event};

/// A Job being run.
struct JobRun {
    namespace: String,
    name: String,
    /// One pod of the Job, as its controller would make it (owners stripped).
    template: Value,
    parallelism: u32,
    completions: u32,
    started: u32,
    completed: u32,
    /// Each pod's duration, in wall time.
    duration: Duration,
    running: Vec<RunningPod>,
}

struct RunningPod {
    name: String,
    bound: Option<Instant>,
}

/// Jobs and the writes made for the log.
pub struct Driver {
    cluster: Cluster,
    speed: f64,
    namespaces: BTreeSet<String>,
    jobs: BTreeMap<String, JobRun>,
    /// Replicas of each live Deployment, as the log last set them.
    replicas: BTreeMap<String, u32>,
    pub applied: usize,
    pub jobs_started: usize,
    pub jobs_completed: usize,
    /// `events[i] key: what failed`, for writes the emulator refused.
    pub failed: Vec<String>,
}

impl Driver {
    pub fn new(cluster: Cluster, speed: f64) -> Self {
        Self {
            cluster,
            speed,
            namespaces: BTreeSet::new(),
            jobs: BTreeMap::new(),
            replicas: BTreeMap::new(),
            applied: 0,
            jobs_started: 0,
            jobs_completed: 0,
            failed: Vec::new(),
        }
    }

    /// Pods the log asks for at this moment: the live Deployments' replicas and the Jobs'
    /// running pods.
    pub fn requested(&self) -> u64 {
        let deployments: u64 = self.replicas.values().map(|r| u64::from(*r)).sum();
        let jobs: usize = self.jobs.values().map(|j| j.running.len()).sum();
        deployments + jobs as u64
    }

    /// Applies one event; a refusal is recorded in `failed`.
    pub fn apply(&mut self, event: &Event) {
        match self.try_apply(event) {
            Ok(()) => self.applied += 1,
            Err(error) => self
                .failed
                .push(format!("events[{}] {}: {error}", event.index, event.key)),
        }
    }

    fn try_apply(&mut self, event: &Event) -> Result<(), String> {
        let (namespace, name) = (event.namespace(), event.name());
        match &event.action {
            Action::CreateDeployment(deployment) => {
                self.ensure_namespace(namespace)?;
                self.cluster
                    .create("apps/v1", "deployments", deployment.clone())
                    .map_err(|e| format!("creating the Deployment: {e}"))?;
                let replicas = deployment["spec"]["replicas"].as_u64().unwrap_or(1);
                self.replicas.insert(
                    event.key.clone(),
                    u32::try_from(replicas).unwrap_or(u32::MAX),
                );
            }
            Action::ScaleDeployment(replicas) => {
                self.cluster
                    .patch(
                        "apps/v1",
                        "deployments",
                        Some(namespace),
                        name,
                        PatchKind::Merge,
                        &json!({"spec": {"replicas": replicas}}),
                    )
                    .map_err(|e| format!("scaling the Deployment: {e}"))?;
                self.replicas.insert(event.key.clone(), *replicas);
            }
            Action::DeleteDeployment => {
                self.replicas.remove(&event.key);
                self.cluster
                    .delete(
                        "apps/v1",
                        "deployments",
                        Some(namespace),
                        name,
                        &Default::default(),
                    )
                    .map_err(|e| format!("deleting the Deployment: {e}"))?;
            }
            Action::CreateJob { job, duration } => {
                self.ensure_namespace(namespace)?;
                let run = self.job_run(event, job, *duration)?;
                self.jobs_started += 1;
                self.jobs.insert(event.key.clone(), run);
                self.start_pods(&event.key);
            }
            Action::DeleteJob => {
                if let Some(run) = self.jobs.remove(&event.key) {
                    for pod in &run.running {
                        self.delete_pod(&run.namespace, &pod.name);
                    }
                }
            }
        }
        Ok(())
    }

    fn job_run(&self, event: &Event, job: &Value, duration: Duration) -> Result<JobRun, String> {
        let text = serde_json::to_string(job).map_err(|e| e.to_string())?;
        let objects = log::parse_workload(&text, "Job", &event.key)?;
        let inventory = inventory::inventory(&objects).map_err(|problems| {
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        })?;
        let spec = &job["spec"];
        let count = |field: &str, default: u64| {
            u32::try_from(spec[field].as_u64().unwrap_or(default)).unwrap_or(u32::MAX)
        };
        let parallelism = if spec["suspend"] == json!(true) {
            0
        } else {
            count("parallelism", 1)
        };
        let completions = count("completions", u64::from(parallelism));
        let template = match inventory.pods.first() {
            Some(pod) => {
                let mut value = serde_json::to_value(pod.to_pod()).map_err(|e| e.to_string())?;
                if let Some(meta) = value["metadata"].as_object_mut() {
                    meta.remove("ownerReferences");
                    meta.remove("uid");
                }
                value
            }
            None if parallelism == 0 || completions == 0 => Value::Null,
            None => return Err("the Job makes no pod".to_owned()),
        };
        Ok(JobRun {
            namespace: event.namespace().to_owned(),
            name: event.name().to_owned(),
            template,
            parallelism,
            completions,
            started: 0,
            completed: 0,
            duration: duration.div_f64(self.speed),
            running: Vec::new(),
        })
    }

    /// Starts the Job's pods up to its parallelism and remaining completions.
    fn start_pods(&mut self, key: &str) {
        let Some(run) = self.jobs.get_mut(key) else {
            return;
        };
        while run.running.len() < run.parallelism as usize && run.started < run.completions {
            let name = format!("{}-{}", run.name, run.started);
            run.started += 1;
            let mut pod = run.template.clone();
            pod["metadata"]["name"] = json!(name);
            pod["metadata"]["namespace"] = json!(run.namespace);
            match self.cluster.create("v1", "pods", pod) {
                Ok(_) => run.running.push(RunningPod { name, bound: None }),
                Err(error) => {
                    // Counted as done so the Job still finishes; the failure is named.
                    run.completed += 1;
                    self.failed
                        .push(format!("Job {key}: creating pod {name}: {error}"));
                }
            }
        }
    }

    /// Finishes the Job pods that have run their duration and starts the next ones.
    pub fn tick(&mut self, now: Instant) {
        let keys: Vec<String> = self.jobs.keys().cloned().collect();
        for key in keys {
            let mut finished = Vec::new();
            if let Some(run) = self.jobs.get_mut(&key) {
                for pod in &mut run.running {
                    if pod.bound.is_none() {
                        let bound = self
                            .cluster
                            .get("v1", "pods", Some(&run.namespace), &pod.name)
                            .ok()
                            .is_some_and(|p| p["spec"]["nodeName"].as_str().is_some());
                        if bound {
                            pod.bound = Some(now);
                        }
                    }
                    if pod.bound.is_some_and(|b| now >= b + run.duration) {
                        finished.push(pod.name.clone());
                    }
                }
                run.running.retain(|p| !finished.contains(&p.name));
                run.completed += u32::try_from(finished.len()).unwrap_or(u32::MAX);
            }
            let namespace = self.jobs.get(&key).map(|r| r.namespace.clone());
            if let Some(namespace) = namespace {
                for name in &finished {
                    self.delete_pod(&namespace, name);
                }
            }
            self.start_pods(&key);
            if self
                .jobs
                .get(&key)
                .is_some_and(|r| r.completed >= r.completions && r.running.is_empty())
            {
                self.jobs.remove(&key);
                self.jobs_completed += 1;
            }
        }
    }

    fn delete_pod(&mut self, namespace: &str, name: &str) {
        match self
            .cluster
            .delete("v1", "pods", Some(namespace), name, &Default::default())
        {
            Ok(_) => {}
            Err(error) if error.reason == Reason::NotFound => {}
            Err(error) => self
                .failed
                .push(format!("deleting pod {namespace}/{name}: {error}")),
        }
    }

    fn ensure_namespace(&mut self, namespace: &str) -> Result<(), String> {
        if self.namespaces.contains(namespace) {
            return Ok(());
        }
        match self.cluster.create(
            "v1",
            "namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        ) {
            Ok(_) => {}
            Err(error) if error.reason == Reason::AlreadyExists => {}
            Err(error) => return Err(format!("creating namespace {namespace}: {error}")),
        }
        self.namespaces.insert(namespace.to_owned());
        Ok(())
    }
}
