#!/usr/bin/env bash
# make demo-cluster: four `sgtune worker` processes share one PostgreSQL
# study of 40 launched trials (testdata/studies/cluster-sim.yaml), each
# trial a Slurm job running the simulator on a local two-node cluster with
# 16 fake GPUs; one worker is killed with SIGKILL in the middle of a trial
# and another must run that trial again. Starts Slurm (scripts/slurm-up.sh)
# and a throwaway PostgreSQL (scripts/pg-up.sh) and stops both whatever
# happens. The last line is bin/demo-cluster's figures, read from the
# storage. Needs root (slurmd) and the binaries `make build` puts in bin/.
set -euo pipefail
cd "$(dirname "$0")/.."

# free_port FROM N: the first port from FROM on such that it and the next
# N-1 have no listener on 127.0.0.1.
free_port() {
  local p=$1 n=$2 i busy
  for ((; p < 65000; p += n)); do
    busy=0
    for ((i = 0; i < n; i++)); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$((p + i))") 2>/dev/null; then busy=1; break; fi
    done
    if [ "$busy" = 0 ]; then echo "$p"; return 0; fi
  done
  return 1
}

W=$(mktemp -d "${TMPDIR:-/tmp}/sgtune-demo-cluster.XXXXXX")
chmod 711 "$W" # PostgreSQL runs as user postgres below it
cleanup() {
  scripts/slurm-down.sh "$W/slurm" >/dev/null 2>&1 || true
  rm -rf "$W/slurm/dev" # the fake GPU device nodes
  if [ -d "$W/pg/data" ]; then
    scripts/pg-down.sh "$W/pg" >/dev/null 2>&1 || true
    rm -rf "$W/pg"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

export PATH="$PWD/bin:$PATH" # sglang-sim, as the study file names it
port=$(free_port 6817 3)
if ! scripts/slurm-up.sh "$W/slurm" 2 8 "$port" >"$W/slurm-up.log" 2>&1; then
  cat "$W/slurm-up.log" >&2
  exit 1
fi
export SLURM_CONF=$W/slurm/etc/slurm.conf
if ! scripts/pg-up.sh "$W/pg" "$(free_port 55433 1)" >"$W/pg-up.log" 2>&1; then
  cat "$W/pg-up.log" >&2
  exit 1
fi
url=$(tail -n 1 "$W/pg-up.log")
echo "demo-cluster: Slurm up (2 nodes, 8 fake GPUs each, slurmctld port $port), PostgreSQL up; output in $W"
bin/demo-cluster --sgtune bin/sgtune --study testdata/studies/cluster-sim.yaml \
  --storage "$url" --workers 4 --kill-after 8 --dir "$W"
