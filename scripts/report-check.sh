#!/usr/bin/env bash
# report-check.sh DIR [PNG]: renders DIR/index.html (an `sgtune report`
# page) in headless Chromium to PNG (default DIR/screenshot.png) and fails
# when the page logs a console error, references a file that is not in DIR,
# or reaches for the network. Exit 0 ok, 1 check failed, 2 cannot run.
set -euo pipefail

dir=${1:?usage: report-check.sh DIR [PNG]}
png=${2:-$dir/screenshot.png}
chrome=""
for c in chromium chromium-browser google-chrome; do
  if command -v "$c" >/dev/null; then chrome=$c; break; fi
done
if [[ -z $chrome ]]; then
  echo "report-check: chromium not found (Debian: apt-get install -y chromium)" >&2
  exit 2
fi
if [[ ! -f $dir/index.html ]]; then
  echo "report-check: $dir/index.html does not exist (run sgtune report -o $dir)" >&2
  exit 2
fi
abs=$(cd "$dir" && pwd)
url="file://$abs/index.html"
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
  --disable-background-networking --disable-component-update --disable-sync
  --user-data-dir="$profile" --hide-scrollbars)

fail=0
# 1. Render to PNG with the console logged to stderr.
if ! timeout 120 "$chrome" "${flags[@]}" --enable-logging=stderr --v=0 --window-size=1440,1000 \
  --screenshot="$png" "$url" >"$profile/out" 2>"$profile/log"; then
  echo "report-check: chromium failed:" >&2
  tail -5 "$profile/log" >&2
  exit 1
fi
if [[ ! -s $png ]]; then
  echo "report-check: no screenshot written to $png" >&2
  exit 1
fi
# Chromium logs every console message as INFO:CONSOLE; the page itself logs
# nothing, so errors are the messages that say so.
if grep -E 'CONSOLE[^]]*\] "' "$profile/log" | grep -Ei 'error|uncaught|failed|refused|not allowed' >"$profile/console"; then
  echo "report-check: console errors:" >&2
  cat "$profile/console" >&2
  fail=1
fi

# 2. The rendered DOM: every src/href/data must be a file in DIR (or a data:
# URL or an anchor); nothing from the network.
timeout 120 "$chrome" "${flags[@]}" --dump-dom "$url" >"$profile/dom" 2>/dev/null
if ! grep -q '</html>' "$profile/dom"; then
  echo "report-check: --dump-dom returned no page" >&2
  exit 1
fi
images=0
while IFS= read -r ref; do
  ref=${ref#*=\"}
  ref=${ref%\"}
  case $ref in
  data:* | '#'*) continue ;;
  http:* | https:* | //*)
    echo "report-check: the page reaches the network: $ref" >&2
    fail=1
    continue
    ;;
  esac
  if [[ ! -s $abs/$ref ]]; then
    echo "report-check: missing file: $ref" >&2
    fail=1
    continue
  fi
  case $ref in
  *.svg)
    images=$((images + 1))
    if ! grep -q '<svg' "$abs/$ref"; then
      echo "report-check: $ref is not an SVG" >&2
      fail=1
    fi
    ;;
  esac
done < <(grep -oE '(src|href|data)="[^"]*"' "$profile/dom" || true)

if [[ $fail -ne 0 ]]; then
  exit 1
fi
echo "report-check: ok: $url rendered to $png, $images SVG plots present, no console error"
