#!/usr/bin/env bash
# Runs every check and test of kerf on a fresh machine: installs what the tests need
# (moto, the AWS API emulator, and helm-python-sdk, Helm's engine, from PyPI), then
# formatting, lints and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -c 'import moto.server, flask' 2>/dev/null; then
  echo "==> installing moto[server] (AWS API emulator for the AWS provider tests)"
  python3 -m pip install --quiet 'moto[server]>=5,<6'
fi

if ! python3 -c 'import helm_python' 2>/dev/null; then
  echo "==> installing helm-python-sdk (Helm v4's engine, for the chart tests)"
  python3 -m pip install --quiet 'helm-python-sdk>=0.2,<0.3'
fi

# kubectl lets the emulator's tests check that a real client can use it; optional, so a
# failed install only skips that test.
if ! command -v kubectl >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "==> installing kubectl (Debian kubernetes-client) for the API emulator's kubectl test"
  (apt-get update -qq && apt-get install -y -qq kubernetes-client) >/dev/null 2>&1 \
    || echo "    kubectl not installed; its test will be skipped"
fi

# Headless Chromium renders a scenario's report page in the scenario tests (no console
# message, a screenshot kept under target/tmp); optional like kubectl.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "==> installing chromium (Debian) for the report page test"
  (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1 \
    || echo "    chromium not installed; the report page test will be skipped"
fi

# Prometheus (Debian's, 2.42) scrapes `kerf simulate` and evaluates every panel query of
# the upstream dashboards in cli/tests/dashboards.rs; optional like kubectl.
if ! command -v prometheus >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "==> installing prometheus (Debian) for the dashboard queries test"
  (apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus) >/dev/null 2>&1 \
    || echo "    prometheus not installed; the dashboard queries test will be skipped"
fi

echo "==> commit messages"
bash scripts/check-commits.sh
echo "==> cargo fmt --check"
cargo fmt --all --check
echo "==> cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "==> cargo test"
cargo test --workspace --locked
