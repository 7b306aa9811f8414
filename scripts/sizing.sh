#!/usr/bin/env bash
# One row of the sizing table in docs/performance.md: runs `kerf simulate --pods N -o json`
# (the default workload at a real cluster's pace), keeps the cluster up once it has
# reported, and prints the controller's figures as one JSON line: its heap peak, CPU
# seconds per minute during the scale-out and then idle (after IDLE seconds, default 60,
# with nothing pending), its API writes per second during the scale-out, and the summary's
# NodeClaims, p50 and process peak. The controller's CPU is its threads' (its actors'
# arbiters `actix-rt…`, its runtime `kerf-controller`, the I/O runtime `kerf-io` and the
# solver's `nodepool-…` threads) read from /proc, apart from the simulated cluster's
# (`tokio-rt-worker`). Usage: scripts/sizing.sh PODS [KERF] (KERF: target/release/kerf).
set -euo pipefail
pods="$1"
kerf="${2:-target/release/kerf}"
idle="${IDLE:-60}"
dir="$(mktemp -d)"
trap 'kill -INT "$sim" 2>/dev/null || true; rm -rf "$dir"' EXIT

# Clock ticks the controller's threads have used so far.
controller_ticks() {
  local total=0 task comm fields
  for task in /proc/"$sim"/task/*; do
    comm="$(cat "$task/comm" 2>/dev/null)" || continue
    case "$comm" in
      actix-rt*|kerf-controller*|kerf-io*|nodepool-*) ;;
      *) continue ;;
    esac
    # Fields after the parenthesised name: utime and stime are the 12th and 13th.
    fields="$(sed 's/^.*) //' "$task/stat" 2>/dev/null)" || continue
    read -r -a f <<<"$fields"
    total=$((total + f[11] + f[12]))
  done
  echo "$total"
}

start=$(date +%s.%N)
"$kerf" simulate --pods "$pods" --duration 60m -o json --kubeconfig-out "$dir/kubeconfig" \
  >"$dir/summary" 2>"$dir/log" &
sim=$!
ticks_out=0
until grep -q "keeps running" "$dir/log"; do
  kill -0 "$sim" 2>/dev/null || { cat "$dir/log" >&2; exit 1; }
  ticks_out="$(controller_ticks)"
  sleep 1
done
end=$(date +%s.%N)
ticks_out="$(controller_ticks)"
sleep "$idle"
ticks_idle="$(controller_ticks)"
hz="$(getconf CLK_TCK)"
python3 - "$dir/summary" "$pods" "$start" "$end" "$ticks_out" "$ticks_idle" "$hz" "$idle" <<'EOF'
import json, sys
path, pods, start, end, out, idle_end, hz, idle = sys.argv[1:]
s = json.load(open(path))
minutes = (float(end) - float(start)) / 60
claims = s["nodeClaims"]["created"]
writes = sum(
    claims * (k["creates"] + k["patches"] + k["statusWrites"] + k["deletes"])
    for k in s["apiWritesPerNodeClaim"]["byKind"].values()
)
print(json.dumps({
    "pods": int(pods),
    "outcome": s["outcome"],
    "nodeClaims": claims,
    "plan": s["nodeClaims"]["plan"],
    "p50Seconds": s["podLatencySeconds"]["p50"],
    "minutes": round(minutes, 1),
    "controllerHeapPeakMB": round(s["memory"]["controllerHeapPeakBytes"] / 1e6),
    "controllerHeapLiveMB": round(s["memory"]["controllerHeapLiveBytes"] / 1e6),
    "processPeakRssMB": round(s["memory"]["processPeakRssBytes"] / 1e6),
    "controllerCpuSecondsPerMinute": round(int(out) / int(hz) / minutes, 1),
    "idleCpuSecondsPerMinute": round((int(idle_end) - int(out)) / int(hz) / (int(idle) / 60), 2),
    "apiWritesPerSecond": round(writes / (minutes * 60), 1),
}))
EOF
