#!/usr/bin/env bash
# Starts a throwaway single-host Slurm cluster in DIR: slurmctld plus NODES
# emulated nodes (one slurmd -N nodeN each, all on 127.0.0.1) with
# GPUS_PER_NODE fake GPUs each (driverless character devices, gres gpu), for
# tests and demos. Adapted from shared/recipes/slurm-up.sh: the ports are a
# parameter so two clusters can run side by side, and it never installs
# packages (Debian: apt-get install -y slurm-wlm slurmctld slurmd munge).
#
# Run as root (slurmd, mknod). Clients then need SLURM_CONF=DIR/etc/slurm.conf;
# the last line of output is that assignment. Stop it with
# scripts/slurm-down.sh DIR. munged is started when none answers and left
# running (it is shared by every cluster on the host).
#
# usage: scripts/slurm-up.sh DIR [NODES=2] [GPUS_PER_NODE=8] [PORT=6817]
#   slurmctld listens on PORT, nodeN's slurmd on PORT+N.
set -euo pipefail
B=${1:?usage: slurm-up.sh DIR [NODES] [GPUS_PER_NODE] [PORT]}
NODES=${2:-2}
GPUS=${3:-8}
PORT=${4:-6817}
for c in slurmctld slurmd sinfo munge; do
  command -v "$c" >/dev/null || { echo "slurm-up.sh: $c not found; install slurm-wlm slurmctld slurmd munge (Debian)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "slurm-up.sh: run as root (slurmd and mknod need it)" >&2; exit 1; }
H=$(hostname -s)
mkdir -p "$B"/{etc,state,spool,log,run,dev}
B=$(cd "$B" && pwd)

# munge (the key comes from the package's postinst)
if ! munge -n </dev/null >/dev/null 2>&1; then
  install -d -o munge -g munge -m 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 1 40); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.05; done
fi

cat >"$B/etc/slurm.conf" <<CONF
ClusterName=sgtune
SlurmctldHost=$H(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
MinJobAge=3600
KillWait=5
SlurmctldPort=$PORT
StateSaveLocation=$B/state
SlurmdSpoolDir=$B/spool/%n
SlurmctldPidFile=$B/run/slurmctld.pid
SlurmdPidFile=$B/run/slurmd-%n.pid
SlurmctldLogFile=$B/log/slurmctld.log
SlurmdLogFile=$B/log/slurmd-%n.log
CONF
echo "AutoDetect=off" >"$B/etc/gres.conf"
for n in $(seq 1 "$NODES"); do
  echo "NodeName=node$n NodeHostname=$H NodeAddr=127.0.0.1 Port=$((PORT + n)) CPUs=$(nproc) RealMemory=4000 Gres=gpu:$GPUS State=UNKNOWN" >>"$B/etc/slurm.conf"
  mkdir -p "$B/dev/node$n" "$B/spool/node$n"
  for g in $(seq 0 $((GPUS - 1))); do
    [ -e "$B/dev/node$n/nvidia$g" ] || mknod "$B/dev/node$n/nvidia$g" c 195 "$g"
  done
  echo "NodeName=node$n Name=gpu File=$B/dev/node$n/nvidia[0-$((GPUS - 1))]" >>"$B/etc/gres.conf"
done
echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$B/etc/slurm.conf"

export SLURM_CONF=$B/etc/slurm.conf
slurmctld -f "$SLURM_CONF"
for n in $(seq 1 "$NODES"); do slurmd -f "$SLURM_CONF" -N "node$n"; done
for _ in $(seq 1 160); do
  if [ "$(sinfo -h -o %T 2>/dev/null | sort -u)" = idle ]; then
    echo "slurm up: $NODES nodes idle, $GPUS GPUs each, slurmctld on port $PORT"
    echo "SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.25
done
echo "slurm-up.sh: the nodes did not become idle:" >&2
sinfo -N >&2 || true
tail -n 20 "$B/log/slurmctld.log" >&2 || true
exit 1
