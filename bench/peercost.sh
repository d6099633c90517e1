#!/usr/bin/env bash
# peercost.sh records what a change-path harness peer (../shared/perf,
# issue 13) costs the machine: it becomes the peer's command and, every
# 100 ms, samples the CPU time and the context switches of all the
# peer's threads (/proc/PID/task/*/schedstat and status). `summary`
# prints both per change over the busiest 2 s of the samples: inside a
# `stream` (500 changes, 5 ms apart, 2.5 s), so GAP_MS is 5 by default.
#
#     harness ... -peer "regiond=bench/peercost.sh run regiond ../shared/perf/regiond-peer.sh" -tests latency ...
#     bench/peercost.sh summary regiond [GAP_MS]
#
# Samples: $PERF_WORK/peercost/NAME.txt (default /tmp/regiond-perf).
set -euo pipefail
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
dir=${PERF_WORK:-/tmp/regiond-perf}/peercost
# checkName refuses a NAME that is not a plain file name (it names the samples' file).
checkName() {
  [[ $1 =~ ^[A-Za-z0-9._-]+$ && $1 != . && $1 != .. ]] ||
    { echo "peercost.sh: NAME '$1' must be a plain name (letters, digits, . _ -)" >&2; exit 2; }
}
case ${1:-} in
run)
  [ $# -ge 3 ] || usage
  name=$2; shift 2
  checkName "$name"
  mkdir -p "$dir"; out=$dir/$name.txt; : >"$out"
  pid=$$
  # The sampler watches this process, which then becomes the peer (exec):
  # the harness's signals and its memory reading reach the peer itself.
  # Shell builtins only: a sampler that forks would load the machine it
  # measures (the pause is a read, with a timeout, of a pipe nobody
  # writes). CPU time is each thread's schedstat (nanoseconds).
  (
    set +eu
    export LC_ALL=C # EPOCHREALTIME with a decimal point
    exec {pause}<> <(:)
    while [ -d /proc/$pid/task ]; do
      cpu=0 cs=0
      for t in /proc/$pid/task/*; do
        ns=0
        read -r ns _ 2>/dev/null <"$t/schedstat"
        cpu=$((cpu + ${ns:-0}))
        while read -r k v; do
          case $k in voluntary_ctxt_switches: | nonvoluntary_ctxt_switches:) cs=$((cs + v)) ;; esac
        done 2>/dev/null <"$t/status"
      done
      echo "$EPOCHREALTIME $cpu $cs" >>"$out"
      read -rt 0.1 -u "$pause"
    done
  ) &
  exec "$@"
  ;;
summary)
  [ $# -ge 2 ] || usage
  checkName "$2"
  f=$dir/$2.txt; gap=${3:-5}
  [[ $gap =~ ^[0-9]+([.][0-9]+)?$ && ! $gap =~ ^0+([.]0+)?$ ]] ||
    { echo "peercost.sh: GAP_MS '$gap' must be a positive number of milliseconds" >&2; exit 2; }
  [ -s "$f" ] || { echo "peercost.sh: no samples in $f" >&2; exit 1; }
  awk -v gap="$gap" -v name="$2" '
    { t[NR] = $1; c[NR] = $2; s[NR] = $3 }
    END {
      best = -1
      for (i = 1; i <= NR; i++) for (j = i; j <= NR; j++) if (t[j] - t[i] >= 2.0) {
        if (c[j] - c[i] > best) { best = c[j] - c[i]; bi = i; bj = j }
        break
      }
      if (best < 0) { print "peercost.sh: fewer than 2 s of samples" > "/dev/stderr"; exit 1 }
      n = (t[bj] - t[bi]) * 1000 / gap
      printf "%s: %.0f us of CPU and %.1f context switches a change (%.2f s, %d changes at %g ms)\n",
        name, best / 1000 / n, (s[bj] - s[bi]) / n, t[bj] - t[bi], n, gap
    }' "$f"
  ;;
*) usage ;;
esac
