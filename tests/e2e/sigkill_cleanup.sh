#!/usr/bin/env bash
# A suite killed with SIGKILL (ctest's timeout, a CI runner's last resort)
# leaves nothing on the machine when scripts/sandbox runs it: no network
# namespace, no BPF pin, no process. Runs the star suite's longest case,
# waits until its workers run, SIGKILLs the wrapper and looks.
# --no-sandbox runs the suite directly, which shows that the check can fail:
# it lists what is left, then removes it.
# Usage: sigkill_cleanup.sh [--no-sandbox] SANDBOX STAR_SUITE
# Exits 0 when nothing is left, 1 when something is, 77 without root.
set -euo pipefail

sandbox=1
[[ "${1:-}" == --no-sandbox ]] && { sandbox=0; shift; }
(($# == 2)) || { echo "usage: $0 [--no-sandbox] SANDBOX STAR_SUITE" >&2; exit 2; }
wrapper=$1 suite=$(readlink -f "$2")
filter=StarAllreduce.Int32SumFromOneElementTo64MiB # workers run for a while
[[ $EUID -eq 0 ]] || { echo "skip: needs root (the suite brings up namespaces)"; exit 77; }

log=$(mktemp /tmp/incxdp-sigkill.XXXXXX)
cmd=("$suite" "--gtest_filter=$filter")
((sandbox)) && cmd=("$wrapper" "${cmd[@]}")
# A session of its own, so that whatever outlives the kill can be found.
setsid "${cmd[@]}" >"$log" 2>&1 &
top=$!
top_killed=0
cleanup() {
  ((top_killed)) || kill -KILL "$top" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*"
  echo "--- suite log (last 30 lines)"
  tail -n 30 "$log"
  exit 1
}

session_pids() { pgrep -s "$top" || true; }

# The suite's process, its pid in its own PID namespace (which names its
# namespaces and pins) and its view of the file system.
suite_pid= workers=
for _ in $(seq 3000); do # 300 s
  kill -0 "$top" 2>/dev/null || fail "the suite ended before its workers ran"
  [[ "$(ps -o sid= -p "$top" | tr -d ' ')" == "$top" ]] || fail "setsid did not start a session"
  if [[ -z "$suite_pid" ]]; then
    for p in $(session_pids); do
      [[ "$(readlink "/proc/$p/exe" 2>/dev/null)" == "$suite" ]] && suite_pid=$p
    done
  fi
  if [[ -n "$suite_pid" ]]; then
    nspid=$(awk '/^NSpid:/ {print $NF}' "/proc/$suite_pid/status")
    view=/proc/$suite_pid/root
    prefix=ixe$nspid- pins=incxdp-ixe$nspid
    workers=$(pgrep -s "$top" -x incxdp-worker || true)
    [[ -n "$workers" ]] && break
  fi
  sleep 0.1
done
[[ -n "$workers" ]] || fail "no incxdp-worker within 300 s"

# What the suite holds, seen from inside (an absolute link such as /var/run
# -> /run would lead out of $view: resolved here).
netns_dir=$(readlink -f /var/run)/netns
mapfile -t names < <(ls "$view$netns_dir" | grep "^$prefix" || true)
((${#names[@]})) || fail "the suite has no namespace $prefix*"
[[ -d "$view/sys/fs/bpf/$pins" ]] || fail "the suite pins nothing under /sys/fs/bpf/$pins"
net_inodes=()
for n in "${names[@]}"; do net_inodes+=("$(stat -L -c %i "$view$netns_dir/$n")"); done
mnt_ns=$(readlink "/proc/$suite_pid/ns/mnt")
echo "suite $suite_pid (pid $nspid inside), workers $(echo $workers), namespaces ${names[*]}"

kill -KILL "$top"
top_killed=1

# What is left, seen from here: processes of the session, anything still in
# the suite's mount namespace or one of its network namespaces, names under
# /var/run/netns and /sys/fs/bpf, nsfs mounts of its network namespaces.
leftovers() {
  local p ns ino
  for p in $(session_pids); do echo "process $p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"; done
  local self_mnt
  self_mnt=$(readlink /proc/self/ns/mnt)
  for p in /proc/[0-9]*; do
    [[ "$(readlink "$p/ns/mnt" 2>/dev/null)" == "$mnt_ns" && "$mnt_ns" != "$self_mnt" ]] &&
      echo "process ${p#/proc/} in the suite's mount namespace"
    ns=$(readlink "$p/ns/net" 2>/dev/null) || continue
    for ino in "${net_inodes[@]}"; do
      [[ "$ns" == "net:[$ino]" ]] && echo "process ${p#/proc/} in the suite's namespace net:[$ino]"
    done
  done
  ls /var/run/netns 2>/dev/null | grep "^$prefix" | sed 's/^/namespace /' || true
  [[ -e "/sys/fs/bpf/$pins" ]] && echo "pin directory /sys/fs/bpf/$pins"
  for ino in "${net_inodes[@]}"; do
    grep -q "net:\[$ino\]" /proc/self/mountinfo && echo "mount of namespace net:[$ino]"
  done
  return 0
}

# The kernel tears the namespaces down as the last process goes.
for _ in $(seq 100); do # 10 s
  [[ -z "$(session_pids)" ]] && break
  sleep 0.1
done
left=$(leftovers)
if [[ -z "$left" ]]; then
  echo "nothing left behind after SIGKILL"
  exit 0
fi
echo "left behind after SIGKILL:"
sed 's/^/  /' <<<"$left"
echo "leftovers: namespaces=$(grep -c '^namespace ' <<<"$left")" \
  "pins=$(grep -c '^pin directory ' <<<"$left")" "processes=$(grep -c '^process ' <<<"$left")"
if ((!sandbox)); then
  # Ours to remove: this session's processes, the suite's names.
  for p in $(session_pids); do kill -KILL "$p" 2>/dev/null || true; done
  for n in $(ls /var/run/netns 2>/dev/null | grep "^$prefix" || true); do ip netns del "$n" || true; done
  rm -rf "/sys/fs/bpf/$pins"
  echo "(removed)"
fi
exit 1
