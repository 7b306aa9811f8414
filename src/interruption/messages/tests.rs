use super::*;

const INSTANCE: &str = "i-0b662ef9931388ba0";

fn fixture(name: &str) -> Message {
    let body = match name {
        "spot" => include_str!("../fixtures/spot_interruption.json"),
        "rebalance" => include_str!("../fixtures/rebalance_recommendation.json"),
        "scheduled" => include_str!("../fixtures/scheduled_change.json"),
        "stopping" => include_str!("../fixtures/state_change_stopping.json"),
        "stopped" => include_str!("../fixtures/state_change_stopped.json"),
        "shutting-down" => include_str!("../fixtures/state_change_shutting_down.json"),
        "terminated" => include_str!("../fixtures/state_change_terminated.json"),
        "running" => include_str!("../fixtures/state_change_running.json"),
        "reservation" => include_str!("../fixtures/capacity_reservation_interruption.json"),
        "unknown" => include_str!("../fixtures/unknown_kind.json"),
        other => panic!("no fixture {other}"),
    };
    parse(body).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

#[test]
fn each_documented_kind_parses_to_its_instance_and_action() {
    for (name, kind, action) in [
        ("spot", Kind::SpotInterrupted, Action::CordonAndDrain),
        ("rebalance", Kind::RebalanceRecommendation, Action::NoAction),
        ("stopping", Kind::InstanceStopped, Action::CordonAndDrain),
        ("stopped", Kind::InstanceStopped, Action::CordonAndDrain),
        (
            "shutting-down",
            Kind::InstanceTerminated,
            Action::CordonAndDrain,
        ),
        (
            "terminated",
            Kind::InstanceTerminated,
            Action::CordonAndDrain,
        ),
        (
            "reservation",
            Kind::CapacityReservationInterrupted,
            Action::CordonAndDrain,
        ),
    ] {
        let message = fixture(name);
        assert_eq!(message.kind(), kind, "{name}");
        assert_eq!(message.kind().action(), action, "{name}");
        assert_eq!(message.instance_ids(), vec![INSTANCE], "{name}");
    }
}

#[test]
fn a_health_scheduled_change_names_every_affected_instance() {
    let message = fixture("scheduled");
    assert_eq!(message.kind(), Kind::ScheduledChange);
    assert_eq!(message.kind().action(), Action::CordonAndDrain);
    assert_eq!(
        message.instance_ids(),
        vec![INSTANCE, "i-05bd8f4f3c6a2a1e9"]
    );
    assert_eq!(message.id, "7bf73129-1428-4cd3-a780-95db273d1602");
    assert_eq!(
        message.time,
        "2026-11-25T17:00:00Z".parse::<Timestamp>().expect("valid")
    );
}

#[test]
fn other_kinds_states_services_and_categories_are_no_ops() {
    assert_eq!(fixture("unknown").kind(), Kind::NoOp);
    assert_eq!(fixture("running").kind(), Kind::NoOp);
    assert!(fixture("running").instance_ids().is_empty());
    let body = include_str!("../fixtures/scheduled_change.json");
    for (from, to) in [
        ("\"service\": \"EC2\"", "\"service\": \"RDS\""),
        ("\"scheduledChange\"", "\"issue\""),
    ] {
        let changed = body.replace(from, to);
        assert_eq!(parse(&changed).expect("parses").kind(), Kind::NoOp, "{to}");
    }
}

#[test]
fn malformed_messages_are_errors_naming_the_field() {
    assert!(matches!(parse("not json"), Err(ParseError::Envelope(_))));
    assert!(matches!(parse("{}"), Err(ParseError::Envelope(_))));
    let spot = include_str!("../fixtures/spot_interruption.json");
    let error = parse(&spot.replace("\"instance-id\"", "\"instance\"")).expect_err("no id");
    assert!(
        error
            .to_string()
            .contains("field detail: missing field `instance-id`"),
        "{error}"
    );
    let error = parse(&spot.replace(
        "i-0b662ef9931388ba0\",\n    \"instance-action",
        "\",\n    \"instance-action",
    ))
    .expect_err("empty id");
    assert!(
        error.to_string().contains("detail.instance-id is empty"),
        "{error}"
    );
    let error = parse(&spot.replace("2026-11-25T17:00:00Z", "yesterday")).expect_err("bad time");
    assert!(
        error.to_string().contains("field time \"yesterday\""),
        "{error}"
    );
}

#[test]
fn the_builders_write_what_the_parser_reads() {
    let time = "2026-11-25T17:00:00Z".parse::<Timestamp>().expect("valid");
    let cases = [
        (
            spot_interruption("a", "us-east-1", time, INSTANCE),
            Kind::SpotInterrupted,
        ),
        (
            rebalance_recommendation("b", "us-east-1", time, INSTANCE),
            Kind::RebalanceRecommendation,
        ),
        (
            state_change("c", "us-east-1", time, INSTANCE, "stopping"),
            Kind::InstanceStopped,
        ),
        (
            state_change("d", "us-east-1", time, INSTANCE, "terminated"),
            Kind::InstanceTerminated,
        ),
        (
            capacity_reservation_interruption("e", "us-east-1", time, INSTANCE),
            Kind::CapacityReservationInterrupted,
        ),
        (
            scheduled_change("f", "us-east-1", time, &[INSTANCE]),
            Kind::ScheduledChange,
        ),
    ];
    for (body, kind) in cases {
        let message = parse(&body).expect("builder output parses");
        assert_eq!(message.kind(), kind, "{body}");
        assert_eq!(message.instance_ids(), vec![INSTANCE]);
        assert_eq!(message.time, time);
    }
}
