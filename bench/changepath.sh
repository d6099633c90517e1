#!/usr/bin/env bash
# changepath.sh runs the shared change-path harness (../shared/perf, issue 13)
# the way its run.sh does, with one more peer: bench/filefloor, the least a
# process that keeps the keys in a file can do. Each workload runs in its own
# invocation (a fresh snapshot directory), ROUNDS times, workloads interleaved;
# it prints every round and the medians, each figure against the peers of its
# own invocation. From the project root:
#
#     bench/changepath.sh                      # 3 rounds of stream isolated burst sync, ~3 min
#     bench/changepath.sh -r 5 stream isolated
#
# Work dir: $PERF_WORK (default /tmp/regiond-perf): binaries in bin/, each
# invocation's log and raw samples in changepath/<round>-<workload>/.
set -euo pipefail
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
rounds=3
while getopts r:h o; do
  case $o in
    r) [[ $OPTARG =~ ^[1-9][0-9]*$ ]] || { echo "changepath.sh: -r wants a positive number of rounds, not '$OPTARG'" >&2; exit 2; }; rounds=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
workloads=${*:-stream isolated burst sync}
for w in $workloads; do
  case $w in stream | isolated | burst | sync) ;; *) echo "changepath.sh: unknown workload '$w' (stream isolated burst sync)" >&2; exit 2 ;; esac
done
[ -d cmd/regiond ] || { echo "changepath.sh: run from the project root (no ./cmd/regiond here)" >&2; exit 2; }
PERF=${PERF_DIR:-../shared/perf}
[ -d "$PERF/harness" ] || { echo "changepath.sh: no harness in $PERF (set PERF_DIR)" >&2; exit 2; }
PERF=$(cd "$PERF" && pwd)
W=${PERF_WORK:-/tmp/regiond-perf}; B=$W/bin; mkdir -p "$B"
[ -x "$B/etcd" ] || go build -o "$B/etcd" go.etcd.io/etcd/server/v3
(cd "$PERF/harness" && go build -o "$B/harness" .)
(cd "$PERF/naive" && go build -o "$B/naive" .)
go build -o "$B/regiond" ./cmd/regiond
go build -o "$B/filefloor" ./bench/filefloor
shm=/dev/shm/regiond-changepath-$$; trap 'rm -rf "$shm"' EXIT
out=$W/changepath; rm -rf "$out"; mkdir -p "$out"
for r in $(seq "$rounds"); do
  for w in $workloads; do
    d=$out/$r-$w; mkdir -p "$d/raw"; rm -rf "$shm"; mkdir -p "$shm"
    peers=(-peer floor=builtin:floor -peer "naive=$B/naive")
    case $w in
      stream)   args=(-tests latency -lat-n 500 -lat-gap 5ms) ;;
      isolated) args=(-tests latency -lat-n 300 -lat-gap 20ms) ;;
      burst)    args=(-tests burst -burst-n 2000) ;;
      sync)     args=(-tests initsync -init-keys 10000) ;;
    esac
    # The file floor rewrites everything on every change: a burst tells nothing.
    [ "$w" = burst ] || peers+=(-peer "filefloor=$B/filefloor")
    peers+=(-peer "regiond=$PERF/regiond-peer.sh")
    REGIOND_BIN=$B/regiond "$B/harness" -etcd-bin "$B/etcd" -workdir "$d/work" -snapdir "$shm" \
      -results "$d/results.md" -raw-dir "$d/raw" -key-infix routing/pools/ \
      -value-template '{"host":"bench.example.net","region":"bench","residency":"global","status":"active","attrs":{"m":"%[1]s","pad":"%[2]s"}}' \
      "${peers[@]}" "${args[@]}" >"$d/log" 2>&1 ||
      { echo "changepath.sh: harness failed for round $r, $w: $(tail -3 "$d/log")" >&2; exit 1; }
    rm -rf "$d/work"
    echo "round $r $w done" >&2
  done
done
python3 - "$out" "$rounds" $workloads <<'PY'
import glob, json, statistics, sys
out, rounds, workloads = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def peers(r, w):
    f = sorted(glob.glob(f"{out}/{r}-{w}/raw/*.json"))[-1]
    ps = {p["name"]: p for p in json.load(open(f))[0]["peers"]}
    need = {"stream": "lat_p50_ms", "isolated": "lat_p50_ms", "burst": "burst_ack_to_file_ms", "sync": "init_ms"}[w]
    for name, p in ps.items():
        if name != "floor" and p.get("lat_missing"):
            print(f"warning: round {r}, {w}: {name} never showed {p['lat_missing']} of its puts in its file ({f})", file=sys.stderr)
        if p.get(need) is None and not (w == "burst" and name == "floor"):
            sys.exit(f"changepath.sh: round {r}, {w}: no {need} for {name} (its log: {out}/{r}-{w}/log)")
    return ps
def med(xs): return statistics.median(xs) if xs else float("nan")
rows = []
for w in workloads:
    runs = [peers(r, w) for r in range(1, rounds + 1)]
    if w in ("stream", "isolated"):
        for q in ("p50", "p99"):
            k = f"lat_{q}_ms"
            cells = [" / ".join(f"{p[n][k]:.2f}" for n in ("floor", "naive", "filefloor", "regiond")) for p in runs]
            if q == "p50":
                rf = [p["regiond"][k] - p["floor"][k] for p in runs]
                ff = [p["filefloor"][k] - p["floor"][k] for p in runs]
                rel = f"regiond floor {med(rf):+.2f} ms (file floor {med(ff):+.2f}); behind naive in {sum(p['regiond'][k] > p['naive'][k] for p in runs)} of {rounds}"
            else:
                rf = [p["regiond"][k] / p["floor"][k] for p in runs]
                ff = [p["filefloor"][k] / p["floor"][k] for p in runs]
                rel = f"regiond ×{med(rf):.2f} the floor (file floor ×{med(ff):.2f}); behind naive in {sum(p['regiond'][k] > p['naive'][k] for p in runs)} of {rounds}"
            rows.append((f"{w} {q}, ms (floor / naive / file floor / regiond)", "; ".join(cells), rel))
    elif w == "burst":
        cells = "; ".join(f"{p['regiond']['burst_ack_to_file_ms']:.1f} ms, {p['regiond']['sessA_cpu_s']:.2f} CPU s (naive {p['naive']['burst_ack_to_file_ms']:.0f} ms)" for p in runs)
        rows.append(("burst: last ack → file; agent CPU", cells,
                     f"median {med([p['regiond']['burst_ack_to_file_ms'] for p in runs]):.1f} ms, {med([p['regiond']['sessA_cpu_s'] for p in runs]):.2f} s"))
    elif w == "sync":
        cells = "; ".join(" / ".join(f"{p[n]['init_ms']:.0f}" for n in ("floor", "naive", "filefloor", "regiond")) for p in runs)
        t = [p["regiond"]["init_ms"] / p["naive"]["init_ms"] for p in runs]
        rows.append(("sync 10k pools, ms (floor / naive / file floor / regiond)", cells, f"regiond ×{med(t):.2f} the naive time (runs {', '.join(f'×{x:.2f}' for x in t)})"))
        cells = "; ".join(" / ".join(f"{p[n]['init_maxrss_kib']/1024:.1f}" for n in ("naive", "filefloor", "regiond")) for p in runs)
        m = [p["regiond"]["init_maxrss_kib"] / p["naive"]["init_maxrss_kib"] for p in runs]
        rows.append(("sync peak RSS, MiB (naive / file floor / regiond)", cells, f"regiond ×{med(m):.2f} the naive RSS"))
print("| figure | each round | medians |")
print("|---|---|---|")
for r in rows:
    print("| " + " | ".join(r) + " |")
PY
