#!/usr/bin/env bash
# Measurement harness for docs/PERF.md (root): brings the star topology up
# under its own prefix and pin directory (so it can run beside the tests and
# scripts/bench), then runs incxdp-bench on the four workers RUNS times and
# prints rank 0's rows, optionally with a system profile of each run.
# Does not build: run `cmake --build $BUILD_DIR --target incxdp incxdp-bench`.
#
#   bench/star_perf.sh [options] [-- incxdp-bench args]
#     --runs N        repeat the whole bench N times (default 3)
#     --profile DIR   per run: perf record -a -g (from rank 0's table header
#                     on), /proc/stat, softirqs, bpf_stats (if enabled),
#                     worker utime/stime, nstat, ethtool -S; then
#                     perf script -i DIR/runN/perf.data | bench/perf_breakdown.py --dir DIR/runN
#     --keep          leave the topology up (and reuse one that is up)
#     --down          only take a kept topology down
#     --gro on|off    set GRO on the hosts' eth0 first (topologies leave it off)
#     --bench PATH    another incxdp-bench binary (e.g. an older build)
#     --pin LIST      taskset CPU per rank, e.g. 0,0,1,1 (same as PIN_CPUS)
# Environment: BUILD_DIR (default build-perf), PREFIX (default ixp-),
# PIN (default /sys/fs/bpf/incxdp-perf), PIN_CPUS ("0,1,0,1": taskset per rank).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build-perf}
PREFIX=${PREFIX:-ixp-}
PIN=${PIN:-/sys/fs/bpf/incxdp-perf}
TOPO=topo/topologies/star.yaml
IX=$BUILD_DIR/loader/incxdp
BENCH=${BENCH:-$BUILD_DIR/bench/incxdp-bench}
RUNS=3
PROFILE=
KEEP=0
DOWN=0
GRO=
while (($#)); do
  case $1 in
  --runs) RUNS=$2; shift 2 ;;
  --profile) PROFILE=$2; shift 2 ;;
  --keep) KEEP=1; shift ;;
  --down) DOWN=1; shift ;;
  --gro) GRO=$2; shift 2 ;;
  --bench) BENCH=$2; shift 2 ;;
  --pin) PIN_CPUS=$2; shift 2 ;;
  --) shift; break ;;
  *) break ;;
  esac
done

in_ns() { local n=$1; shift; nsenter --net="/var/run/netns/${PREFIX}$n" "$@"; }

down() {
  if [[ -e /var/run/netns/${PREFIX}sw ]]; then
    in_ns sw "$IX" unload --pin-dir "$PIN" >/dev/null 2>&1 || true
  fi
  "$IX" topo down "$TOPO" --prefix "$PREFIX" >/dev/null 2>&1 || true
}

if ((DOWN)); then
  down
  exit 0
fi

# A topology left by an earlier --keep whose engine is gone: start over.
if [[ -e /var/run/netns/${PREFIX}sw && ! -e $PIN/incxdp_info ]]; then
  down
fi
if [[ ! -e /var/run/netns/${PREFIX}sw ]]; then
  "$IX" topo up "$TOPO" --prefix "$PREFIX" >/dev/null
  in_ns sw "$IX" load --pin-dir "$PIN" -i p-w0 -i p-w1 -i p-w2 -i p-w3 >/dev/null
  in_ns sw "$IX" job add --pin-dir "$PIN" --topo "$TOPO" --job 1 >/dev/null
fi
((KEEP)) || trap down EXIT
if [[ -n $GRO ]]; then
  for n in w0 w1 w2 w3; do in_ns "$n" ethtool -K eth0 gro "$GRO"; done
fi

IFS=, read -r -a cpus <<<"${PIN_CPUS:-}"
logdir=$(mktemp -d /tmp/incxdp-perf.XXXXXX)

# Counters of the whole machine and of every veth of the topology.
snapshot() {
  local out=$1
  {
    echo "## /proc/stat"; grep '^cpu' /proc/stat
    echo "## /proc/softirqs"; cat /proc/softirqs
    # Our programs only: those attached in this topology and the egress
    # program of our devmap (bytes 4..7 of its values). run_time_ns and
    # run_cnt need kernel.bpf_stats_enabled=1.
    echo "## bpf progs"
    for n in sw w0 w1 w2 w3; do
      for id in $(in_ns "$n" ip -d link show | grep -oE 'prog/xdp id [0-9]+' | awk '{print $3}' | sort -u); do
        echo "$n $(bpftool prog show id "$id" | head -1)"
      done
    done
    for id in $(bpftool -j map dump pinned "$PIN/incxdp_ports" 2>/dev/null | python3 -c '
import json, sys
print(*sorted({int("".join(x[2:] for x in reversed(e["value"][4:8])), 16) for e in json.load(sys.stdin)} - {0}))'); do
      echo "sw $(bpftool prog show id "$id" | head -1)"
    done
    for n in sw w0 w1 w2 w3; do
      echo "## ethtool $n"
      # ip(8), not /sys/class/net: nsenter --net keeps the root namespace's /sys.
      for i in $(in_ns "$n" ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^(eth|p-)'); do
        in_ns "$n" ethtool -S "$i" | sed "s/^/$i /" | grep -vE ': 0$' || true
      done
      echo "## nstat $n"; in_ns "$n" nstat -az 2>/dev/null | grep -E 'Udp|IpExt(In|Out)Octets' || true
    done
  } >"$out"
}

for ((run = 1; run <= RUNS; run++)); do
  in_ns sw "$IX" job reset 1 --pin-dir "$PIN" >/dev/null
  [[ -z $PROFILE ]] || { mkdir -p "$PROFILE/run$run"; snapshot "$PROFILE/run$run/before"; }
  pids=()
  for r in 0 1 2 3; do
    pre=()
    [[ -z ${cpus[r]:-} ]] || pre=(taskset -c "${cpus[r]}")
    nsenter --net="/var/run/netns/${PREFIX}w$r" "${pre[@]}" "$BENCH" --topo "$TOPO" --job 1 \
      --rank "$r" "$@" >"$logdir/rank$r.log" 2>&1 &
    pids[r]=$!
  done
  perfpid=
  [[ -z $PROFILE ]] || echo "${pids[*]}" >"$PROFILE/run$run/pids"
  if [[ -n $PROFILE ]]; then
    # Start once rank 0 has its data (the table header follows the fill), so
    # page faults and data generation stay out of the profile.
    for _ in $(seq 600); do
      grep -q 'time (median)' "$logdir/rank0.log" 2>/dev/null && break
      sleep 0.05
    done
    perf record -a -g -F 2999 -o "$PROFILE/run$run/perf.data" >/dev/null 2>&1 &
    perfpid=$!
  fi
  if [[ -n $PROFILE ]]; then
    # utime/stime (clock ticks) of each worker, the last reading before it exits.
    (
      while :; do
        alive=0
        for r in 0 1 2 3; do
          if [[ -r /proc/${pids[r]}/stat ]]; then
            alive=1
            awk '{print $14, $15}' "/proc/${pids[r]}/stat" >"$PROFILE/run$run/rank$r.ticks.tmp" 2>/dev/null &&
              mv "$PROFILE/run$run/rank$r.ticks.tmp" "$PROFILE/run$run/rank$r.ticks"
          fi
        done
        ((alive)) || break
        sleep 0.05
      done
    ) &
  fi
  fail=0
  for r in 0 1 2 3; do
    wait "${pids[r]}" || { fail=1; echo "rank $r failed:"; tail -5 "$logdir/rank$r.log"; }
  done
  if [[ -n $perfpid ]]; then
    # SIGTERM: a background job of a non-interactive shell ignores SIGINT
    # until perf installs its handler.
    kill -TERM "$perfpid"; wait "$perfpid" || true
    snapshot "$PROFILE/run$run/after"
    cp "$logdir"/rank*.log "$PROFILE/run$run/"
  fi
  echo "# run $run ($(cut -d' ' -f1-3 /proc/loadavg))"
  cat "$logdir/rank0.log"
  ((fail == 0)) || exit 1
done
rm -rf "$logdir"
