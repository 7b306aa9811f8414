#!/usr/bin/env python3
"""Lint and render kerf's Helm chart with Helm v4's own engine, for the chart tests.

Usage:
    python3 scripts/helm-chart.py --chart deploy/chart --release karpenter \
        --namespace kube-system [-f values.yaml ...] [--set-json '{"a": 1}'] \
        [--api-versions monitoring.coreos.com/v1,...]

Prints one JSON object: {"lint": <helm lint report>, "manifests": {template: text}}.
Values files merge as `helm -f a -f b` does (later files win, maps merge key by key), then
--set-json on top. The engine is the PyPI package helm-python-sdk (module helm_python),
which embeds Helm's Go SDK: no helm binary is needed. scripts/test.sh installs it.
"""

import argparse
import json
import sys

import helm_python as helm
from helm_python import _native


def merge(base, override):
    """Helm's coalescing of values files: maps merge recursively, anything else replaces."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(base.get(key), value) if key in base else value
        return out
    return override


def render(chart_dir, values, release, namespace, api_versions):
    """helm template. The public Chart.render has no --api-versions option, so the same
    native entry point is called with it (the option exists in the library's ABI)."""
    opts = {"name": release, "namespace": namespace, "is_install": True}
    if api_versions:
        opts["api_versions"] = api_versions
    with helm.Chart.load(chart_dir) as chart:
        text = _native.call_string(
            "helm_render", chart._raw(), json.dumps(values), json.dumps(opts)
        )
    return json.loads(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chart", required=True)
    parser.add_argument("--release", default="karpenter")
    parser.add_argument("--namespace", default="kube-system")
    parser.add_argument("-f", "--values", action="append", default=[])
    parser.add_argument("--set-json", default="{}")
    parser.add_argument("--api-versions", default="")
    args = parser.parse_args()

    values = {}
    for path in args.values:
        with open(path, encoding="utf-8") as f:
            values = merge(values, helm.values_from_yaml(f.read()) or {})
    values = merge(values, json.loads(args.set_json))
    api_versions = [v for v in args.api_versions.split(",") if v]
    try:
        lint = helm.lint(args.chart, values, strict=True, namespace=args.namespace)
        manifests = render(args.chart, values, args.release, args.namespace, api_versions)
    except helm.HelmError as error:
        print(f"helm: {error}", file=sys.stderr)
        return 1
    json.dump({"lint": lint, "manifests": manifests}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
