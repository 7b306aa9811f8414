# Starts moto (the AWS API emulator) in this process on a free 127.0.0.1 port for kerf's
# AWS provider tests. Protocol on stdio, one line each way:
#   out: "PORT <n>" once the server listens, or "ERROR <text>" if moto cannot start;
#   in:  JSON commands, each answered "OK" or "ERROR <text>":
#        {"op": "ssm_put", "account": "...", "region": "...", "name": "...", "value": "..."}
#        writes a parameter straight into moto's SSM backend, which is how tests seed the
#        EKS AMI parameters under /aws/service/ that moto's API refuses to create;
#        {"op": "ec2_image", "account": "...", "region": "...", "image_id": "...",
#         "architecture": "...", "creation_date": "...", "deprecation_time": "..."}
#        sets image attributes RegisterImage cannot (optional keys, RFC 3339 times);
#        {"op": "ec2_instance_launch_time", "account": "...", "region": "...",
#         "instance_id": "...", "launch_time": "..."}
#        backdates an instance (RFC 3339), e.g. to age a leaked instance past the
#        garbage-collection grace period without waiting;
#        {"op": "ec2_instance_type", "region": "...", "name": "...", "like": "...",
#         "zones": [...]}
#        makes `name` offered in exactly `zones` of the region (DescribeInstanceTypeOfferings),
#        first adding it to DescribeInstanceTypes as a copy of type `like` when moto lacks
#        it: how tests stand for a type AWS added or one the account's zones do not offer;
#        {"op": "ec2_spot_price", "region": "...", "instance_type": "...", "zone": "...",
#         "price": "..."}
#        sets the price DescribeSpotPriceHistory answers for one offering (moto answers a
#        placeholder 0.00001 for every offering; this launcher patches its handler to
#        answer the seeded prices first);
#        {"op": "ec2_capacity_reservation", "account": "...", "region": "...", "id": "cr-...",
#         "instance_type": "...", "zone": "...", "available": n, "total": n, ...}
#        seeds (or replaces) a capacity reservation: moto 5.2 has no capacity-reservation
#        API, so this launcher adds DescribeCapacityReservations answering the seeded ones
#        (optional keys: "match_criteria", "reservation_type", "interruptible", "end_date",
#        "state", "owner_id", "tags"). CreateFleet honours them as EC2 does (see
#        launch_into_reservations): a launch template targeting a seeded reservation
#        launches into it while it has room and answers ReservationCapacityExceeded once
#        it has none;
#        {"op": "ec2_capacity_reservation_end", "account": "...", "region": "...", "id": "cr-..."}
#        ends an On-Demand Capacity Reservation as EC2 does: it expires, and its instances
#        keep running as plain on-demand ones (no reservation id, preference open);
#        {"op": "ec2_placement_group", "account": "...", "region": "...", "id": "pg-...",
#         "name": "...", "strategy": "...", "partition_count": n, "state": "..."}
#        seeds (or replaces) a placement group: moto 5.2 has no placement-group API, so this
#        launcher adds DescribePlacementGroups answering the seeded ones by GroupIds or
#        GroupNames (an unknown one refused with InvalidPlacementGroup.Unknown, as EC2 does)
#        and the state, strategy and group-name filters;
#        {"op": "ec2_fleet_requests"}
#        answers "OK <json>": every CreateFleet request received so far (its parameters as
#        moto parsed them, oldest first), for tests to check what kerf sent.
# End of input (the test process exited or closed the pipe) stops the server.
# moto 5.2 ignores CreateFleet's ClientToken (a repeat launches again); the server started
# here answers a repeated token as EC2 does: see honour_create_fleet_client_token.
import copy
import json
import os
import sys
import threading

# The protocol keeps the process's stdout to itself: moto prints notices (e.g. on a call to
# a service it lacks, such as the Pricing API), which go to stderr instead of being read as
# a command's answer.
PROTOCOL = os.fdopen(os.dup(sys.stdout.fileno()), "w")
sys.stdout = sys.stderr

try:
    from moto.server import ThreadedMotoServer
    from moto.core.utils import utcnow
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.instance_types import (
        INSTANCE_TYPES,
        INSTANCE_TYPE_OFFERINGS,
        InstanceType,
        InstanceTypeBackend,
    )
    from moto.ec2.responses.spot_instances import SpotInstances
    from moto.core.responses import ActionResult
    from moto.ssm.models import Parameter, ssm_backends
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses.fleets import Fleets
    from moto.ec2.responses import EC2Response
    from datetime import datetime
except Exception as err:  # moto missing or broken: say so on the protocol line
    print(f"ERROR moto is not importable ({err}); install it with: pip install 'moto[server]'", file=PROTOCOL, flush=True)
    sys.exit(1)


def ssm_put(cmd):
    params = ssm_backends[cmd["account"]][cmd["region"]]._parameters
    versions = params[cmd["name"]]
    versions.append(
        Parameter(
            account_id=cmd["account"],
            name=cmd["name"],
            value=cmd["value"],
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=None,
            version=len(versions) + 1,
            data_type="text",
        )
    )


def ec2_image(cmd):
    image = ec2_backends[cmd["account"]][cmd["region"]].amis[cmd["image_id"]]
    if "architecture" in cmd:
        image.architecture = cmd["architecture"]
    if "creation_date" in cmd:
        image.creation_date = datetime.fromisoformat(cmd["creation_date"].replace("Z", "+00:00"))
    if "deprecation_time" in cmd:
        image.deprecation_time = cmd["deprecation_time"]


def ec2_instance_launch_time(cmd):
    instance = ec2_backends[cmd["account"]][cmd["region"]].get_instance(cmd["instance_id"])
    instance.launch_time = datetime.fromisoformat(cmd["launch_time"].replace("Z", "+00:00"))


def ec2_instance_type(cmd):
    name, region = cmd["name"], cmd["region"]
    if name not in INSTANCE_TYPES:
        info = copy.deepcopy(INSTANCE_TYPES[cmd["like"]])
        info["InstanceType"] = name
        INSTANCE_TYPES[name] = info
        InstanceTypeBackend.instance_types.append(InstanceType(name))
        INSTANCE_TYPE_OFFERINGS["region"][region].append(
            {"InstanceType": name, "Location": region, "LocationType": "region"}
        )
    offerings = INSTANCE_TYPE_OFFERINGS["availability-zone"][region]
    offerings[:] = [o for o in offerings if o["InstanceType"] != name]
    offerings.extend(
        {"InstanceType": name, "Location": zone, "LocationType": "availability-zone"}
        for zone in cmd["zones"]
    )


# (region, instance type, zone) -> the spot price DescribeSpotPriceHistory answers.
SPOT_PRICES = {}


def ec2_spot_price(cmd):
    SPOT_PRICES[(cmd["region"], cmd["instance_type"], cmd["zone"])] = cmd["price"]


def describe_spot_price_history(self):
    """moto's handler, answering the seeded prices instead of its placeholder."""
    offerings = self.ec2_backend.describe_spot_price_history(
        self._get_param("InstanceTypes", []), self._filters_from_querystring()
    )
    history = [
        {
            "InstanceType": o["InstanceType"],
            "ProductDescription": "Linux/UNIX (Amazon VPC)",
            "SpotPrice": SPOT_PRICES.get((self.region, o["InstanceType"], o["Location"]), "0.00001"),
            "AvailabilityZone": o["Location"],
            "Timestamp": "2006-01-02T15:04:05.999999999Z",
        }
        for o in offerings
    ]
    return ActionResult({"SpotPriceHistory": history})


# (account, region) -> {reservation id -> reservation as DescribeCapacityReservations
# answers it}.
CAPACITY_RESERVATIONS = {}


def ec2_capacity_reservation(cmd):
    reservation = {
        "CapacityReservationId": cmd["id"],
        "OwnerId": cmd.get("owner_id", cmd["account"]),
        "InstanceType": cmd["instance_type"],
        "AvailabilityZone": cmd["zone"],
        "AvailableInstanceCount": int(cmd["available"]),
        "TotalInstanceCount": int(cmd["total"]),
        "State": cmd.get("state", "active"),
        "InstanceMatchCriteria": cmd.get("match_criteria", "targeted"),
        "ReservationType": cmd.get("reservation_type", "default"),
        "Interruptible": bool(cmd.get("interruptible", False)),
        "Tenancy": "default",
        "InstancePlatform": "Linux/UNIX",
        "Tags": [{"Key": k, "Value": v} for k, v in sorted(cmd.get("tags", {}).items())],
    }
    if cmd.get("end_date"):
        reservation["EndDate"] = cmd["end_date"]
    CAPACITY_RESERVATIONS.setdefault((cmd["account"], cmd["region"]), {})[cmd["id"]] = reservation


def ec2_capacity_reservation_end(cmd):
    CAPACITY_RESERVATIONS[(cmd["account"], cmd["region"])][cmd["id"]]["State"] = "expired"
    for instance in ec2_backends[cmd["account"]][cmd["region"]].all_instances():
        if getattr(instance, "capacity_reservation_id", None) == cmd["id"]:
            instance.capacity_reservation_id = None
            instance.capacity_reservation_specification = {"CapacityReservationPreference": "open"}


def reservation_matches(reservation, name, values):
    if name == "state":
        return reservation["State"] in values
    if name == "owner-id":
        return reservation["OwnerId"] in values
    if name == "instance-match-criteria":
        return reservation["InstanceMatchCriteria"] in values
    if name == "instance-type":
        return reservation["InstanceType"] in values
    if name == "availability-zone":
        return reservation["AvailabilityZone"] in values
    tags = {t["Key"]: t["Value"] for t in reservation["Tags"]}
    if name == "tag-key":
        return any(v in tags for v in values)
    if name.startswith("tag:"):
        return tags.get(name[len("tag:"):]) in values
    raise EC2ClientError("InvalidParameterValue", f"The filter '{name}' is invalid")


def describe_capacity_reservations(self):
    """DescribeCapacityReservations over the seeded reservations (ids, then filters)."""
    seeded = CAPACITY_RESERVATIONS.get((self.current_account, self.region), {})
    ids = self._get_param("CapacityReservationIds", [])
    for wanted in ids:
        if wanted not in seeded:
            raise EC2ClientError(
                "InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{wanted}' does not exist",
            )
    found = [seeded[i] for i in ids] if ids else [seeded[i] for i in sorted(seeded)]
    for name, values in self._filters_from_querystring().items():
        found = [r for r in found if reservation_matches(r, name, values)]
    return ActionResult({"CapacityReservations": found})


# (account, region) -> {group id -> group as DescribePlacementGroups answers it}.
PLACEMENT_GROUPS = {}


def ec2_placement_group(cmd):
    group = {
        "GroupId": cmd["id"],
        "GroupName": cmd["name"],
        "GroupArn": f"arn:aws:ec2:{cmd['region']}:{cmd['account']}:placement-group/{cmd['name']}",
        "Strategy": cmd["strategy"],
        "State": cmd.get("state") or "available",
        "Tags": [],
    }
    if cmd.get("partition_count"):
        group["PartitionCount"] = int(cmd["partition_count"])
    PLACEMENT_GROUPS.setdefault((cmd["account"], cmd["region"]), {})[cmd["id"]] = group


def describe_placement_groups(self):
    """DescribePlacementGroups over the seeded groups (ids or names, then filters)."""
    seeded = list(PLACEMENT_GROUPS.get((self.current_account, self.region), {}).values())
    ids = self._get_param("GroupIds", [])
    names = self._get_param("GroupNames", [])
    found = seeded
    for key, wanted in (("GroupId", ids), ("GroupName", names)):
        if not wanted:
            continue
        for value in wanted:
            if not any(g[key] == value for g in seeded):
                raise EC2ClientError(
                    "InvalidPlacementGroup.Unknown",
                    f"The Placement Group '{value}' is unknown.",
                )
        found = [g for g in found if g[key] in wanted]
    fields = {"state": "State", "strategy": "Strategy", "group-name": "GroupName", "group-id": "GroupId"}
    for name, values in self._filters_from_querystring().items():
        if name not in fields:
            raise EC2ClientError("InvalidParameterValue", f"The filter '{name}' is invalid")
        found = [g for g in found if g[fields[name]] in values]
    return ActionResult({"PlacementGroups": found})


def launch_into_reservations():
    # EC2 launches a fleet whose launch template targets a capacity reservation
    # (CapacityReservationSpecification.CapacityReservationTarget) into that reservation:
    # one instance less of room per launch, the instance carrying the reservation's id,
    # preference and lifecycle (capacity-block, interruptible-capacity-reservation), and a
    # full reservation refused with ReservationCapacityExceeded. moto knows none of it, nor
    # the capacity-block / reserved-capacity target capacity types (it launches nothing for
    # them): this wrapper launches such a fleet as on-demand and then applies the rest.
    original = Fleets.create_fleet

    def target_of(backend, config):
        spec = config.get("LaunchTemplateSpecification", {})
        try:
            if "LaunchTemplateId" in spec:
                template = backend.get_launch_template(template_id=spec["LaunchTemplateId"])
            else:
                template = backend.get_launch_template_by_name(name=spec.get("LaunchTemplateName"))
        except Exception:
            return None
        data = template.get_version(template.latest_version_number).data or {}
        target = (data.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
        return target.get("CapacityReservationId")

    def create_fleet(self):
        configs = self._get_param("LaunchTemplateConfigs", [])
        if not configs:
            return original(self)
        # moto launches the first override of the first config.
        first = configs[0]
        reservation_id = target_of(self.ec2_backend, first)
        if reservation_id is None:
            return original(self)
        seeded = CAPACITY_RESERVATIONS.get((self.current_account, self.region), {})
        reservation = seeded.get(reservation_id)
        override = (first.get("Overrides") or [{}])[0]
        if reservation is None or reservation["AvailableInstanceCount"] <= 0:
            return ActionResult(
                {
                    "FleetId": "fleet-reservation-refused",
                    "Instances": [],
                    "Errors": [
                        {
                            "LaunchTemplateAndOverrides": {
                                "LaunchTemplateSpecification": first.get("LaunchTemplateSpecification", {}),
                                "Overrides": override,
                            },
                            "Lifecycle": "on-demand",
                            "ErrorCode": "ReservationCapacityExceeded",
                            "ErrorMessage": f"Insufficient capacity in capacity reservation {reservation_id}.",
                        }
                    ],
                }
            )
        target = self.params.get("TargetCapacitySpecification", {})
        target["DefaultTargetCapacityType"] = "on-demand"
        result = original(self)
        for launched in result.result.get("Instances") or []:
            for instance_id in launched.get("InstanceIds", []):
                instance = self.ec2_backend.get_instance(instance_id)
                instance.capacity_reservation_id = reservation_id
                instance.capacity_reservation_specification = {
                    "CapacityReservationPreference": "capacity-reservations-only",
                    "CapacityReservationTarget": {"CapacityReservationId": reservation_id},
                }
                if reservation["ReservationType"] == "capacity-block":
                    instance.instance_lifecycle = "capacity-block"
                elif reservation["Interruptible"]:
                    instance.instance_lifecycle = "interruptible-capacity-reservation"
                reservation["AvailableInstanceCount"] -= 1
        return result

    Fleets.create_fleet = create_fleet


# Every CreateFleet request's parameters, oldest first.
FLEET_REQUESTS = []


def record_fleet_requests():
    original = Fleets.create_fleet

    def create_fleet(self):
        FLEET_REQUESTS.append(json.loads(json.dumps(self.params, default=str)))
        return original(self)

    Fleets.create_fleet = create_fleet


def honour_create_fleet_client_token():
    # EC2 answers a CreateFleet whose ClientToken it has answered before with that answer,
    # launching nothing, and refuses the token with other parameters; kerf's launches rely
    # on it (a retry after a lost answer), so its tests' moto does the same.
    original = Fleets.create_fleet
    answered = {}
    lock = threading.Lock()

    def create_fleet(self):
        token = self._get_param("ClientToken")
        if not token:
            return original(self)
        params = sorted(
            (key, json.dumps(value, sort_keys=True, default=str))
            for key, value in self.querystring.items()
            if key != "ClientToken"
        )
        key = (self.current_account, self.region, token)
        with lock:
            seen = answered.get(key)
            if seen is not None:
                if seen[0] != params:
                    raise EC2ClientError(
                        "IdempotentParameterMismatch",
                        f"Client token {token} was used before with other parameters.",
                    )
                return seen[1]
            result = original(self)
            answered[key] = (params, result)
            return result

    Fleets.create_fleet = create_fleet


def main():
    SpotInstances.describe_spot_price_history = describe_spot_price_history
    launch_into_reservations()
    honour_create_fleet_client_token()
    record_fleet_requests()
    EC2Response.describe_capacity_reservations = describe_capacity_reservations
    EC2Response.describe_placement_groups = describe_placement_groups
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    print(f"PORT {port}", file=PROTOCOL, flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            cmd = json.loads(line)
            if cmd.get("op") == "ssm_put":
                ssm_put(cmd)
            elif cmd.get("op") == "ec2_image":
                ec2_image(cmd)
            elif cmd.get("op") == "ec2_instance_launch_time":
                ec2_instance_launch_time(cmd)
            elif cmd.get("op") == "ec2_instance_type":
                ec2_instance_type(cmd)
            elif cmd.get("op") == "ec2_spot_price":
                ec2_spot_price(cmd)
            elif cmd.get("op") == "ec2_capacity_reservation":
                ec2_capacity_reservation(cmd)
            elif cmd.get("op") == "ec2_capacity_reservation_end":
                ec2_capacity_reservation_end(cmd)
            elif cmd.get("op") == "ec2_placement_group":
                ec2_placement_group(cmd)
            elif cmd.get("op") == "ec2_fleet_requests":
                print(f"OK {json.dumps(FLEET_REQUESTS)}", file=PROTOCOL, flush=True)
                continue
            else:
                raise ValueError(f"unknown op {cmd.get('op')!r}")
            print("OK", file=PROTOCOL, flush=True)
        except Exception as err:
            print(f"ERROR {type(err).__name__}: {err}", file=PROTOCOL, flush=True)
    server.stop()


main()
