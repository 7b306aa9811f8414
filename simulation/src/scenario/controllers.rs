//! The controller replicas of a scenario. With more than one, each runs with leader election
//! on its own identity, as the Helm chart's replicas do. A kill is a crash, not a shutdown:
//! the replica is cut off from the API server at once (the emulator's partition: its
//! requests hang and are never applied, so it neither releases its Lease nor finishes a
//! write), then its tasks are torn down in the background without draining; the others take
//! over when the Lease lapses. A restart stops every replica gracefully and starts as many
//! fresh ones (new identities, as new pods get).

use std::time::Duration;

use super::super::controller_threads::Controller;
use super::super::world::{Replica, StartError, World};
use kerf_actors::supervisor::UnknownActor;

/// The running replicas, oldest first.
pub struct Replicas {
    running: Vec<(String, Controller)>,
    count: usize,
    flags: Vec<String>,
    generation: usize,
}

impl Replicas {
    /// Starts `count` replicas with `flags` (settings as flags) and waits until each synced.
    pub async fn start(
        world: &World,
        count: usize,
        flags: Vec<String>,
    ) -> Result<Self, StartError> {
        let mut replicas = Self {
            running: Vec::new(),
            count,
            flags,
            generation: 0,
        };
        replicas.start_all(world).await?;
        Ok(replicas)
    }

    async fn start_all(&mut self, world: &World) -> Result<(), StartError> {
        self.generation += 1;
        for i in 0..self.count {
            let identity = format!("kerf-{}-{i}", self.generation);
            let daemon = world
                .start_replica(&Replica {
                    identity: identity.clone(),
                    flags: self.flags.clone(),
                    leader_election: self.count > 1,
                    ..Replica::alone(&identity)
                })
                .await?;
            self.running.push((identity, daemon));
        }
        Ok(())
    }

    /// The replica leading now, if any.
    pub fn leader(&self) -> Option<&Controller> {
        self.running
            .iter()
            .map(|(_, d)| d)
            .find(|d| *d.leader.borrow())
    }

    /// Makes the leader's `actor` (every replica's while none leads) panic on its next
    /// `count` messages.
    pub fn arm_panics(&self, actor: &str, count: u32) -> Result<(), UnknownActor> {
        let armed: Vec<&Controller> = match self.leader() {
            Some(leader) => vec![leader],
            None => self.running.iter().map(|(_, d)| d).collect(),
        };
        for controller in armed {
            controller.supervision().faults().arm(actor, count)?;
        }
        Ok(())
    }

    /// Each running replica that exhausted an actor's restart budget, with the actor: an
    /// installed kerf would fail `/healthz` and be restarted by Kubernetes.
    pub fn unhealthy(&self) -> Vec<String> {
        self.running
            .iter()
            .filter_map(|(id, d)| {
                d.unhealthy()
                    .borrow()
                    .as_ref()
                    .map(|e| format!("{id}: {e}"))
            })
            .collect()
    }

    /// Identities of the running replicas.
    pub fn identities(&self) -> Vec<String> {
        self.running.iter().map(|(id, _)| id.clone()).collect()
    }

    /// The leader's index (or, with `leader` false, the newest replica's).
    fn index_of(&self, leader: bool) -> Option<usize> {
        if leader {
            self.running.iter().position(|(_, d)| *d.leader.borrow())
        } else {
            self.running.len().checked_sub(1)
        }
    }

    /// The identity of the leader (or, with `leader` false, of the newest replica).
    pub fn choose(&self, leader: bool) -> Option<String> {
        self.index_of(leader).map(|i| self.running[i].0.clone())
    }

    /// Kills the leader (or, with `any`, the newest replica); returns its identity, or
    /// `None` when there was none to kill.
    pub fn kill(&mut self, world: &World, leader: bool) -> Option<String> {
        let index = self.index_of(leader)?;
        let (identity, daemon) = self.running.remove(index);
        world.server.faults().partition(&identity);
        // Its tasks are cut off and end on the shutdown signal (or are aborted); nothing it
        // does from now on reaches the cluster.
        actix::spawn(daemon.stop_within(Duration::ZERO));
        Some(identity)
    }

    /// Stops every replica gracefully and starts fresh ones.
    pub async fn restart(&mut self, world: &World) -> Result<(), StartError> {
        for (_, daemon) in self.running.drain(..) {
            daemon.stop().await;
        }
        self.start_all(world).await
    }

    pub async fn stop(self) {
        for (_, daemon) in self.running {
            daemon.stop().await;
        }
    }
}
