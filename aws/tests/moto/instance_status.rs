//! DescribeInstanceStatus against moto through aws-sdk-ec2: kerf's instances are asked for
//! in batches of at most 100 IDs and every running one is answered. moto reports every
//! check as passed and never schedules an event, so what an impaired status means is
//! tested on the SDK's own types in `kerf_aws::instance_status` and end to end against the
//! simulated EC2 (`actors/tests/controller/interruption_instance_status.rs`).

use k8s_openapi::jiff::Timestamp;
use kerf::interruption::instance_status::{InstanceStatusSource, MAX_IDS_PER_REQUEST, assess};
use kerf_aws::instance_status::Ec2InstanceStatus;

use crate::support::*;

#[tokio::test]
async fn statuses_of_more_instances_than_one_request_names_are_all_read_even_beside_an_unknown_id()
{
    let c = setup_clients().await;
    let image = image(&unique("status-ami"), "x86_64", "2024-01-01T00:00:00Z", &[]).await;
    let count = MAX_IDS_PER_REQUEST + 5;
    let launched = c
        .ec2
        .run_instances()
        .image_id(&image)
        .instance_type(aws_sdk_ec2::types::InstanceType::T3Micro)
        .min_count(count as i32)
        .max_count(count as i32)
        .send()
        .await
        .expect("RunInstances");
    let mut ids: Vec<String> = launched
        .instances()
        .iter()
        .filter_map(|i| i.instance_id.clone())
        .collect();
    assert_eq!(ids.len(), count);
    let stopped = ids.pop().expect("one to terminate");
    c.ec2
        .terminate_instances()
        .instance_ids(&stopped)
        .send()
        .await
        .expect("TerminateInstances");
    ids.push(stopped.clone());
    // Never launched: EC2 refuses a request naming it, which must not hide the others.
    ids.insert(3, "i-0000000000000dead".to_owned());

    // The provider's clients: DescribeInstanceStatus is checked against the IAM policy.
    let statuses = Ec2InstanceStatus::new(clients().await.ec2)
        .describe(&ids)
        .await
        .expect("DescribeInstanceStatus");

    let mut answered: Vec<&str> = statuses.iter().map(|s| s.instance_id.as_str()).collect();
    answered.sort_unstable();
    let mut running: Vec<&str> = ids
        .iter()
        .map(String::as_str)
        .filter(|id| *id != stopped && *id != "i-0000000000000dead")
        .collect();
    running.sort_unstable();
    assert_eq!(answered, running, "every running instance, and only those");
    for status in &statuses {
        assert_eq!(status.instance_checks[0].status, "passed");
        assert_eq!(status.system_checks[0].status, "passed");
        assert_eq!(assess(status, Timestamp::now()), None);
    }
}
