#!/usr/bin/env bash
# Interleaved `bench intake --json` runs of several builds, for judging a change on
# a noisy machine (docs/benchmarks.md: one binary's figures swing by a quarter
# from run to run, so runs of A then runs of B mislead).
#
#   bench/compare-intake.sh ROUNDS LABEL=BINARY[:VAR=VALUE...] ...
#
# Each round runs every build once, in the order given; VAR=VALUE pairs go into
# that build's environment. Prints one line per run, then each build's mean and
# median of deliveries/s, the ratio to the peer, and the CPU per delivery of
# storaged and of all the suite's processes. Each run's JSON is kept in
# ${OUT:-/tmp}/compare-LABEL-ROUND.json. Copy each build's binary
# (target/release/bench) aside first: building while this runs skews it.
set -euo pipefail

if [ "$#" -lt 2 ]; then
    echo "usage: $0 ROUNDS LABEL=BINARY[:VAR=VALUE...] ..." >&2
    exit 2
fi
rounds=$1
shift
out=${OUT:-/tmp}
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT

for round in $(seq 1 "$rounds"); do
    for spec in "$@"; do
        label=${spec%%=*}
        IFS=: read -ra parts <<<"${spec#*=}"
        binary=${parts[0]}
        json=$out/compare-$label-$round.json
        if ! env "${parts[@]:1}" "$binary" intake --json >"$json" 2>/dev/null; then
            echo "round $round $label: the run failed (see $json)" >&2
            continue
        fi
        python3 - "$json" "$label" "$round" <<'EOF' | tee -a "$summary"
import json, sys
d = json.load(open(sys.argv[1]))
cpu = d["cpu_us_per_delivery"]
ours, peer = d["deliveries_per_s_64"], d.get("peer_deliveries_per_s_64") or 0
ratio = ours / peer if peer else 0
print(f"{sys.argv[2]} {sys.argv[3]} {ours:.0f} {peer:.0f} {ratio:.2f} "
      f"{d['p99_ms_at_1000']:.1f} {cpu.get('storaged', 0):.0f} {sum(cpu.values()):.0f}")
EOF
    done
done

python3 - "$summary" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    label, _, ours, peer, ratio, p99, storaged, total = line.split()
    runs.setdefault(label, []).append((float(ours), float(ratio), float(storaged), float(total)))
print()
print("build: mean / median of deliveries/s, ratio to the peer, storaged µs, all µs")
for label, rows in runs.items():
    cols = list(zip(*rows))
    figures = [f"{statistics.mean(c):.2f} / {statistics.median(c):.2f}" for c in cols]
    print(f"{label} ({len(rows)} runs): " + ", ".join(figures))
EOF
