#!/usr/bin/env bash
# make traffic-check: workloads shaped like real traffic, on the simulator.
#
# 1. testdata/studies/rate-sim.yaml: each config's highest request rate with
#    TTFT p99 within the SLO (score.metric max_rate, open-loop probes at
#    Poisson arrivals, requests sampled from a ShareGPT-format dataset behind
#    a shared system prompt); its report must show the rate plots.
# 2. testdata/studies/prefix-sim.yaml: the radix cache on and off on requests
#    sharing a 2,000-token system prompt, then the same study on unique
#    2,064-token prompts; the gain is the score with the radix cache on over
#    off.
# 3. The load generator's stall test (objective TestOpenLoopStall): an
#    open-loop level against a server that stalls 2 s in its middle; TTFT is
#    measured from the scheduled sends, so the stall must reach the p99.
#
# Outputs in ${OUT:-out/traffic-check}. The last line is the summary:
#   max_rate_winner=R radix_gain_shared=G1 radix_gain_unique=G2 stall_in_p99=yes|no
# and the exit status is 1 unless the winner's rate is above 0, G1 > 1.2,
# 0.95 <= G2 <= 1.05 and the stall reached the p99.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SGTUNE=${SGTUNE:-$ROOT/bin/sgtune}
OUT=${OUT:-$ROOT/out/traffic-check}
rm -rf "$OUT"
mkdir -p "$OUT"
export PATH="$ROOT/bin:$PATH" # the studies run sglang-sim from PATH
log() { echo "traffic-check: $*" >&2; }

# score DB TRIAL_PARAM: "on off" scores of the two radix configs of a study.
radix_scores() {
  "$SGTUNE" status --storage "$1" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
s = {}
for t in d["trials"]:
    if t.get("state") == "complete" and t.get("score") is not None:
        s[str(t["params"]["radix_cache"]).lower()] = t["score"]
print(s.get("true", 0), s.get("false", 0))'
}

# 1. max_rate.
"$SGTUNE" run testdata/studies/rate-sim.yaml --storage "$OUT/rate.db" --log-dir "$OUT/logs" >"$OUT/rate.log" 2>&1 || {
  log "rate-sim failed:"; tail -20 "$OUT/rate.log" >&2; exit 1; }
grep -E '^(study|best)' "$OUT/rate.log" >&2 || true
winner=$("$SGTUNE" best --storage "$OUT/rate.db" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d.get("score") or 0, 1))')
"$SGTUNE" report --storage "$OUT/rate.db" -o "$OUT/report" >/dev/null
for f in rate.svg rate-achieved.svg; do
  if ! [ -s "$OUT/report/$f" ] || ! grep -q "$f" "$OUT/report/index.html"; then
    log "the report lacks $f"
    exit 1
  fi
done

# 2. The radix cache on shared and unique prompts.
"$SGTUNE" run testdata/studies/prefix-sim.yaml --storage "$OUT/shared.db" --log-dir "$OUT/logs" >"$OUT/shared.log" 2>&1 || {
  log "prefix-sim failed:"; tail -20 "$OUT/shared.log" >&2; exit 1; }
sed -e 's/^name: prefix-sim$/name: prefix-sim-unique/' \
  -e 's/      shared_prefix_tokens: 2000/      input_tokens: {dist: fixed, mean: 2064}/' \
  -e '/      input_tokens: {dist: fixed, mean: 64}/d' testdata/studies/prefix-sim.yaml >"$OUT/prefix-unique.yaml"
"$SGTUNE" run "$OUT/prefix-unique.yaml" --storage "$OUT/unique.db" --log-dir "$OUT/logs" >"$OUT/unique.log" 2>&1 || {
  log "the unique-prompt study failed:"; tail -20 "$OUT/unique.log" >&2; exit 1; }
read -r s_on s_off <<<"$(radix_scores "$OUT/shared.db")"
read -r u_on u_off <<<"$(radix_scores "$OUT/unique.db")"
gain() { python3 -c "import sys; on, off = float(sys.argv[1]), float(sys.argv[2]); print(f'{on / off:.2f}' if off > 0 else '0')" "$1" "$2"; }
g_shared=$(gain "$s_on" "$s_off")
g_unique=$(gain "$u_on" "$u_off")
log "shared prefix: radix on $s_on, off $s_off tok/s; unique prompts: on $u_on, off $u_off tok/s"
grep -h "prefix reusable" "$OUT/shared.log" | head -2 >&2 || true

# 3. The stall in the p99.
stall=no
if go test -count=1 -run '^TestOpenLoopStall$' -v ./objective >"$OUT/stall.log" 2>&1; then
  p99=$(sed -n 's/.*TTFT p50 [0-9.]* p90 [0-9.]* p99 \([0-9.]*\) s.*/\1/p' "$OUT/stall.log" | tail -1)
  log "open-loop level with a 2 s stall: TTFT p99 ${p99:-?} s"
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 1.5 else 1)" "${p99:-0}" && stall=yes
else
  tail -20 "$OUT/stall.log" >&2
fi

echo "max_rate_winner=$winner radix_gain_shared=$g_shared radix_gain_unique=$g_unique stall_in_p99=$stall"
python3 - "$winner" "$g_shared" "$g_unique" "$stall" <<'EOF'
import sys
w, gs, gu, stall = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
sys.exit(0 if w > 0 and gs > 1.2 and 0.95 <= gu <= 1.05 and stall == "yes" else 1)
EOF
