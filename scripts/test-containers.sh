#!/usr/bin/env bash
# Trials in containers against a real Docker daemon (make test-containers).
#
# Uses the daemon DOCKER_HOST (or the default socket) names when it answers;
# else starts a private dockerd (Debian's docker.io) with its own data root
# and socket under the work directory, no bridge and no iptables rules (the
# trial containers share the host's network), and stops it at the end.
# Builds the test image locally: the simulator as a static binary, imported
# with `docker import` (no registry is reachable).
#
# Then the launcher's container tests run against the daemon, and
# testdata/studies/container-sim.yaml (two GPU groups, trials side by
# side) runs; sgtune run is killed with kill -9 while a trial's container
# runs, and run again to the end. A sampler lists the study's running
# containers every 0.2 s throughout. The last line is the summary:
#   containers_left=N max_on_one_group=M disjoint_devices=yes|no missing_image_exit=C
# containers_left: the study's containers after the resumed run ended;
# max_on_one_group: the most containers seen running at once on one GPU
# group; disjoint_devices: every trial's server saw exactly its own group's
# GPUs (the CUDA_VISIBLE_DEVICES the simulator logs from inside), and the
# two groups share none; missing_image_exit: sgtune check's exit code for the
# study with an image the daemon does not have.
# Exits 1 unless the figures are 0, 1, yes and 2.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SGTUNE=${SGTUNE:-$ROOT/bin/sgtune}
OUT=${OUT:-$ROOT/out/test-containers}
IMAGE=sgtune-sim:test
# This study's containers (its name is in each container's name).
MINE=(--filter label=io.sgtune.study --filter name=sgtune-container-sim-)
rm -rf "$OUT"
mkdir -p "$OUT"
log() { echo "test-containers: $*" >&2; }

# remove_mine removes this study's containers (a failed check's leftovers).
remove_mine() {
  local ids
  ids=$(docker ps -aq "${MINE[@]}" 2>/dev/null | tr '\n' ' ' || true)
  # shellcheck disable=SC2086 # one word per container id
  [ -z "${ids// }" ] || docker rm -f $ids >/dev/null 2>&1 || true
}

started_dockerd=
cleanup() {
  local rc=$?
  if [ -n "${sampler:-}" ]; then kill "$sampler" 2>/dev/null || true; fi
  if [ -n "${runpid:-}" ]; then kill -9 "$runpid" 2>/dev/null || true; fi
  remove_mine
  if [ -n "$started_dockerd" ]; then
    log "stopping the dockerd this script started"
    kill "$(cat "$D/docker.pid")" 2>/dev/null || true
    for _ in $(seq 1 100); do [ -e "$D/docker.pid" ] || break; sleep 0.1; done
    # Its data root holds mounts and overlay layers: unmount before removal.
    grep " $D/" /proc/mounts | awk '{print $2}' | sort -r | xargs -r umount -l 2>/dev/null || true
    rm -rf "$D" 2>/dev/null || true
  fi
  exit "$rc"
}
trap cleanup EXIT

if ! docker version >/dev/null 2>&1; then
  command -v dockerd >/dev/null || { log "dockerd not installed (Debian: apt-get install docker.io)"; exit 1; }
  D=$(mktemp -d /tmp/sgtune-dockerd.XXXXXX)
  export DOCKER_HOST=unix://$D/docker.sock
  log "starting a private dockerd at $DOCKER_HOST"
  dockerd --data-root "$D/root" --exec-root "$D/exec" -H "$DOCKER_HOST" --pidfile "$D/docker.pid" \
    --iptables=false --ip-forward=false --ip-masq=false --bridge=none >"$OUT/dockerd.log" 2>&1 &
  started_dockerd=1
  for _ in $(seq 1 100); do docker version >/dev/null 2>&1 && break; sleep 0.2; done
  docker version >/dev/null || { log "dockerd did not answer; see $OUT/dockerd.log"; exit 1; }
fi
remove_mine
log "daemon $(docker version --format '{{.Server.Version}}') at ${DOCKER_HOST:-the default socket}"

# The image: the simulator, static, at /sglang-sim.
(cd "$ROOT" && CGO_ENABLED=0 go build -buildvcs=false -o "$OUT/image/sglang-sim" ./cmd/sglang-sim)
tar -C "$OUT/image" -cf "$OUT/image.tar" sglang-sim
docker import -c 'ENTRYPOINT []' "$OUT/image.tar" "$IMAGE" >/dev/null
log "built $IMAGE ($(docker image inspect --format '{{.Id}}' "$IMAGE"))"

STUDY=$ROOT/testdata/studies/container-sim.yaml
DB=$OUT/study.db
cd "$OUT"

# Running containers per GPU group, every 0.2 s, one line per sample.
(
  while true; do
    docker ps "${MINE[@]}" --format '{{.Label "io.sgtune.gpus"}}' 2>/dev/null |
      sort | uniq -c | awk '{print $1}' | sort -n | tail -1 | sed 's/^$/0/'
    sleep 0.2
  done
) >"$OUT/samples.txt" &
sampler=$!

"$SGTUNE" run "$STUDY" --storage "$DB" --log-dir "$OUT/logs" >"$OUT/run1.log" 2>&1 &
runpid=$!
# Wait for a container to run, let its trial get going, then kill -9.
for _ in $(seq 1 300); do
  [ -n "$(docker ps -q "${MINE[@]}")" ] && break
  sleep 0.1
done
sleep 3
orphans=$(docker ps -q "${MINE[@]}" | wc -l)
log "kill -9 sgtune run (pid $runpid) with $orphans container(s) running"
kill -9 "$runpid"
{ wait "$runpid"; } 2>/dev/null || true
runpid=
sleep 1
left_after_kill=$(docker ps -q "${MINE[@]}" | wc -l)
log "$left_after_kill container(s) still running after the kill (the daemon keeps them)"

"$SGTUNE" run "$STUDY" --storage "$DB" --log-dir "$OUT/logs" >"$OUT/run2.log" 2>&1 || {
  log "the resumed run failed:"; tail -20 "$OUT/run2.log" >&2; exit 1; }
grep -E "removed .*container" "$OUT/run2.log" >&2 || true
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
sampler=

containers_left=$(docker ps -aq "${MINE[@]}" | wc -l)
max_on_one_group=$(sort -n "$OUT/samples.txt" | tail -1)
max_on_one_group=${max_on_one_group:-0}

# Each trial log: the group sgtune gave it (its label) and what the server
# saw inside (the simulator's line); the last attempt of each log counts.
disjoint=yes
groups=""
n=0
for f in "$OUT"/logs/*/trial-*.log; do
  host=$(grep -o 'io.sgtune.gpus=[0-9,]*' "$f" | tail -1 | cut -d= -f2)
  inside=$(grep -o 'sim: CUDA_VISIBLE_DEVICES=[0-9,]*' "$f" | tail -1 | cut -d= -f2)
  [ -z "$inside" ] && continue # never started (killed before its log line)
  n=$((n + 1))
  if [ "$host" != "$inside" ]; then
    log "$(basename "$f"): group $host, the server saw $inside"
    disjoint=no
  fi
  case " $groups " in *" $host "*) ;; *) groups="$groups $host" ;; esac
done
read -r -a gs <<<"$groups"
if [ "${#gs[@]}" -ne 2 ] || [ "$n" -lt 2 ]; then
  log "want trials on two groups, got ${#gs[@]} group(s) over $n trial(s)"
  disjoint=no
else
  for g in ${gs[0]//,/ }; do
    case ",${gs[1]}," in *",$g,"*) disjoint=no ;; esac
  done
fi

# The launcher's own container tests against this daemon: start and stop,
# a container the OOM killer ends (classified oom), an abort mid-startup.
(cd "$ROOT" && go test -count=1 -run 'TestContainer' ./launcher) >"$OUT/launcher-tests.log" 2>&1 || {
  log "launcher container tests failed:"; tail -30 "$OUT/launcher-tests.log" >&2; exit 1; }
grep -E '^(ok|---)' "$OUT/launcher-tests.log" >&2 || true

# A study naming an image the daemon lacks: refused before any launch.
sed "s#image: $IMAGE#image: sgtune-sim:no-such-tag#" "$STUDY" >"$OUT/missing-image.yaml"
set +e
"$SGTUNE" check "$OUT/missing-image.yaml" >"$OUT/missing-image.out" 2>&1
missing_image_exit=$?
set -e
tail -1 "$OUT/missing-image.out" >&2

"$SGTUNE" status --storage "$DB" >"$OUT/status.txt" 2>&1 || true
head -1 "$OUT/status.txt" >&2
echo "containers_left=$containers_left max_on_one_group=$max_on_one_group disjoint_devices=$disjoint missing_image_exit=$missing_image_exit"
[ "$containers_left" = 0 ] && [ "$max_on_one_group" = 1 ] && [ "$disjoint" = yes ] && [ "$missing_image_exit" = 2 ]
