#!/usr/bin/env bash
# A one-node SLURM cluster in a directory, for tests and for trying dlscale's job scripts.
#
#   scripts/slurm-cluster.sh up DIR      install slurm + munge from Debian if missing, start
#                                        munged, slurmctld and slurmd in DIR, wait for the node
#   scripts/slurm-cluster.sh down DIR    cancel DIR's jobs, stop its daemons by their PIDs
#   scripts/slurm-cluster.sh status DIR  exit 0 when the cluster in DIR answers
#
# Then point the client commands at it:  export SLURM_CONF=DIR/slurm.conf  (or: . DIR/env.sh)
#
# The recipe is docs/references.md#slurm-one-node-cluster, verified on Debian 12 with Slurm 22.05:
# no systemd, no cgroups (proctrack/linuxproc; task/affinity binds each task to the CPUs it was
# given, which the CPU tests in tests/slurm read back), everything runs as root.
# Both commands are idempotent: `up` on a running cluster and `down` on a stopped one do nothing.
#
# Environment:
#   SLURMCTLD_PORT, SLURMD_PORT   ports (16817, 16818); pick others to run two clusters at once
#   SLURM_CLUSTER_NO_INSTALL=1    never call apt-get; fail if the packages are missing
#   SLURM_CLUSTER_CRED_EXPIRE     seconds (10): credential lifetime, which is also how long a
#                                 requeued job waits before it may run again (slurm.conf(5),
#                                 AuthInfo cred_expire; the default on real clusters is 120)
set -euo pipefail

CTLD_PORT=${SLURMCTLD_PORT:-16817}
SLURMD_PORT=${SLURMD_PORT:-16818}
CRED_EXPIRE=${SLURM_CLUSTER_CRED_EXPIRE:-10}
PACKAGES=(slurmctld slurmd munge slurm-client)

say() { echo "slurm-cluster: $*" >&2; }

usage() {
    say "usage: $0 up|down|status DIR"
    exit 2
}

# ---------------------------------------------------------------------------------- install

install_packages() {
    if [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && [ -x /usr/sbin/munged ] \
        && command -v sbatch >/dev/null; then
        return 0
    fi
    if [ "${SLURM_CLUSTER_NO_INSTALL:-0}" = 1 ]; then
        say "slurm or munge is not installed (and SLURM_CLUSTER_NO_INSTALL=1)"
        return 1
    fi
    if [ "$(id -u)" != 0 ]; then
        say "slurm is not installed and installing it needs root: apt-get install ${PACKAGES[*]}"
        return 1
    fi
    say "installing ${PACKAGES[*]} from Debian (about a minute)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # Debian's policy-rc.d keeps the packages from starting their own services.
    apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
}

# ---------------------------------------------------------------------------------- helpers

# read_pid FILE: the PID written in FILE, or nothing (the daemon removes it as it exits).
read_pid() {
    tr -dc "0-9" 2>/dev/null <"$1" || true
}

# pid_alive FILE NAME: the PID in FILE runs a program called NAME (guards against PID reuse)
# and has not exited (a zombie waiting for PID 1 to reap it counts as stopped).
pid_alive() {
    local name=$2 pid stat
    pid=$(read_pid "$1")
    [ -n "$pid" ] || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

# stop_pid FILE NAME: SIGTERM the daemon whose PID is in FILE, SIGKILL it after 10 s.
stop_pid() {
    local file=$1 name=$2 pid
    pid_alive "$file" "$name" || return 0
    pid=$(read_pid "$file")
    say "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
        pid_alive "$file" "$name" || return 0
        sleep 0.2
    done
    say "$name (pid $pid) ignored SIGTERM: killing it"
    kill -KILL "$pid" 2>/dev/null || true
}

write_conf() {
    local dir=$1
    cat >"$dir/slurm.conf" <<EOF
# Written by scripts/slurm-cluster.sh: a one-node test cluster in $dir
ClusterName=dlscale
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also the time a requeued job waits before it may start again.
AuthInfo=socket=$dir/munge/munge.socket.2,cred_expire=$CRED_EXPIRE
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
# Finished jobs stay visible to scontrol show job for 10 minutes.
MinJobAge=600
# CPUs: the cores here (nproc would obey OMP_NUM_THREADS, which test runners set to 1).
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
    printf 'export SLURM_CONF=%s/slurm.conf\n' "$dir" >"$dir/env.sh"
}

start_munge() {
    local dir=$1
    if pid_alive "$dir/munge/munged.pid" munged; then
        return 0
    fi
    mkdir -p "$dir/munge"
    chown munge:munge "$dir/munge"
    chmod 0711 "$dir/munge" # 0700 fails: "Socket is inaccessible: execute permissions for all required"
    if ! runuser -u munge -- test -x "$dir/munge"; then
        say "the munge user cannot reach $dir: every folder above it must be searchable (chmod o+x)"
        return 1
    fi
    runuser -u munge -- /usr/sbin/munged --socket="$dir/munge/munge.socket.2" \
        --key-file=/etc/munge/munge.key --log-file="$dir/munge/munged.log" \
        --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed"
    munge -S "$dir/munge/munge.socket.2" -n | unmunge -S "$dir/munge/munge.socket.2" >/dev/null
}

wait_idle() {
    local dir=$1 state=""
    for _ in $(seq 60); do
        state=$(SLURM_CONF="$dir/slurm.conf" sinfo -h -n localhost -o %t 2>/dev/null || true)
        case "$state" in
            idle | mix | alloc) return 0 ;;
        esac
        sleep 0.5
    done
    say "the node did not become idle within 30 s (sinfo says '${state:-nothing}'); logs in $dir/log:"
    tail -n 5 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 2>/dev/null || true
    return 1
}

# ---------------------------------------------------------------------------------- commands

up() {
    local dir
    mkdir -p "$1"
    dir=$(cd "$1" && pwd)
    if pid_alive "$dir/slurmctld.pid" slurmctld && pid_alive "$dir/slurmd.pid" slurmd; then
        wait_idle "$dir" && say "already up in $dir" && return 0
    fi
    [ "$(id -u)" = 0 ] || { say "the test cluster runs its daemons as root; run as root"; return 1; }
    install_packages
    mkdir -p "$dir"/{state,spool,log}
    chmod 0755 "$dir"
    write_conf "$dir"
    start_munge "$dir"
    export SLURM_CONF=$dir/slurm.conf
    pid_alive "$dir/slurmctld.pid" slurmctld || /usr/sbin/slurmctld -f "$SLURM_CONF"
    # -N: the node is called localhost in slurm.conf whatever this machine's hostname is.
    pid_alive "$dir/slurmd.pid" slurmd || /usr/sbin/slurmd -f "$SLURM_CONF" -N localhost
    wait_idle "$dir"
    say "up in $dir: export SLURM_CONF=$dir/slurm.conf"
}

down() {
    local dir jobs
    [ -d "$1" ] || return 0
    dir=$(cd "$1" && pwd)
    if pid_alive "$dir/slurmctld.pid" slurmctld; then
        export SLURM_CONF=$dir/slurm.conf
        jobs=$(squeue -h -o %i 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            say "cancelling jobs: $(echo $jobs)"
            # shellcheck disable=SC2086
            scancel $jobs 2>/dev/null || true
            for _ in $(seq 60); do
                [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
                sleep 0.5
            done
        fi
    fi
    stop_pid "$dir/slurmd.pid" slurmd
    stop_pid "$dir/slurmctld.pid" slurmctld
    stop_pid "$dir/munge/munged.pid" munged
}

status() {
    local dir=$1
    pid_alive "$dir/slurmctld.pid" slurmctld && pid_alive "$dir/slurmd.pid" slurmd \
        && SLURM_CONF="$dir/slurm.conf" sinfo -h >/dev/null 2>&1
}

[ $# -eq 2 ] || usage
case "$1" in
    up) up "$2" ;;
    down) down "$2" ;;
    status) status "$2" ;;
    *) usage ;;
esac
