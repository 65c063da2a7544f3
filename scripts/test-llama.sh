#!/usr/bin/env bash
# make test-llama: sgtune end to end against llama.cpp's real llama-server.
#
# Builds (or reuses) llama-server and its model (scripts/llama-build.sh, cached
# in ${SGTUNE_CACHE:-$HOME/.cache/sgtune}/llama-3.21.1), then runs the Go test
# TestLlamaEndToEnd (cmd/sgtune/llama_e2e_test.go): the study
# testdata/studies/llama-cpu.yaml with 12 launched trials (plus confirmation
# reruns), the token check of every measured point against
# llamacpp:tokens_predicted_total, a bad flag through the launcher, the
# winner's exported script started for /health, and the report's plateau line;
# then TestLlamaSharedPrefix: testdata/studies/llama-prefix.yaml (a 600-token
# system prompt shared by every request; llama.cpp's prompt cache on and off),
# whose line
#   llama_prefix cached_on=X% cached_off=Y% reusable=Z%
# is printed before the summary. Its outputs (database, logs, report, scripts) stay in ${SGTUNE_LLAMA_OUT:-out/test-llama}.
#
# The last line printed is the test's summary:
#   trials=N complete=M token_mismatches=K bad_command_detect_ms=X winner_within_spread=yes|no
# and the exit status is the test's.
set -euo pipefail
cd "$(dirname "$0")/.."

paths=$(bash scripts/llama-build.sh)
LLAMA_SERVER=$(sed -n 's/^LLAMA_SERVER=//p' <<<"$paths")
LLAMA_MODEL=$(sed -n 's/^LLAMA_MODEL=//p' <<<"$paths")
export LLAMA_SERVER LLAMA_MODEL
# The study names its command llama-server: the build's bin directory first.
PATH="$(dirname "$LLAMA_SERVER"):$PATH"
export PATH

out=${SGTUNE_LLAMA_OUT:-out/test-llama}
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary="$out/summary.txt"
prefix="$out/prefix.txt"
rm -f "$summary" "$prefix"

start=$(date +%s)
rc=0
SGTUNE_LLAMA_E2E=1 SGTUNE_LLAMA_OUT="$out" SGTUNE_LLAMA_SUMMARY="$summary" SGTUNE_LLAMA_PREFIX_SUMMARY="$prefix" \
  go test -count=1 -timeout 40m -run '^(TestLlamaEndToEnd|TestLlamaSharedPrefix)$' -v ./cmd/sgtune || rc=$?
echo "test-llama: $(( $(date +%s) - start )) s; outputs in $out"
if [ -s "$prefix" ]; then
  tail -n 1 "$prefix"
else
  echo "test-llama: the shared-prefix test wrote no line"
  [ "$rc" -ne 0 ] || rc=1
fi
if [ -s "$summary" ]; then
  tail -n 1 "$summary"
else
  echo "test-llama: the test wrote no summary (exit $rc)"
  [ "$rc" -ne 0 ] || rc=1
fi
exit "$rc"
