#!/usr/bin/env bash
# Interleaved comparison of incxdp-bench configurations on the star topology
# (root; bench/star_perf.sh does the bring-up): every round runs every
# configuration once, so a load change on the shared machine hits all alike.
# Prints one line per run and then, per configuration and size, the median
# algbw (wall clock) and the median CPU time per allreduce summed over the
# four ranks (the bench's "cpu (ranks)" column), which the machine's other
# load disturbs much less than the wall clock.
#
#   bench/perf_matrix.sh ROUNDS SIZES 'label|star_perf options|bench args' ...
#   bench/perf_matrix.sh 5 1M,64M 'udp-base||--no-gso --no-gro' 'afxdp||--transport afxdp'
# Environment: ITERS (default 5), WARMUP (default 1), and star_perf.sh's.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=$1 sizes=$2
shift 2
out=$(mktemp /tmp/incxdp-matrix.XXXXXX)
trap 'rm -f "$out"; bench/star_perf.sh --down' EXIT
for ((i = 1; i <= rounds; i++)); do
  for spec in "$@"; do
    IFS='|' read -r label sopts bargs <<<"$spec"
    # shellcheck disable=SC2086
    bench/star_perf.sh --runs 1 --keep $sopts -- --sizes "$sizes" --iters "${ITERS:-5}" \
      --warmup "${WARMUP:-1}" $bargs 2>&1 |
      awk -v l="$label" -v ld="$(cut -d' ' -f1 /proc/loadavg)" \
        '/ (KiB|MiB|GiB) / {printf "%s %s%s %s %s %s %s\n", l, $1, $2, $5, $7, $8, ld}' | tee -a "$out"
  done
done
echo "# medians over $rounds rounds: config size algbw(MB/s) cpu_all_ranks(ms) retx(total) load"
python3 - "$out" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
order = []
for line in open(sys.argv[1]):
    label, size, bw, retx, cpu, load = line.split()
    if (label, size) not in rows:
        order.append((label, size))
    rows[(label, size)].append((float(bw), float(cpu), int(retx), float(load)))
for key in order:
    v = rows[key]
    print(f"{key[0]:18} {key[1]:>7} {statistics.median(x[0] for x in v):8.1f} "
          f"{statistics.median(x[1] for x in v):9.1f} {sum(x[2] for x in v):6d} "
          f"{statistics.median(x[3] for x in v):5.1f}")
PY
