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
#        garbage-collection grace period without waiting.
# End of input (the test process exited or closed the pipe) stops the server.
# moto 5.2 ignores CreateFleet's ClientToken (a repeat launches again); the server started
# here answers a repeated token as EC2 does: see honour_create_fleet_client_token.
import json
import sys
import threading

try:
    from moto.server import ThreadedMotoServer
    from moto.core.utils import utcnow
    from moto.ec2.models import ec2_backends
    from moto.ssm.models import Parameter, ssm_backends
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses.fleets import Fleets
    from datetime import datetime
except Exception as err:  # moto missing or broken: say so on the protocol line
    print(f"ERROR moto is not importable ({err}); install it with: pip install 'moto[server]'", flush=True)
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
    honour_create_fleet_client_token()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    print(f"PORT {port}", flush=True)
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
            else:
                raise ValueError(f"unknown op {cmd.get('op')!r}")
            print("OK", flush=True)
        except Exception as err:
            print(f"ERROR {type(err).__name__}: {err}", flush=True)
    server.stop()


main()
