#!/usr/bin/env python3
"""Generate kerf's embedded EC2 instance-type catalog (src/catalog/data/catalog.json).

Usage (offline; run from the repository root):

    python3 scripts/gen-catalog.py [--data DIR] [--out FILE]

Inputs:
  * moto's DescribeInstanceTypes data (moto/ec2/resources/instance_types.json.gz) and its
    DescribeInstanceTypeOfferings data per region (instance_type_offerings/availability-zone/*),
    plus moto's zone-name -> zone-id table; the moto package must be importable
    (`pip install moto`).
  * DIR (default: scripts/ec2-facts, vendored in this repository):
    ec2-on-demand-prices.json (us-east-1 on-demand USD/hour), ec2-vpc-limits.json (ENI,
    IPv4 and branch-interface limits per type), ec2-bandwidth.json (network Mbps per type).

The script only extracts raw EC2 facts; every Karpenter derivation (labels, capacity,
allocatable, prices outside us-east-1, spot prices) happens in Rust (src/catalog/), so the
same code serves live DescribeInstanceTypes answers later. Selection rule, as upstream's
DescribeInstanceTypes filters: a type is kept when it supports the `hvm` virtualization
type and the `x86_64` or `arm64` architecture (this drops i386-only and mac types).

Output layout (stable, sorted, so regenerating gives a minimal diff):
  {"generatedFrom": {...}, "onDemandPricesUsEast1": {"<type>": USD per hour},
   "types": [ {raw facts}, ... sorted by name ],
   "regions": {"<region>": {"zones": [{"name", "id", "types": "<hex bitset>"}]}}}
A zone's `types` is a hex string, most significant nibble first, whose bit i (counting from
the least significant bit of the last character) is set when types[i] is offered in that
zone.
"""

import argparse
import gzip
import json
import os
import sys


def load_moto():
    try:
        import moto  # noqa: F401
        from moto.ec2.models.availability_zones_and_regions import RegionsAndZonesBackend
    except ImportError as err:  # pragma: no cover - exercised by hand
        sys.exit(f"gen-catalog: moto is required (pip install moto): {err}")
    root = os.path.join(os.path.dirname(moto.__file__), "ec2", "resources")
    with gzip.open(os.path.join(root, "instance_types.json.gz"), "rt") as f:
        types = json.load(f)
    offerings_dir = os.path.join(root, "instance_type_offerings", "availability-zone")
    offerings = {}
    for file in sorted(os.listdir(offerings_dir)):
        region = file.split(".json")[0]
        with gzip.open(os.path.join(offerings_dir, file), "rt") as f:
            offerings[region] = json.load(f)
    zone_ids = {
        region: {zone.name: zone.zone_id for zone in zones}
        for region, zones in RegionsAndZonesBackend.zones.items()
    }
    return moto.__version__, types, offerings, zone_ids


def load_json(directory, name):
    path = os.path.join(directory, name)
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as err:
        sys.exit(f"gen-catalog: cannot read {path}: {err}")


def kept(info):
    """Upstream's DescribeInstanceTypes filters: hvm and x86_64/arm64."""
    archs = info["ProcessorInfo"]["SupportedArchitectures"]
    return "hvm" in info.get("SupportedVirtualizationTypes", []) and (
        "x86_64" in archs or "arm64" in archs
    )


def raw_facts(info, limits, bandwidth):
    """The EC2 facts kerf needs for one type, named after the EC2 API fields."""
    processor = info["ProcessorInfo"]
    network = info["NetworkInfo"]
    cards = {card["NetworkCardIndex"]: card for card in network.get("NetworkCards", [])}
    default_card = cards.get(network.get("DefaultNetworkCardIndex", 0), {})
    ebs = info.get("EbsInfo", {})
    storage = info.get("InstanceStorageInfo")
    facts = {
        "name": info["InstanceType"],
        "architectures": processor["SupportedArchitectures"],
        "vcpus": info["VCpuInfo"]["DefaultVCpus"],
        "memoryMib": info["MemoryInfo"]["SizeInMiB"],
        "hypervisor": info.get("Hypervisor", ""),
        "cpuManufacturer": processor.get("Manufacturer"),
        "sustainedClockSpeedGhz": processor.get("SustainedClockSpeedInGhz"),
        "ebsOptimizedSupport": ebs.get("EbsOptimizedSupport"),
        "ebsMaximumBandwidthMbps": ebs.get("EbsOptimizedInfo", {}).get("MaximumBandwidthInMbps"),
        "encryptionInTransitSupported": network.get("EncryptionInTransitSupported", False),
        "defaultNetworkCardMaxInterfaces": default_card.get("MaximumNetworkInterfaces", 0),
        "ipv4AddressesPerInterface": network.get("Ipv4AddressesPerInterface", 0),
        "maximumEfaInterfaces": network.get("EfaInfo", {}).get("MaximumEfaInterfaces"),
        "usageClasses": info.get("SupportedUsageClasses", []),
        "networkBandwidthMbps": bandwidth,
    }
    if storage is not None:
        facts["instanceStorage"] = {
            "totalSizeGb": storage.get("TotalSizeInGB"),
            "nvmeSupport": storage.get("NvmeSupport", ""),
        }
    gpus = info.get("GpuInfo", {}).get("Gpus", [])
    if gpus:
        facts["gpus"] = [
            {
                "name": gpu["Name"],
                "manufacturer": gpu["Manufacturer"],
                "count": gpu["Count"],
                "memoryMib": gpu.get("MemoryInfo", {}).get("SizeInMiB", 0),
            }
            for gpu in gpus
        ]
    accelerators = info.get("InferenceAcceleratorInfo", {}).get("Accelerators", [])
    if accelerators:
        facts["inferenceAccelerators"] = [
            {"name": a["Name"], "manufacturer": a["Manufacturer"], "count": a["Count"]}
            for a in accelerators
        ]
    neuron = info.get("NeuronInfo", {}).get("NeuronDevices", [])
    if neuron:
        facts["neuronDevices"] = [
            {"name": n["Name"], "count": n["Count"], "coreCount": n["CoreInfo"]["Count"]}
            for n in neuron
        ]
    if limits is not None:
        facts["vpc"] = {
            "branchInterfaces": limits["branchInterfaces"],
            "trunkingCompatible": limits["trunkingCompatible"],
            "ipv4PerInterface": limits["ipv4PerInterface"],
        }
    return {key: value for key, value in facts.items() if value is not None}


def bitset_hex(indices, width):
    value = 0
    for index in indices:
        value |= 1 << index
    digits = (width + 3) // 4
    return format(value, "0{}x".format(digits))


def compact(value):
    return json.dumps(value, separators=(",", ":"))


def render(catalog):
    """One type and one zone per line, so a regenerated catalog diffs line by line."""
    lines = ['{"generatedFrom":' + compact(catalog["generatedFrom"]) + ","]
    prices = catalog["onDemandPricesUsEast1"]
    lines.append('"onDemandPricesUsEast1":{')
    lines.append(",\n".join(compact(name) + ":" + compact(price) for name, price in prices.items()))
    lines.append("},")
    lines.append('"types":[')
    lines.append(",\n".join(compact(t) for t in catalog["types"]))
    lines.append('],\n"regions":{')
    regions = []
    for region, data in catalog["regions"].items():
        zones = ",\n".join(compact(zone) for zone in data["zones"])
        regions.append(compact(region) + ':{"zones":[\n' + zones + "]}")
    lines.append(",\n".join(regions))
    lines.append("}}")
    return "\n".join(lines) + "\n"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(here)
    default_data = os.path.join(repo, "scripts", "ec2-facts")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=default_data, help="directory of the ec2-*.json files")
    parser.add_argument(
        "--out", default=os.path.join(repo, "src", "catalog", "data", "catalog.json")
    )
    args = parser.parse_args()

    moto_version, moto_types, moto_offerings, zone_ids = load_moto()
    prices = load_json(args.data, "ec2-on-demand-prices.json")
    limits = load_json(args.data, "ec2-vpc-limits.json")["limits"]
    bandwidth = load_json(args.data, "ec2-bandwidth.json")["bandwidthMegabits"]
    us_east_1 = prices["prices"]["us-east-1"]

    names = sorted(name for name, info in moto_types.items() if kept(info))
    index = {name: i for i, name in enumerate(names)}
    types = [
        raw_facts(moto_types[name], limits.get(name), bandwidth.get(name))
        for name in names
    ]

    regions = {}
    for region, rows in sorted(moto_offerings.items()):
        by_zone = {}
        for row in rows:
            if row["InstanceType"] in index:
                by_zone.setdefault(row["Location"], []).append(index[row["InstanceType"]])
        ids = zone_ids.get(region, {})
        missing = sorted(zone for zone in by_zone if zone not in ids)
        if missing:
            sys.exit(f"gen-catalog: moto has no zone id for {region} zones {missing}")
        regions[region] = {
            "zones": [
                {"name": zone, "id": ids[zone], "types": bitset_hex(by_zone[zone], len(names))}
                for zone in sorted(by_zone)
            ]
        }

    catalog = {
        "generatedFrom": {
            "moto": moto_version,
            "onDemandPrices": prices.get("generatedAt", ""),
            "script": "scripts/gen-catalog.py",
        },
        "onDemandPricesUsEast1": {name: us_east_1[name] for name in names if name in us_east_1},
        "types": types,
        "regions": regions,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(render(catalog))
    priced = len(catalog["onDemandPricesUsEast1"])
    print(
        f"gen-catalog: {len(types)} types ({priced} priced in us-east-1), "
        f"{len(regions)} regions -> {args.out} ({os.path.getsize(args.out)} bytes)"
    )


if __name__ == "__main__":
    main()
