#!/usr/bin/env bash
# Measures llama-server's output tok/s over a small grid of launch settings
# with sgtune's own load generator, to check that the landscape has a shape
# worth tuning (the settings matter) on this machine.
#
# usage: scripts/llama-landscape.sh [MODEL.gguf]
#   env: NP="1 4 8" THREADS="1 2" CONC=1,4,8 REQS=8,16,16 MAXTOK=64 REPEATS=1 CTX_SLOT=1024
# Needs `make build` (bin/sgtune) and `make llama-server`. Prints one line per
# launch setting: np, threads, then per concurrency the median output tok/s
# and TTFT p50, the retries, and whether every token count matched the
# server's counter. Servers are started on free loopback ports and killed.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(bash scripts/llama-build.sh | grep '^LLAMA_')"
MODEL=${1:-$LLAMA_MODEL}
NP=${NP:-1 4 8}
THREADS=${THREADS:-1 2}
CONC=${CONC:-1,4,8}
REQS=${REQS:-8,16,16}
MAXTOK=${MAXTOK:-64}
REPEATS=${REPEATS:-1}
CTX_SLOT=${CTX_SLOT:-1024}
out=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$out"' EXIT

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "model $(basename "$MODEL"); load average $(cut -d' ' -f1-3 /proc/loadavg)"
for np in $NP; do
  for t in $THREADS; do
    port=$(free_port)
    "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$port" -np "$np" -c $((np * CTX_SLOT)) -t "$t" \
      --alias tiny --metrics >"$out/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 600); do
      [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && break
      kill -0 "$pid" 2>/dev/null || { cat "$out/server.log" >&2; exit 1; }
      sleep 0.05
    done
    rc=0
    bin/sgtune bench --url "http://127.0.0.1:$port" --model tiny --concurrency "$CONC" --requests "$REQS" \
      --repeats "$REPEATS" --max-tokens "$MAXTOK" --json >"$out/bench.json" 2>"$out/bench.err" || rc=$?
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
    /usr/bin/python3 - "$out/bench.json" "$np" "$t" "$rc" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
np_, t, rc = sys.argv[2:5]
cells = []
for c, m in sorted(d.get("medians", {}).items(), key=lambda kv: int(kv[0])):
    cells.append(f"C{c} {m['output_tok_s']:7.1f} tok/s TTFT {m['ttft_p50_s']*1000:6.0f} ms")
pts = d.get("points", [])
retried = sum(p.get("retried", 0) for p in pts)
checks = [p["audit"].get("server_tokens", {}).get("state") for p in pts]
print(f"-np {np_} -t {t}: " + " | ".join(cells) + f" | retried {retried}, token checks {checks.count('passed')}/{len(checks)} passed, exit {rc}")
EOF
  done
done
echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
