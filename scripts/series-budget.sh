#!/usr/bin/env bash
# Samples per scrape of kerf's /metrics: runs `kerf simulate --fast --pods N` (the default
# workload, about 20 pods a node), keeps the cluster up, scrapes the controller once the
# run has reported and prints the node count (cluster state's), the samples (non-comment,
# non-blank lines) and the largest families. Usage: scripts/series-budget.sh [PODS] [KERF]
# [SIMULATE ARGS...] (KERF: the binary, target/debug/kerf by default; PODS `-` with
# `--workload FILE` among the simulate arguments). Figures: docs/performance.md.
set -euo pipefail
pods="${1:-2000}"
kerf="${2:-target/debug/kerf}"
shift $(( $# < 2 ? $# : 2 ))
sizing=(--pods "$pods")
[ "$pods" = "-" ] && sizing=()
dir="$(mktemp -d)"
trap 'kill "$sim" 2>/dev/null || true; rm -rf "$dir"' EXIT
: >"$dir/log"
"$kerf" simulate --fast "${sizing[@]}" "$@" --duration 30m --kubeconfig-out "$dir/kubeconfig" \
  >"$dir/summary" 2>"$dir/log" &
sim=$!
until grep -q "keeps running" "$dir/log"; do
  kill -0 "$sim" 2>/dev/null || { cat "$dir/log" >&2; exit 1; }
  sleep 2
done
url="$(sed -n 's/^controller metrics: //p' "$dir/log")"
curl -s "$url" >"$dir/metrics"
nodes="$(awk '$1 == "karpenter_cluster_state_node_count" { print $2 }' "$dir/metrics")"
samples="$(grep -v '^#' "$dir/metrics" | grep -c .)"
echo "pods=$pods nodes=$nodes samples=$samples"
grep -v '^#' "$dir/metrics" | grep . | sed -E 's/[{ ].*//; s/_(bucket|sum|count)$//' | sort | uniq -c \
  | sort -rn | head -15
