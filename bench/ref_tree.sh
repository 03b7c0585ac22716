#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# The reference pcap switch (ref-pcap-switch) on every switch of a RoCEv2
# tree job, instead of the XDP engine: the same-machine baseline of
# docs/BENCH.md. The topology must already be up (without `incxdp rules
# apply`/engine on the switches):
#
#   build/loader/incxdp topo up topo/topologies/tree124.yaml --prefix rps1-
#   bench/ref_tree.sh topo/topologies/tree124.yaml rps1- -- \
#       CMD ARGS...            # run CMD, then stop; exit with CMD's status
#   bench/ref_tree.sh topo/topologies/tree124.yaml rps1-   # until Ctrl-C
#
# Per switch of the job's tree it attaches incxdp_pass (XDP_PASS, native
# mode) on the switch's ports, since the hosts XDP_REDIRECT into them, and
# starts `ref-pcap-switch --switch S` inside the switch's namespace. On any
# exit the switches are stopped (their counters go to the logs) and the
# programs detached. SIGHUP to this script (its pid is $REF_TREE_PID in CMD's
# environment) resets every switch's connections and slots, which a new set
# of host processes needs, as `incxdp rules apply` does for the engine.
set -euo pipefail

usage() {
	cat <<EOF
usage: $0 [options] TOPOLOGY PREFIX [-- CMD [ARGS...]]
  --job N        roce-tree job (default 1)
  --bin PATH     ref-pcap-switch (default: build/bench, then build-ref/bench)
  --bpf-obj PATH incxdp_pass.bpf.o (default: build/bpf, then build-ref/bpf)
  --logdir DIR   per-switch logs (default: /tmp/ref-tree-PREFIX)
  -v             switches print their counters every second
EOF
	exit 2
}

here=$(cd "$(dirname "$0")/.." && pwd)
job=1 bin= obj= logdir= verbose=
while [[ $# -gt 0 ]]; do
	case $1 in
	--job) job=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	--bpf-obj) obj=$2; shift 2 ;;
	--logdir) logdir=$2; shift 2 ;;
	-v) verbose=-v; shift ;;
	-h | --help) usage ;;
	--) break ;;
	-*) echo "unknown option $1" >&2; usage ;;
	*) break ;;
	esac
done
[[ $# -ge 2 ]] || usage
topo=$1 prefix=$2
shift 2
cmd=()
if [[ $# -gt 0 ]]; then
	[[ $1 == -- ]] || usage
	shift
	cmd=("$@")
fi

first() { for f in "$@"; do [[ -e $f ]] && { echo "$f"; return; }; done; echo "$1"; }
bin=${bin:-$(first "$here/build/bench/ref-pcap-switch" "$here/build-ref/bench/ref-pcap-switch")}
obj=${obj:-$(first "$here/build/bpf/incxdp_pass.bpf.o" "$here/build-ref/bpf/incxdp_pass.bpf.o")}
logdir=${logdir:-/tmp/ref-tree-${prefix%-}}
[[ -x $bin ]] || { echo "ref_tree: no ref-pcap-switch at $bin (cmake --build ... --target ref-pcap-switch)" >&2; exit 1; }
[[ -f $obj ]] || { echo "ref_tree: no incxdp_pass.bpf.o at $obj" >&2; exit 1; }
mkdir -p "$logdir"

mapfile -t plan < <("$bin" --topo "$topo" --job "$job" --list)
[[ ${#plan[@]} -gt 0 ]] || { echo "ref_tree: job $job of $topo has no switches" >&2; exit 1; }

for line in "${plan[@]}"; do
	read -r sw _ <<<"$line"
	: >"$logdir/$sw.log" # no counters of an earlier run in the summary
done

attached=() # "netns iface"
pids=()
cpid=
cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP
	[[ -z $cpid ]] || kill -TERM "$cpid" 2>/dev/null || true
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	for a in "${attached[@]}"; do
		read -r ns ifc <<<"$a"
		ip -n "$ns" link set dev "$ifc" xdpdrv off 2>/dev/null || true
	done
	for line in "${plan[@]}"; do
		read -r sw _ <<<"$line"
		grep -h 'rx=' "$logdir/$sw.log" 2>/dev/null | tail -n 1 >&2 || true
	done
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'for p in "${pids[@]}"; do kill -HUP "$p" 2>/dev/null || true; done' HUP

for line in "${plan[@]}"; do
	read -r sw ports <<<"$line"
	ns=$prefix$sw
	[[ -e /var/run/netns/$ns ]] || { echo "ref_tree: no namespace $ns (incxdp topo up $topo --prefix $prefix first)" >&2; exit 1; }
	for ifc in $ports; do
		# xdp.frags: the section incxdp_pass is built in (any link MTU).
		# nsenter, not `ip -n`: that remounts /sys, and ip's object loader
		# wants the bpffs below it (gone there inside scripts/sandbox).
		if ! nsenter --net="/var/run/netns/$ns" ip link set dev "$ifc" xdpdrv obj "$obj" sec xdp.frags; then
			echo "ref_tree: attaching incxdp_pass on $ns:$ifc failed (is the XDP engine loaded there?)" >&2
			exit 1
		fi
		attached+=("$ns $ifc")
	done
	nsenter --net="/var/run/netns/$ns" "$bin" --topo "$topo" --job "$job" --switch "$sw" $verbose \
		>"$logdir/$sw.log" 2>&1 &
	pids+=($!)
done

# Every switch says "ready" once its pcap handles are open.
for i in "${!plan[@]}"; do
	read -r sw _ <<<"${plan[$i]}"
	for _ in $(seq 100); do
		grep -q ': ready' "$logdir/$sw.log" 2>/dev/null && break
		kill -0 "${pids[$i]}" 2>/dev/null || break
		sleep 0.1
	done
	if ! grep -q ': ready' "$logdir/$sw.log" 2>/dev/null; then
		echo "ref_tree: switch $sw did not start:" >&2
		cat "$logdir/$sw.log" >&2
		exit 1
	fi
	cat "$logdir/$sw.log"
done

export REF_TREE_PID=$$
if [[ ${#cmd[@]} -gt 0 ]]; then
	# In the background, so that HUP/INT reach the traps while it runs.
	"${cmd[@]}" &
	cpid=$!
	set +e
	while :; do
		wait "$cpid"
		rc=$?
		kill -0 "$cpid" 2>/dev/null || break # else a trap interrupted the wait
	done
	cpid=
	exit "$rc"
fi
echo "ref_tree: switches running (logs in $logdir); Ctrl-C stops them, kill -HUP $$ resets them"
while :; do
	wait -n "${pids[@]}" || true
	for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { echo "ref_tree: a switch exited" >&2; exit 1; }; done
done
