# shellcheck shell=bash
# Sourced by scripts/demo and scripts/bench: the star topology as network
# namespaces, the engine loaded on the switch's ports, job 1 installed, and
# one process per worker namespace. Everything created is removed on exit,
# Ctrl-C included. The caller sets PREFIX and `say`, then calls star_up.
#
# Faults (docs/CHAOS.md): STAR_CHAOS="--loss 5% --dup 1%" applies
# `incxdp chaos --all-links` with those flags after bring-up (both
# directions of every link). If STAR_CHAOS is unset it is built from
# LOSS, DUP and CORRUPT (e.g. LOSS=5% DUP=1%), which scripts/demo and
# scripts/bench document.

TOPO=topo/topologies/star.yaml
JOB=1
RANKS=(0 1 2 3)
export BUILD_DIR=${BUILD_DIR:-build}
IX=$BUILD_DIR/loader/incxdp
WORKER=$BUILD_DIR/hostlib/incxdp-worker
BENCH=$BUILD_DIR/bench/incxdp-bench

if [[ -z ${STAR_CHAOS:-} ]]; then
  STAR_CHAOS=
  [[ -z ${LOSS:-} ]] || STAR_CHAOS+=" --loss $LOSS"
  [[ -z ${DUP:-} ]] || STAR_CHAOS+=" --dup $DUP"
  [[ -z ${CORRUPT:-} ]] || STAR_CHAOS+=" --corrupt $CORRUPT"
fi

star_require_root() {
  if [[ $EUID -ne 0 ]]; then
    say "needs root (namespaces, XDP): run $0 as root" >&2
    exit 1
  fi
}

# nsenter, not `ip netns exec`: the latter remounts /sys and hides the
# bpffs where the engine's maps are pinned.
in_ns() {
  local node=$1
  shift
  nsenter --net="/var/run/netns/${PREFIX}${node}" "$@"
}

logdir=
pids=()
topo_up=0
engine_loaded=0
chaos_on=0

# incxdp chaos on every link of the topology, extra flags appended.
star_chaos() {
  # --xdp: inside the XDP programs, where AF_XDP frames (the workers'
  # default transport) pass too; tc's hooks never see them.
  "$IX" chaos --topo "$TOPO" --prefix "$PREFIX" --all-links --xdp "$@"
}

star_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local p
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  # The injectors' pins outlive the namespaces: remove them first.
  if ((chaos_on)) && [[ -e /var/run/netns/${PREFIX}sw ]]; then
    star_chaos --off >/dev/null || say "warning: incxdp chaos --off failed" >&2
  fi
  # Unload inside the switch namespace (the ports' ifindexes live there)
  # before the namespace and its ports go away; this also removes the pins.
  if ((engine_loaded)) && [[ -e /var/run/netns/${PREFIX}sw ]]; then
    in_ns sw "$IX" unload >/dev/null || say "warning: incxdp unload failed" >&2
  fi
  if ((topo_up)); then
    "$IX" topo down "$TOPO" --prefix "$PREFIX" >/dev/null ||
      say "warning: topo down failed; run: $IX topo down $TOPO --prefix $PREFIX" >&2
  fi
  [[ -z $logdir ]] || rm -rf "$logdir"
  exit "$rc"
}

star_up() {
  if [[ -e /var/run/netns/${PREFIX}sw ]]; then
    say "namespaces ${PREFIX}* exist: another run is going on, or one was killed." >&2
    say "to remove them: $IX topo down $TOPO --prefix $PREFIX" >&2
    exit 1
  fi
  trap star_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  logdir=$(mktemp -d /tmp/incxdp-star.XXXXXX)

  say "bringing up $TOPO as namespaces ${PREFIX}*"
  topo_up=1 # set first: a failed `up` has removed its own namespaces, down is a no-op
  "$IX" topo up "$TOPO" --prefix "$PREFIX"

  # The engine's pins in a directory of this prefix, not the shared default:
  # cleanup's `unload` works on whatever engine the pin directory holds, and
  # would otherwise take down another run's engine (its ports and pins) when
  # our own load failed because that run was using the default.
  export INCXDP_PIN_DIR=${INCXDP_PIN_DIR:-/sys/fs/bpf/incxdp-${PREFIX%-}}
  say "loading the engine on sw's ports and installing job $JOB"
  engine_loaded=1
  in_ns sw "$IX" load --iface p-w0 --iface p-w1 --iface p-w2 --iface p-w3
  in_ns sw "$IX" job add --topo "$TOPO" --job "$JOB"

  if [[ -n $STAR_CHAOS ]]; then
    say "faults on both directions of every link:$STAR_CHAOS"
    chaos_on=1
    # Unquoted on purpose: STAR_CHAOS holds several flags.
    # shellcheck disable=SC2086
    star_chaos $STAR_CHAOS >/dev/null
  fi
}

# star_chaos_report: the injectors' counters, if faults are on.
star_chaos_report() {
  ((chaos_on)) || return 0
  say "fault injector counters (incxdp chaos):"
  star_chaos || true
}

# star_start_workers BIN ARGS...: BIN --topo --job --rank R ARGS in every
# worker namespace, output in $logdir/rankR.log, pids in pids[R].
star_start_workers() {
  local bin=$1
  shift
  local r
  for r in "${RANKS[@]}"; do
    # nsenter itself, not in_ns: $! must be the worker (nsenter execs it),
    # so that cleanup's kill reaches it rather than a subshell.
    nsenter --net="/var/run/netns/${PREFIX}w$r" "$bin" --topo "$TOPO" --job "$JOB" --rank "$r" "$@" \
      >"$logdir/rank$r.log" 2>&1 &
    pids[r]=$!
  done
}

# star_wait_worker R: waits for rank R; returns its exit status.
star_wait_worker() {
  local r=$1 rc=0
  wait "${pids[r]}" || rc=$?
  unset 'pids[r]'
  return "$rc"
}
