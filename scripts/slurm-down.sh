#!/usr/bin/env bash
# Stops a cluster started by scripts/slurm-up.sh DIR: cancels its jobs and
# waits for them to end (slurmstepd and the job's processes outlive slurmd
# otherwise), then stops slurmd and slurmctld by their pid files and waits
# for them to exit. munged is left running. Safe to run twice, or on a
# cluster that never came up.
#
# usage: scripts/slurm-down.sh DIR
set -uo pipefail
B=${1:?usage: slurm-down.sh DIR}
[ -d "$B" ] || exit 0
B=$(cd "$B" && pwd)
export SLURM_CONF=$B/etc/slurm.conf
if [ -f "$B/run/slurmctld.pid" ] && kill -0 "$(cat "$B/run/slurmctld.pid")" 2>/dev/null; then
  scancel --full --quiet --user "$(id -un)" 2>/dev/null || true
  for _ in $(seq 1 80); do
    [ -z "$(squeue -h -t PD,R,CG,CF,S -o %i 2>/dev/null)" ] && break
    sleep 0.25
  done
fi
pids=()
for f in "$B"/run/slurmd-*.pid "$B/run/slurmctld.pid"; do
  [ -f "$f" ] || continue
  p=$(cat "$f")
  kill "$p" 2>/dev/null && pids+=("$p")
done
for p in "${pids[@]}"; do
  for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null
done
exit 0
