//! Reserved capacity: preferred over spot and on-demand where the NodePool allows it, and
//! never planned beyond a reservation's room.
use super::*;
use crate::catalog::ReservedCapacity;
use crate::labels::{CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED};

/// `fake-it-3` (4 vCPUs) with a reservation of `room` instances in test-zone-2.
fn reserved_types(room: u32) -> Vec<InstanceType> {
    let mut types = fake_instance_types(4);
    let it = &mut types[3];
    let on_demand = it
        .offerings
        .iter()
        .find(|o| o.capacity_type == CapacityType::OnDemand)
        .expect("on-demand")
        .clone();
    it.offerings.push(Offering {
        zone: "test-zone-2".into(),
        capacity_type: CapacityType::Reserved,
        price: on_demand.price / crate::catalog::RESERVED_PRICE_DIVISOR,
        reservation: Some(ReservedCapacity {
            id: "cr-1".into(),
            reservation_type: "default".into(),
            interruptible: false,
            capacity: room,
        }),
        ..on_demand
    });
    types
}

fn pool_allowing(capacity_types: &[&str], types: Vec<InstanceType>) -> NodePoolInput {
    NodePoolInput {
        requirements: vec![requirement(CAPACITY_TYPE, Operator::In, capacity_types)],
        ..node_pool("default", types)
    }
}

fn launches(r: &SchedulingResult) -> Vec<(String, String, String)> {
    let mut out: Vec<_> = r
        .new_node_claims
        .iter()
        .map(|c| {
            let l = c.launch.as_ref().expect("a launch");
            (
                l.capacity_type.clone(),
                l.instance_type.clone(),
                l.zone.clone(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn reserved_capacity_is_used_first_and_only_up_to_its_room() {
    // Three pods of 3 vCPUs: one node each; the reservation holds two.
    let input = SchedulingInput {
        pods: shared(pod("p").cpu("3").replicas("p", 3)),
        node_pools: vec![pool_allowing(
            &[CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_ON_DEMAND],
            reserved_types(2),
        )],
        ..Default::default()
    };
    let r = run(&input);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let reserved = (
        "reserved".to_owned(),
        "fake-it-3".to_owned(),
        "test-zone-2".to_owned(),
    );
    let l = launches(&r);
    assert_eq!(l.len(), 3, "{l:?}");
    assert_eq!(l.iter().filter(|x| **x == reserved).count(), 2, "{l:?}");
    let third = l.iter().find(|x| **x != reserved).expect("a third launch");
    assert_eq!(third.0, "on-demand", "{l:?}");
    // Reserved launches are pinned to their reservation; the fallback is not.
    for claim in &r.new_node_claims {
        let reserved = claim
            .launch
            .as_ref()
            .is_some_and(|l| l.capacity_type == "reserved");
        if reserved {
            assert_eq!(req_values(claim, CAPACITY_TYPE), ["reserved"]);
            assert_eq!(
                req_values(claim, crate::labels::CAPACITY_RESERVATION_ID),
                ["cr-1"]
            );
        } else {
            assert!(req_values(claim, crate::labels::CAPACITY_RESERVATION_ID).is_empty());
            // No room was counted for it: it may not take the room counted for another.
            assert_eq!(req_values(claim, CAPACITY_TYPE), ["on-demand"]);
        }
    }
}

#[test]
fn a_pool_that_does_not_allow_reserved_never_launches_into_it() {
    let input = SchedulingInput {
        pods: shared(pod("p").cpu("3").replicas("p", 2)),
        node_pools: vec![pool_allowing(&["spot", "on-demand"], reserved_types(5))],
        ..Default::default()
    };
    let l = launches(&run(&input));
    assert!(l.iter().all(|x| x.0 == "spot"), "{l:?}");
}

#[test]
fn without_room_a_reserved_only_pool_plans_no_launch() {
    let input = SchedulingInput {
        pods: shared(pod("p").cpu("3").replicas("p", 2)),
        node_pools: vec![pool_allowing(&[CAPACITY_TYPE_RESERVED], reserved_types(1))],
        ..Default::default()
    };
    let r = run(&input);
    let with_launch: Vec<_> = r
        .new_node_claims
        .iter()
        .filter_map(|c| c.launch.as_ref())
        .collect();
    assert_eq!(with_launch.len(), 1, "{:?}", r.new_node_claims);
    assert_eq!(with_launch[0].capacity_type, "reserved");
}
