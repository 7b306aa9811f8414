//! NodePoolSchedulers follow the NodePools the controller watches: one per NodePool,
//! started when a NodePool is created and stopped when it is deleted.

use std::sync::Arc;

use kerf::catalog::Catalog;
use kerf_actors::Cloud;
use kerf_loadtest::ec2::{Ec2Config, SimulatedCloudProvider, SimulatedCloudProviderConfig};
use tokio::sync::watch;

use crate::support::*;

const REGION: &str = "us-east-1";

async fn wait_for(schedulers: &mut watch::Receiver<Vec<String>>, expected: &[&str]) {
    let waited = tokio::time::timeout(PATIENCE, schedulers.wait_for(|names| names == expected))
        .await
        .map(|r| r.is_ok());
    assert_eq!(
        waited,
        Ok(true),
        "schedulers {expected:?} in time, have {:?}",
        *schedulers.borrow()
    );
}

#[test]
fn a_scheduler_runs_per_nodepool_and_follows_nodepools_as_they_come_and_go() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        for name in ["alpha", "beta"] {
            cluster
                .create("karpenter.sh/v1", "nodepools", nodepool(name))
                .expect("nodepool created");
        }
        let provider = Arc::new(
            SimulatedCloudProvider::for_region(
                REGION,
                Ec2Config::instant(REGION),
                SimulatedCloudProviderConfig::default(),
            )
            .expect("simulated region"),
        );
        let cloud = Cloud {
            provider,
            catalog: Catalog::embedded(REGION).expect("embedded region"),
            offerings: None,
        };
        let daemon = start_daemon_with(
            &h,
            settings(&["--disable-leader-election", "true"]),
            "a",
            Some(cloud),
        )
        .await;
        let mut schedulers = daemon.node_pool_schedulers.clone();
        wait_for(&mut schedulers, &["alpha", "beta"]).await;

        cluster
            .create("karpenter.sh/v1", "nodepools", nodepool("gamma"))
            .expect("nodepool created");
        wait_for(&mut schedulers, &["alpha", "beta", "gamma"]).await;

        cluster
            .delete(
                "karpenter.sh/v1",
                "nodepools",
                None,
                "gamma",
                &kerf_loadtest::apiserver::DeleteOptions::default(),
            )
            .expect("nodepool deleted");
        wait_for(&mut schedulers, &["alpha", "beta"]).await;

        daemon.stop().await;
        h.stop().await;
    });
}
