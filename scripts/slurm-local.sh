#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, from Debian's packages, for CI and for trying
# examples/slurm/ without a cluster. Needs root.
#
#   scripts/slurm-local.sh install        apt-get install slurm-wlm munge (if missing)
#   scripts/slurm-local.sh start DIR      start munged, slurmctld and slurmd; config, state and logs in DIR
#   scripts/slurm-local.sh stop DIR       stop the daemons that `start DIR` started
#
# After `start`, point the Slurm commands at the cluster with: export SLURM_CONF=DIR/slurm.conf
# The controller and the node are this machine's hostname, with CPUS (default 2) CPUs; the ports are
# SLURM_LOCAL_PORT (default 6817) and the next one. Exits non-zero, saying why, when the cluster
# does not come up (a test that needs it must fail, not skip).
set -euo pipefail

cmd=${1:-}
die() { echo "slurm-local: $*" >&2; exit 1; }

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && command -v sbatch >/dev/null; then
    return 0
  fi
  [ "$(id -u)" = 0 ] || die "slurm-wlm and munge are not installed and this is not root; install them: apt-get install slurm-wlm munge"
  command -v apt-get >/dev/null || die "slurm-wlm and munge are not installed and there is no apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
}

start() {
  local dir=$1 host port cpus
  [ "$(id -u)" = 0 ] || die "the local cluster runs as root (SlurmUser=root); run this as root"
  install_packages
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)   # the daemons change directory: every path they get is absolute
  host=$(hostname -s)
  port=${SLURM_LOCAL_PORT:-6817}
  cpus=${CPUS:-2}
  mkdir -p "$dir/state" "$dir/spool"

  # munge: the key from the package (or a new one), the daemon as the munge user.
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    mungekey --create --keyfile=/etc/munge/munge.key >/dev/null 2>&1 || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 2>/dev/null
  fi
  chown munge:munge /etc/munge /etc/munge/munge.key
  chmod 0700 /etc/munge
  chmod 0400 /etc/munge/munge.key
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge
  chmod 0755 /run/munge
  if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    echo "already running" >"$dir/munged.ours"   # someone else's munged: leave it alone at stop
  else
    runuser -u munge -- munged --pid-file=/run/munge/munged.pid
    cp /run/munge/munged.pid "$dir/munged.ours"
    for _ in $(seq 50); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
    munge -n </dev/null | unmunge >/dev/null 2>&1 || die "munged did not start (see /var/log/munge/munged.log)"
  fi

  cat >"$dir/slurm.conf" <<EOF
ClusterName=needlepoint-local
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -f "$dir/slurm.conf" || die "slurmctld did not start (see $dir/slurmctld.log)"
  slurmd -f "$dir/slurm.conf" || die "slurmd did not start (see $dir/slurmd.log)"
  for _ in $(seq 100); do
    if sinfo -h -N -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'; then
      echo "export SLURM_CONF=$dir/slurm.conf"
      return 0
    fi
    sleep 0.2
  done
  die "the node did not become idle within 20 s: $(sinfo -h -N -o '%N %T %E' 2>&1 | head -1) (see $dir/slurmctld.log and $dir/slurmd.log)"
}

stop_pid() {  # stop_pid NAME PIDFILE: TERM, then KILL after 10 s
  local name=$1 file=$2 pid
  [ -s "$file" ] || return 0
  pid=$(cat "$file")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  echo "slurm-local: $name (pid $pid) did not stop on TERM; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

stop() {
  local dir=$1
  [ -d "$dir" ] || return 0
  stop_pid slurmd "$dir/slurmd.pid"
  stop_pid slurmctld "$dir/slurmctld.pid"
  if [ -f "$dir/munged.ours" ] && [[ "$(cat "$dir/munged.ours")" =~ ^[0-9]+$ ]]; then
    stop_pid munged "$dir/munged.ours"
  fi
  rm -f "$dir/munged.ours"
}

case "$cmd" in
  install) install_packages ;;
  start) [ $# -eq 2 ] || die "usage: $0 start DIR"; start "$2" ;;
  stop) [ $# -eq 2 ] || die "usage: $0 stop DIR"; stop "$2" ;;
  *) die "usage: $0 install | start DIR | stop DIR" ;;
esac
