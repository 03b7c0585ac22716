# shellcheck shell=bash
# Sourced by scripts/bench after scripts/lib/star.sh (which provides PREFIX,
# TOPO, IX, BUILD_DIR, in_ns and say): what the comparison with host-based
# AllReduce (Gloo, OpenMPI) needs on top of a running star topology.
#
#   star_enable_ip_forwarding [PREFIX]  hosts reach each other through the switch
#   star_shape RATE [host|switch]       TBF on every link, e.g. 1gbit
#   star_unshape                        removes it again
#   compare_run ARGS...                 bench/compare.py on this topology
#
# Everything these functions create lives inside the topology's namespaces,
# so star_cleanup's `topo down` removes it. docs/BENCH.md explains the
# choices.

# compare_links [PREFIX]: one line per host-switch link:
#   host host_ns host_if host_ip host_mac switch switch_ns port port_mac mtu
# read from `incxdp topo status -j`, the namespaces as they are.
compare_links() {
  local prefix=${1:-$PREFIX}
  "$IX" topo status "$TOPO" --prefix "$prefix" -j | python3 -c '
import json, sys
d = json.load(sys.stdin)
nodes = {n["name"]: n for n in d["nodes"]}
for n in d["nodes"]:
    if n["kind"] != "host":
        continue
    for i in n["ifaces"]:
        peer = nodes.get(i["peer_node"])
        if peer is None or peer["kind"] != "switch" or not i["addrs"]:
            continue
        port = next(p for p in peer["ifaces"] if p["name"] == i["peer_iface"])
        print(n["name"], n["netns"], i["name"], i["addrs"][0].split("/")[0], i["mac"],
              peer["name"], peer["netns"], port["name"], port["mac"], i["mtu"])
'
}

# star_enable_ip_forwarding [PREFIX]: IPv4 between the hosts of a switch,
# over the same veths the engine runs on. The switch gets no address and no
# bridge: its ports keep their own MACs, the engine keeps XDP_PASSing what
# is not aggregation traffic, and the switch's stack routes that:
#   switch: ip_forward=1, a /32 route and a permanent neighbour per host;
#   hosts:  a permanent neighbour per other host -> the MAC of the switch
#           port they are linked to (nobody ever ARPs; the hosts' on-link
#           /24 route then sends everything through the switch).
star_enable_ip_forwarding() {
  local prefix=${1:-$PREFIX}
  local links
  links=$(compare_links "$prefix") || return 1
  [[ -n $links ]] || { say "no host-switch links in $TOPO (prefix $prefix)" >&2; return 1; }
  local h hns hif hip hmac s sns port pmac mtu
  local o oip os
  while read -r h hns hif hip hmac s sns port pmac mtu; do
    nsenter --net="/var/run/netns/$sns" sh -ec "
      sysctl -qw net.ipv4.ip_forward=1
      sysctl -qw net.ipv4.conf.all.send_redirects=0
      ip route replace $hip/32 dev $port
      ip neigh replace $hip lladdr $hmac dev $port nud permanent" </dev/null || return 1
    while read -r o _ _ oip _ os _; do
      [[ $o != "$h" && $os == "$s" ]] || continue
      nsenter --net="/var/run/netns/$hns" ip neigh replace "$oip" lladdr "$pmac" dev "$hif" nud permanent </dev/null || return 1
    done <<<"$links"
  done <<<"$links"
}

# TBF parameters for RATE (tc syntax: 1gbit, 500mbit, 10gbit): the bucket
# holds COMPARE_TBF_BURST_US (default 4000) of traffic at RATE, i.e. the
# classic rate/HZ for this kernel's HZ=250, and at least two full frames
# (MTU 3500 + Ethernet header; a smaller bucket drops every jumbo frame).
# Smaller buckets lose rate here: under load the qdisc's watchdog runs late
# (NET_TX softirq deferred to ksoftirqd), and tokens beyond the bucket are
# lost. At 1gbit, 250 us gave 0.37 Gbit/s per link with four TCP streams at
# once, 1 ms 0.75, 2 ms 0.86, 4 ms 0.97 (docs/BENCH.md). The queue holds
# COMPARE_TBF_LATENCY (default 10ms) of traffic.
_compare_tbf_args() {
  local rate=$1 bps
  bps=$(tc_rate_bps "$rate") || return 1
  local us=${COMPARE_TBF_BURST_US:-4000}
  local burst=$((bps * us / 8000000))
  ((burst >= 8192)) || burst=8192
  echo "rate $rate burst $burst latency ${COMPARE_TBF_LATENCY:-10ms}"
}

# tc_rate_bps RATE: tc's rate syntax (bit, kbit, mbit, gbit, tbit; bps,
# kbps... are bytes) -> bits per second.
tc_rate_bps() {
  local r=${1,,} n unit
  [[ $r =~ ^([0-9]+)([a-z]*)$ ]] || { say "rate '$1': expected e.g. 1gbit, 500mbit" >&2; return 1; }
  n=${BASH_REMATCH[1]}
  unit=${BASH_REMATCH[2]}
  case $unit in
    '' | bit) echo "$n" ;;
    kbit) echo $((n * 1000)) ;;
    mbit) echo $((n * 1000000)) ;;
    gbit) echo $((n * 1000000000)) ;;
    tbit) echo $((n * 1000000000000)) ;;
    bps) echo $((n * 8)) ;;
    kbps) echo $((n * 8000)) ;;
    mbps) echo $((n * 8000000)) ;;
    gbps) echo $((n * 8000000000)) ;;
    *) say "rate '$1': unknown unit '$unit'" >&2; return 1 ;;
  esac
}

# star_shape RATE [host|switch]: every link limited to RATE in each
# direction, with TBF.
#   host (default): both directions are shaped at the host end: TBF on the
#     host interface's egress (host -> switch), and on an ifb device that
#     the host interface's ingress redirects to (switch -> host). Frames the
#     engine XDP_REDIRECTs or XDP_TXes into a host never meet the switch
#     port's qdisc, but they do cross the host's tc ingress after its XDP
#     program passes them, so this shapes incxdp and the baselines alike.
#   switch: TBF on the host's egress and on the switch port's egress, the
#     classic placement. Only stack-forwarded traffic (TCP of Gloo and MPI)
#     is shaped towards the hosts; incxdp's results bypass the qdisc. Kept
#     to demonstrate that, not for comparisons.
star_shape() {
  local rate=$1 at=${2:-host} args links
  args=$(_compare_tbf_args "$rate") || return 1
  [[ $at == host || $at == switch ]] || { say "star_shape: 'host' or 'switch', not '$at'" >&2; return 1; }
  links=$(compare_links) || return 1
  local h hns hif hip hmac s sns port pmac mtu
  while read -r h hns hif hip hmac s sns port pmac mtu; do
    # shellcheck disable=SC2086 # $args is a list of tc words
    nsenter --net="/var/run/netns/$hns" tc qdisc replace dev "$hif" root tbf $args </dev/null || return 1
    if [[ $at == host ]]; then
      local ifb=ifb-$hif
      nsenter --net="/var/run/netns/$hns" sh -ec "
        ip link show $ifb >/dev/null 2>&1 || ip link add $ifb type ifb
        ip link set $ifb mtu $mtu up
        tc qdisc replace dev $ifb root tbf $args
        tc qdisc replace dev $hif handle ffff: ingress
        tc filter del dev $hif parent ffff: 2>/dev/null || true
        tc filter add dev $hif parent ffff: protocol all prio 1 u32 match u32 0 0 \
          action mirred egress redirect dev $ifb" </dev/null || return 1
    else
      # shellcheck disable=SC2086
      nsenter --net="/var/run/netns/$sns" tc qdisc replace dev "$port" root tbf $args </dev/null || return 1
    fi
  done <<<"$links"
  say "links shaped to $rate ($at): tbf $args"
}

# star_unshape: removes what star_shape added (the namespaces' removal does
# too; this is for shaped and unshaped runs on one topology).
star_unshape() {
  local links h hns hif hip hmac s sns port pmac mtu
  links=$(compare_links) || return 1
  while read -r h hns hif hip hmac s sns port pmac mtu; do
    nsenter --net="/var/run/netns/$hns" sh -c "
      tc qdisc del dev $hif root 2>/dev/null
      tc qdisc del dev $hif ingress 2>/dev/null
      ip link del ifb-$hif 2>/dev/null" </dev/null
    nsenter --net="/var/run/netns/$sns" tc qdisc del dev "$port" root </dev/null 2>/dev/null
  done <<<"$links"
  return 0
}

# compare_run ARGS...: bench/compare.py for this topology (prefix, topology
# file, build directory); ARGS are compare.py's, e.g. --sizes, --out,
# --systems, --shape (a label only: shaping is star_shape's job). It runs
# in the background so that star_cleanup can stop it (and compare.py its
# ranks) on TERM as well: bash runs no trap while a foreground child runs.
compare_run() {
  # Debian's interpreter: python3-matplotlib is installed for it, whatever
  # python3 comes first in PATH (pyenv, venvs).
  /usr/bin/python3 bench/compare.py --prefix "$PREFIX" --topo "$TOPO" --build-dir "$BUILD_DIR" "$@" &
  local pid=$! rc=0
  pids+=("$pid")
  wait "$pid" || rc=$?
  return "$rc"
}
