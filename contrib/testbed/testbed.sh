#!/usr/bin/env bash
# Real single-host Slurm testbed for slurm-fair (no systemd, no containers).
#
#   testbed.sh [--release bookworm|trixie|forky] up | down [--purge] | status | env | exec -- CMD...
#
# bookworm: Debian 12's Slurm 22.05 on this host.  Chroot releases, each in a debootstrap chroot under the
# state dir: trixie (Debian 13's Slurm 24.11), forky (Debian 14's Slurm 26.05).  Everything (munge key+socket,
# MariaDB, slurmdbd, slurmctld, 4 slurmd) lives under the state dir: <repo>/.testbed/<TESTBED_NAME or release>,
# or $TESTBED_DIR.  Ports: TESTBED_PORT_BASE (slurmctld; slurmdbd = +2, slurmd = +4..+7) and TESTBED_MYSQL_PORT
# (defaults: bookworm 16817/23306, trixie 17817/24306, forky 18817/25306).  Must run as root.
# Daemons are stopped only by their recorded PIDs.  See CI.md and docs/testing.md for details.
set -euo pipefail
umask 022

usage() { sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

RELEASE=${TESTBED_RELEASE:-bookworm}
PURGE=0
CMD=""
while (($#)); do
  case $1 in
    --release) RELEASE=${2:?--release needs a value}; shift 2 ;;
    --release=*) RELEASE=${1#*=}; shift ;;
    --purge) PURGE=1; shift ;;
    -h|--help|help) usage; exit 0 ;;
    up|down|status|env|exec)
      [[ -z $CMD ]] || { echo "testbed: two commands given: $CMD and $1" >&2; exit 2; }
      CMD=$1; shift
      if [[ $CMD == exec ]]; then [[ ${1:-} == -- ]] && shift; break; fi ;;
    *) echo "testbed: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n $CMD ]] || { usage >&2; exit 2; }

T0=$SECONDS
log() { echo "testbed[$RELEASE +$((SECONDS - T0))s]: $*" >&2; }
die() { echo "testbed[$RELEASE +$((SECONDS - T0))s]: ERROR: $*" >&2; exit 1; }

# Per release: default ports, and for chroot releases the Debian suites apt uses inside the chroot and the
# debootstrap script (forky: the sid script, which Debian 12's debootstrap has; it does not know forky).
# APT_NO_VALID_UNTIL: forky is Debian testing, whose Release file says "Valid-Until" a week ahead; a mirror that
# lags (this lab's did, by a month) makes apt refuse it as expired, so apt in that chroot ignores Valid-Until
# (the signature is still checked).
CHROOT=1 SUITES=() DEBOOTSTRAP_SCRIPT="" SLURM_SERIES="" APT_NO_VALID_UNTIL=0
case $RELEASE in
  bookworm) DEF_BASE=16817; DEF_MYSQL=23306; CHROOT=0; SLURM_SERIES=22.05 ;;
  trixie) DEF_BASE=17817; DEF_MYSQL=24306; SLURM_SERIES=24.11
    SUITES=("debian trixie" "debian trixie-updates" "debian-security trixie-security") ;;
  forky) DEF_BASE=18817; DEF_MYSQL=25306; SLURM_SERIES=26.05
    SUITES=("debian forky"); APT_NO_VALID_UNTIL=1
    [[ -e /usr/share/debootstrap/scripts/forky ]] || DEBOOTSTRAP_SCRIPT=/usr/share/debootstrap/scripts/sid ;;
  *) die "--release must be bookworm, trixie or forky, not '$RELEASE'" ;;
esac
[[ $(id -u) == 0 ]] || die "must run as root (it starts munged, MariaDB and Slurm daemons)"

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
searchable() {  # every existing folder from $1 up is o+x
  local d=$1
  while [[ $d != / && -n $d ]]; do
    if [[ -e $d ]] && (((8#$(stat -c %a "$d") & 1) == 0)); then return 1; fi
    d=$(dirname "$d")
  done
}
# State dir: $TESTBED_DIR, else <repo>/.testbed/<TESTBED_NAME, default the release>.  The bookworm testbed's
# test users (alice, bob, carol) and munged must reach it: if the checkout is somewhere private (e.g. under
# /root), its state goes to /var/tmp instead (a chroot release does not care: its lab dir is /testbed inside).
NAME=${TESTBED_NAME:-$RELEASE}
[[ $NAME =~ ^[A-Za-z0-9._-]+$ ]] || die "TESTBED_NAME must be letters, digits, '.', '_' or '-', not '$NAME'"
if [[ -n ${TESTBED_DIR:-} ]]; then
  STATE=$TESTBED_DIR
elif [[ $RELEASE == bookworm ]] && ! searchable "$REPO"; then
  STATE=/var/tmp/slurm-fair-testbed-$(echo "$REPO" | cksum | cut -d' ' -f1)/$NAME
else
  STATE=$REPO/.testbed/$NAME
fi
[[ $STATE == /* ]] || STATE=$PWD/$STATE
STATE=${STATE%/}
# Ports: the environment, else what the last 'up' of this state dir used (so 'down', 'status' and 'env' of a
# testbed started with other ports need only its name), else the release's defaults.
if [[ -f $STATE/ports && -z ${TESTBED_PORT_BASE:-}${TESTBED_MYSQL_PORT:-} ]]; then
  read -r DEF_BASE DEF_MYSQL <"$STATE/ports" || true
fi
BASE=${TESTBED_PORT_BASE:-$DEF_BASE}
MYSQL_PORT=${TESTBED_MYSQL_PORT:-$DEF_MYSQL}
[[ $BASE =~ ^[0-9]+$ && $MYSQL_PORT =~ ^[0-9]+$ ]] || die "TESTBED_PORT_BASE/TESTBED_MYSQL_PORT must be numbers"
CTLD_PORT=$BASE
DBD_PORT=$((BASE + 2))
NODES=(a100-1 v100-1 k80-1 mixed-1)
declare -A NODE_GRES=([a100-1]="a100:4" [v100-1]="v100:4" [k80-1]="k80:4" [mixed-1]="v100:2,k80:2")
USERS=(alice bob carol)
OPERATOR=slurm-fair  # a Unix user for the non-root daemon test (it grants itself sacctmgr AdminLevel=Operator)
declare -A USER_ACCT=([alice]=acct_a [bob]=acct_b [carol]=acct_c)
declare -A ACCT_SHARE=([acct_a]=1 [acct_b]=1 [acct_c]=2)
CLUSTER=testbed
SYS_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

if ((CHROOT)); then
  ROOT=$STATE/rootfs      # the chroot
  LABIN=/testbed          # the lab dir as seen inside the chroot
  LAB=$ROOT$LABIN         # ... and from the host
else
  ROOT=""
  LABIN=$STATE
  LAB=$STATE
fi
RUN=$LAB/run

# ---------------------------------------------------------------------------------------------
# helpers
in_env() {  # run a command with the testbed's SLURM_CONF (inside the chroot for a chroot release)
  if [[ -n $ROOT ]]; then
    chroot "$ROOT" /usr/bin/env -i PATH="$SYS_PATH" HOME=/root LANG=C.UTF-8 \
      SLURM_CONF="$LABIN/etc/slurm.conf" "$@"
  else
    env SLURM_CONF="$LABIN/etc/slurm.conf" "$@"
  fi
}

# Mount points (decoded) from /proc/self/mountinfo, in mount order.
mountpoints() {
  local _a _b _c _d mp _rest
  while read -r _a _b _c _d mp _rest; do printf '%b\n' "$mp"; done </proc/self/mountinfo
}
mounts_under() {  # mount points equal to or below $1, innermost (last mounted) first
  mountpoints | awk -v p="$1" '$0 == p || index($0, p "/") == 1' | tac
}
mounts_under_ids() {  # "ID MOUNTPOINT" for mounts at or below $1, innermost (last mounted) first
  local id _b _c _d mp _rest p=$1
  while read -r id _b _c _d mp _rest; do
    mp=$(printf '%b' "$mp")
    [[ $mp == "$p" || $mp == "$p"/* ]] && echo "$id $mp"
  done </proc/self/mountinfo | tac
}
mount_id_exists() { awk -v id="$1" '$1 == id {f = 1} END {exit !f}' /proc/self/mountinfo; }
is_mountpoint() { mountpoints | grep -xF -- "$1" >/dev/null; }

comm_of() { cat "/proc/$1/comm" 2>/dev/null || true; }
# pid_alive NAME: prints the recorded PID if that process still runs the expected program
pid_alive() {
  local name=$1 f=$RUN/$1.pid pid want
  [[ -s $f ]] || return 1
  pid=$(<"$f")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  want=${name%%-*}                      # slurmd-a100-1 -> slurmd
  [[ $(comm_of "$pid") == "$want" ]] || return 1
  if [[ -n $ROOT ]]; then
    [[ $(readlink "/proc/$pid/root" 2>/dev/null) == "$ROOT" ]] || return 1
  fi
  echo "$pid"
}
# pid_running NAME: the recorded PID is a live process (any program: right after start_daemon it may still be
# setsid, env or chroot on its way to exec the daemon)
pid_running() {
  local f=$RUN/$1.pid pid
  [[ -s $f ]] || return 1
  pid=$(<"$f")
  [[ $pid =~ ^[0-9]+$ ]] && [[ -n $(still_running "$pid") ]]
}
DAEMONS=(munged mariadbd slurmdbd slurmctld)
for n in "${NODES[@]}"; do DAEMONS+=("slurmd-$n"); done

start_daemon() {  # start_daemon NAME CMD... (foreground daemon, PID recorded)
  local name=$1; shift
  local -a pre=(env SLURM_CONF="$LABIN/etc/slurm.conf")
  [[ -n $ROOT ]] && pre=(chroot "$ROOT" /usr/bin/env -i PATH="$SYS_PATH" HOME=/root LANG=C.UTF-8
    SLURM_CONF="$LABIN/etc/slurm.conf")
  (
    # close every inherited descriptor above 2 (e.g. a CI runner's pipes) so no daemon holds them
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      if ((fd > 2)); then eval "exec $fd>&-"; fi
    done 2>/dev/null
    exec setsid "${pre[@]}" "$@" </dev/null >>"$LAB/log/$name.out" 2>&1
  ) &
  echo $! >"$RUN/$name.pid"
}

still_running() {  # still_running PID... : prints those that run (not gone, not zombies)
  local pid
  for pid in "$@"; do
    [[ -d /proc/$pid ]] && [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] && echo "$pid"
  done
  return 0
}

wait_gone() {  # wait_gone TENTHS PID... : true once none of them runs, within TENTHS tenths of a second
  local tenths=$1 i; shift
  for ((i = 0; i < tenths; i++)); do
    [[ -z $(still_running "$@") ]] && return 0
    sleep 0.1
  done
  [[ -z $(still_running "$@") ]]
}

stop_pids() {  # stop_pids PID... : SIGTERM, wait up to 30 s, then SIGKILL
  (($#)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  wait_gone 300 "$@" && return 0
  local left
  left=$(still_running "$@" | tr '\n' ' ')
  log "still running after 30 s, sending SIGKILL: $left"
  # shellcheck disable=SC2086
  kill -KILL $left 2>/dev/null || true
  # gone for real before anything restarts (a MariaDB still holding ibdata1's lock makes the next one wait)
  wait_gone 100 "$@" || log "still running after SIGKILL: $(still_running "$@" | tr '\n' ' ')"
}

stop_daemons() {  # stop_daemons NAME...
  local name pid pids=()
  for name in "$@"; do
    if pid=$(pid_alive "$name"); then pids+=("$pid"); fi
    rm -f "$RUN/$name.pid"
  done
  ((${#pids[@]})) || return 0
  stop_pids "${pids[@]}"
}

# A port is in use when something listens there, or when any TCP socket but one in TIME_WAIT/CLOSE holds it as
# its local port: an outgoing connection given it from the ephemeral range (ip_local_port_range) makes a server's
# bind fail ("Address already in use") although nothing answers a connect.  The default ports lie below that range.
port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
  awk -v h="$(printf ':%04X' "$1")" 'FNR > 1 && substr($2, length($2) - 4) == h && $4 != "06" && $4 != "07" {f = 1}
    END {exit !f}' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
in_ephemeral_range() {
  local lo hi
  read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || return 1
  (($1 >= lo && $1 <= hi))
}

wait_until() {  # wait_until SECONDS WHAT CMD... : CMD succeeds within SECONDS of wall-clock time
  local end=$((SECONDS + $1)); shift 2   # $2 only documents what is awaited
  while ((SECONDS < end)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  "$@" >/dev/null 2>&1   # one last try at the deadline
}

log_tail() {  # log_tail FILE... : the last lines of each existing log, indented, for an error message
  local f
  for f in "$@"; do
    [[ -s $f ]] || continue
    echo "--- last lines of $f:"
    tail -n 15 "$f" | sed 's/^/    /'
  done
}

wait_daemon() {  # wait_daemon SECONDS NAME LOG... -- CMD... : CMD answers while daemon NAME keeps running
  local secs=$1 name=$2 end logs=()
  shift 2
  while (($#)) && [[ $1 != -- ]]; do logs+=("$1"); shift; done
  shift
  end=$((SECONDS + secs))
  while ((SECONDS < end)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if ! pid_running "$name"; then
      die "$name exited during start-up (it did not answer: $*)
$(log_tail "${logs[@]}")"
    fi
    sleep 0.2
  done
  "$@" >/dev/null 2>&1 && return 0
  die "$name (pid $(cat "$RUN/$name.pid" 2>/dev/null)) did not answer within $secs s: $*
$(log_tail "${logs[@]}")
--- load: $(cat /proc/loadavg)"
}

check_searchable() {  # every ancestor of the state dir must be o+x (munged, test users)
  local d=$1
  while [[ $d != / && -n $d ]]; do
    if [[ -e $d ]]; then
      local mode; mode=$(stat -c %a "$d")
      if (((8#$mode & 1) == 0)); then
        die "$d is mode $mode: every folder above the state dir must be world-searchable (o+x) so munge and the test users (alice, bob, carol) can reach it. Use a folder such as /work/... (not mktemp -d), or run: chmod o+x $d"
      fi
    fi
    d=$(dirname "$d")
  done
}

add_unix_user() {  # add_unix_user NAME [UID] (retries: parallel testbeds may hold the passwd lock)
  local u=$1 uid=${2:-} i
  local -a pre=()
  [[ -n $ROOT ]] && pre=(chroot "$ROOT")
  "${pre[@]}" id -u "$u" >/dev/null 2>&1 && return 0
  for ((i = 0; i < 20; i++)); do
    if "${pre[@]}" useradd -m -s /bin/bash ${uid:+-u "$uid"} "$u" 2>/dev/null; then return 0; fi
    "${pre[@]}" id -u "$u" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  die "useradd $u failed"
}

# ---------------------------------------------------------------------------------------------
# packages
HOST_PKGS=(munge slurmctld slurmd slurmdbd slurm-client mariadb-server lua5.1 bubblewrap python3-seccomp)  # the last two: test_unit_sandbox.py
CHROOT_PKGS=(munge slurmctld slurmd slurmdbd slurm-client mariadb-server python3 python3-venv
  procps util-linux passwd ca-certificates lua5.1 gcc libc6-dev python3-dev)

apt_install() {  # apt_install PKG... (in the current root; update only if a package is unknown)
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'install ok installed' >/dev/null || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  log "installing ${missing[*]}"
  [[ -e /usr/sbin/policy-rc.d ]] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; }
  if ! apt-cache show "${missing[@]}" >/dev/null 2>&1 || ! compgen -G "/var/lib/apt/lists/*_Packages" >/dev/null; then
    apt-get update -q >/dev/null
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
}

# ---------------------------------------------------------------------------------------------
# chroot releases (trixie, forky)
chroot_mount() {  # make the chroot's mounts, all private, no recursive binds, no host /dev
  # 1. the rootfs as a private bind of itself: nothing mounted below it propagates anywhere
  if ! is_mountpoint "$ROOT"; then
    mount --bind "$ROOT" "$ROOT"
    mount --make-private "$ROOT"
  fi
  # 2. a fresh proc
  if ! is_mountpoint "$ROOT/proc"; then
    mount -t proc -o nosuid,nodev,noexec proc "$ROOT/proc"
    mount --make-private "$ROOT/proc"
  fi
  # 3. /dev: a private tmpfs with the few device nodes the daemons need (the host /dev is NOT
  #    bound into the chroot, so nothing done here or at teardown can touch it)
  if ! is_mountpoint "$ROOT/dev"; then
    mount -t tmpfs -o mode=755,nosuid,size=64m tmpfs "$ROOT/dev"
    mount --make-private "$ROOT/dev"
    local spec name major minor mode
    for spec in null:1:3:666 zero:1:5:666 full:1:7:666 random:1:8:666 urandom:1:9:666 tty:5:0:666 ptmx:5:2:666; do
      IFS=: read -r name major minor mode <<<"$spec"
      mknod -m "$mode" "$ROOT/dev/$name" c "$major" "$minor"
    done
    mkdir -m 1777 "$ROOT/dev/shm"
    mkdir -m 755 "$ROOT/dev/pts"
    ln -s /proc/self/fd "$ROOT/dev/fd"
    ln -s /proc/self/fd/0 "$ROOT/dev/stdin"
    ln -s /proc/self/fd/1 "$ROOT/dev/stdout"
    ln -s /proc/self/fd/2 "$ROOT/dev/stderr"
  fi
  # 4. the repository at the same path (plain bind, private)
  mkdir -p "$ROOT$REPO"
  if ! is_mountpoint "$ROOT$REPO"; then
    mount --bind "$REPO" "$ROOT$REPO"
    mount --make-private "$ROOT$REPO"
  fi
}

chroot_procs() {  # PIDs of processes whose root directory is our chroot
  local p
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/root" 2>/dev/null) == "$ROOT" ]] && echo "${p#/proc/}"
  done
  return 0
}

chroot_umount() {  # unmount exactly what is mounted below the rootfs, innermost first
  [[ -n $ROOT && -d $ROOT ]] || return 0
  local pids mp i
  pids=$(chroot_procs | tr '\n' ' ')
  if [[ -n ${pids// /} ]]; then
    # identified precisely (root dir == our chroot), killed by PID, never by name
    log "stopping processes still inside the chroot: $pids"
    # shellcheck disable=SC2086
    stop_pids $pids
  fi
  local id
  while read -r id mp; do
    [[ -n $mp ]] || continue
    for ((i = 0; i < 20; i++)); do
      mount_id_exists "$id" || break
      umount -- "$mp" 2>/dev/null && break   # never -l, never -R
      sleep 0.5
    done
    mount_id_exists "$id" && die "could not unmount $mp (busy?); left it mounted, nothing deleted"
  done < <(mounts_under_ids "$ROOT")
  return 0
}

safe_rm_state() {  # rm -rf the state dir, only if nothing below it is mounted
  [[ -d $STATE ]] || return 0
  case $STATE in /|/usr|/usr/*|/etc|/etc/*|/dev|/dev/*|/proc|/proc/*|/sys|/sys/*|"$REPO") die "refusing to delete $STATE" ;; esac
  [[ $REPO/ == "$STATE"/* ]] && die "refusing to delete $STATE: it contains the repository"
  [[ -e $STATE/.slurm-fair-testbed ]] || die "refusing to delete $STATE: no .slurm-fair-testbed marker (not made by 'up')"
  if [[ -n $(mounts_under "$STATE") ]]; then
    die "refusing to delete $STATE: still mounted below it: $(mounts_under "$STATE" | tr '\n' ' ')"
  fi
  rm -rf --one-file-system -- "$STATE"
}

bootstrap_rootfs() {
  if [[ -e $ROOT/.testbed-bootstrapped ]]; then return 0; fi
  if [[ -d $ROOT ]]; then
    log "removing an incomplete rootfs"
    chroot_umount
    [[ -z $(mounts_under "$ROOT") ]] || die "incomplete rootfs still has mounts"
    rm -rf --one-file-system -- "$ROOT"
  fi
  apt_install debootstrap
  local mirror=${TESTBED_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  log "debootstrap --variant=minbase $RELEASE (cached in $ROOT afterwards)"
  mkdir -p "$STATE"
  local -a script=()
  [[ -n $DEBOOTSTRAP_SCRIPT ]] && script=("$DEBOOTSTRAP_SCRIPT")
  if ! debootstrap --variant=minbase "$RELEASE" "$ROOT" "$mirror" "${script[@]}" >"$STATE/debootstrap.log" 2>&1; then
    chroot_umount || true
    die "debootstrap failed, see $STATE/debootstrap.log"
  fi
  # debootstrap unmounts its own proc/sys on exit; make sure
  chroot_umount
  touch "$ROOT/.testbed-bootstrapped"
}

chroot_setup() {
  bootstrap_rootfs
  mkdir -p "$ROOT/etc/ssl/certs"
  cp /etc/hosts "$ROOT/etc/hosts"
  cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
  # an intercepting HTTPS proxy's CA (if any) lives only in the host bundle
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] && cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/host-ca-bundle.crt"
  chroot_mount
  if [[ ! -e $ROOT/.testbed-packages ]] || [[ $(<"$ROOT/.testbed-packages") != "${CHROOT_PKGS[*]}" ]]; then
    local suite
    for suite in "${SUITES[@]}"; do echo "deb http://deb.debian.org/${suite% *} ${suite#* } main"; done >"$ROOT/etc/apt/sources.list"
    if ((APT_NO_VALID_UNTIL)); then
      echo 'Acquire::Check-Valid-Until "false";' >"$ROOT/etc/apt/apt.conf.d/90slurm-fair-testbed"
    else
      rm -f "$ROOT/etc/apt/apt.conf.d/90slurm-fair-testbed"
    fi
    printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
    chmod 755 "$ROOT/usr/sbin/policy-rc.d"
    log "installing Slurm $SLURM_SERIES and friends in the chroot"
    in_env apt-get update -q >"$STATE/chroot-apt.log" 2>&1 || die "apt-get update in the chroot failed, see $STATE/chroot-apt.log"
    in_env env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${CHROOT_PKGS[@]}" \
      >>"$STATE/chroot-apt.log" 2>&1 || die "apt-get install in the chroot failed, see $STATE/chroot-apt.log"
    in_env apt-get clean >/dev/null 2>&1 || true
    echo "${CHROOT_PKGS[*]}" >"$ROOT/.testbed-packages"
  fi
}

chroot_venv() {  # <state>/venv inside the chroot with the project installed in editable mode
  local venv=$LABIN/venv stamp want
  if [[ ! -x $ROOT$venv/bin/python ]]; then
    log "creating the chroot venv $venv"
    in_env python3 -m venv "$venv" >/dev/null
  fi
  local -a pin=(-c "$REPO/constraints.txt")
  [[ -n ${SLURM_FAIR_UNPINNED:-} ]] && pin=()
  want="$REPO $(cat "$REPO/pyproject.toml" "$REPO/constraints.txt" | sha256sum | cut -c1-16) ${#pin[@]}"
  stamp=$ROOT$venv/.testbed-installed
  if [[ ! -e $stamp || $(<"$stamp") != "$want" ]]; then
    log "pip install -e '.[test]' in the chroot venv"
    local -a pipenv=(PIP_DISABLE_PIP_VERSION_CHECK=1 "PIP_DEFAULT_TIMEOUT=${PIP_DEFAULT_TIMEOUT:-120}")
    [[ -f $ROOT/etc/ssl/host-ca-bundle.crt ]] && pipenv+=(PIP_CERT=/etc/ssl/host-ca-bundle.crt)
    [[ -n ${PIP_INDEX_URL:-} ]] && pipenv+=(PIP_INDEX_URL="$PIP_INDEX_URL")
    if ! in_env env "${pipenv[@]}" "$venv/bin/pip" install -q "${pin[@]}" -e "${REPO}[test]" >"$STATE/chroot-pip.log" 2>&1; then
      die "pip install in the chroot venv failed, see $STATE/chroot-pip.log"
    fi
    echo "$want" >"$stamp"
  fi
}

# ---------------------------------------------------------------------------------------------
# configuration
install_job_submit() {  # etc/job_submit.lua next to slurm.conf: checked with luac5.1 -p first, tmp + mv
  local tmp="$LAB/etc/.job_submit.lua.tmp"
  cp "$REPO/etc/job_submit.lua" "$tmp"
  if ! in_env luac5.1 -p "$LABIN/etc/.job_submit.lua.tmp"; then
    rm -f "$tmp"
    die "etc/job_submit.lua does not compile (luac5.1 -p); slurmctld would not start with it"
  fi
  chmod 644 "$tmp"
  touch "$tmp"  # slurmctld reloads the script when its mtime grows
  mv -f "$tmp" "$LAB/etc/job_submit.lua"
}

write_configs() {
  local comm="" hostip
  hostip=$(getent ahostsv4 "$(hostname)" 2>/dev/null | awk 'NR==1{print $1}')
  [[ $hostip == 127.* ]] && comm=1
  mkdir -p "$LAB"/{etc,run,log,state,munge,dev,jobs}
  chmod 1777 "$LAB/jobs"
  chmod 700 "$LAB/munge"
  [[ -s $LAB/munge/munge.key ]] || { dd if=/dev/urandom of="$LAB/munge/munge.key" bs=1024 count=1 status=none; }
  chmod 600 "$LAB/munge/munge.key"

  local n i gres t cnt spec idx
  {
    cat <<EOF
# generated by contrib/testbed/testbed.sh ($RELEASE); regenerated on every fresh 'up'
ClusterName=$CLUSTER
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$((BASE + 4))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$LABIN/run/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation=$LABIN/state
SlurmdSpoolDir=$LABIN/spool/%n
SlurmctldPidFile=$LABIN/run/slurmctld.daemon.pid
SlurmdPidFile=$LABIN/run/slurmd-%n.daemon.pid
SlurmctldLogFile=$LABIN/log/slurmctld.log
SlurmdLogFile=$LABIN/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SlurmdParameters=config_overrides
MailProg=/bin/true
ReturnToService=2
JobRequeue=1
TrackWCKey=yes
KillWait=2
MinJobAge=300
MaxJobCount=20000
InactiveLimit=0
Waittime=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1,sched_min_interval=100000
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$LABIN/run/munge.socket
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu,gres/gpu:a100,gres/gpu:v100,gres/gpu:k80
PriorityType=priority/multifactor
PriorityDecayHalfLife=7-0
PriorityCalcPeriod=1
PriorityWeightAge=1000
PriorityWeightFairshare=10000
PriorityWeightQOS=10000
PriorityWeightJobSize=0
PriorityWeightPartition=0
PrologSlurmctld=$LABIN/hooks/slurm-fair-hook
EpilogSlurmctld=$LABIN/hooks/slurm-fair-hook
Prolog=$LABIN/hooks/slurm-fair-hook
Epilog=$LABIN/hooks/slurm-fair-hook
JobSubmitPlugins=lua
EOF
    [[ $RELEASE == bookworm ]] && echo "SwitchType=switch/none"
    [[ -n $comm ]] && echo "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny"
    echo "NodeName=DEFAULT CPUs=8 RealMemory=16000 State=UNKNOWN"
    i=4
    for n in "${NODES[@]}"; do
      gres=""
      for spec in ${NODE_GRES[$n]//,/ }; do gres+="${gres:+,}gpu:$spec"; done
      echo "NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((BASE + i)) Gres=$gres"
      ((++i))
    done
    echo "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } >"$LAB/etc/slurm.conf"
  install_job_submit

  {
    echo "AutoDetect=off"
    for n in "${NODES[@]}"; do
      mkdir -p "$LAB/dev/$n" "$LAB/spool/$n"
      idx=0
      for spec in ${NODE_GRES[$n]//,/ }; do
        t=${spec%%:*}; cnt=${spec##*:}
        for ((i = idx; i < idx + cnt; i++)); do
          [[ -c $LAB/dev/$n/nvidia$i ]] || mknod -m 666 "$LAB/dev/$n/nvidia$i" c 1 3
        done
        echo "NodeName=$n Name=gpu Type=$t File=$LABIN/dev/$n/nvidia[$idx-$((idx + cnt - 1))]"
        idx=$((idx + cnt))
      done
    done
  } >"$LAB/etc/gres.conf"

  rm -f "$LAB/etc/cgroup.conf"
  ((CHROOT)) && echo "CgroupPlugin=disabled" >"$LAB/etc/cgroup.conf"

  {
    cat <<EOF
AuthType=auth/munge
AuthInfo=socket=$LABIN/run/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$LABIN/log/slurmdbd.log
PidFile=$LABIN/run/slurmdbd.daemon.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$MYSQL_PORT
StorageUser=slurm
StoragePass=slurmtestbed
StorageLoc=slurm_acct_db
TrackWCKey=yes
EOF
    [[ -n $comm ]] && echo "CommunicationParameters=NoInAddrAny"
  } >"$LAB/etc/slurmdbd.conf"
  chmod 600 "$LAB/etc/slurmdbd.conf"

  # slurm-fair's job start/end hooks (same code path as `slurm-fair hooks install`, with the python3 that
  # slurmctld runs them with: the host's, or the chroot's for a chroot release)
  in_env python3 -I -S "$REPO/slurm_fair/hookinstall.py" install "$LABIN/hooks" --spool "$LABIN/hooks-spool" \
    --slurm-conf "$LABIN/etc/slurm.conf" --log "$LABIN/log/hooks.log" >/dev/null ||
    die "installing the slurm-fair hooks into $LAB/hooks failed"

  cat >"$LAB/slurm-fair.toml" <<EOF
# written by contrib/testbed/testbed.sh for the $RELEASE testbed
[daemon]
database = "$LABIN/slurm-fair.sqlite"
period = 20
dry_run = false  # the testbed is for trying slurm-fair for real (a fresh site config starts in shadow mode)

[cluster]
backend = "cli"

[limits]
ownership_file = "$LABIN/ownership/limits.json"  # in the lab (the default is beside the database's folder)

[hooks]
spool = "$LABIN/hooks-spool"

[submit]
type_map = "$LABIN/etc/gpu_type_map.txt"
EOF
  cat >"$LAB/testbed.env" <<EOF
SLURM_CONF=$LABIN/etc/slurm.conf
SLURM_FAIR_CONFIG=$LABIN/slurm-fair.toml
SLURM_FAIR_TESTBED=$LABIN
SLURM_FAIR_TESTBED_RELEASE=$RELEASE
TESTBED_JOBDIR=$LABIN/jobs
TESTBED_CLUSTER=$CLUSTER
EOF
}

setup_accounts() {
  local have
  have=$(in_env sacctmgr -n -P show cluster format=cluster 2>/dev/null || true)
  grep -qx "$CLUSTER" <<<"$have" || in_env sacctmgr -i add cluster "$CLUSTER" >/dev/null
  have=$(in_env sacctmgr -n -P show assoc format=account,user 2>/dev/null)
  local a u
  for a in acct_a acct_b acct_c; do
    grep -qx "$a|" <<<"$have" || in_env sacctmgr -i add account "$a" cluster="$CLUSTER" fairshare="${ACCT_SHARE[$a]}" >/dev/null
  done
  for u in "${USERS[@]}"; do
    grep -qx "${USER_ACCT[$u]}|$u" <<<"$have" ||
      in_env sacctmgr -i add user "$u" account="${USER_ACCT[$u]}" defaultaccount="${USER_ACCT[$u]}" fairshare=1 >/dev/null
  done
  for a in acct_a acct_b acct_c; do
    grep -qx "$a|root" <<<"$have" || in_env sacctmgr -i add user root account="$a" fairshare=1 >/dev/null
  done
}

munge_ok() { in_env munge -n -S "$LABIN/run/munge.socket" | in_env unmunge -S "$LABIN/run/munge.socket"; }
no_jobs() { local out; out=$(in_env squeue -h -o %i) && [[ -z $out ]]; }

nodes_ready() {  # every node registered and usable: idle, or running jobs (a reused testbed may be busy)
  local out
  out=$(in_env sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
  [[ $(awk '$2 ~ /^(idle|mix|alloc|comp)$/ {print $1}' <<<"$out" | sort -u | wc -l) -eq ${#NODES[@]} ]]
}

# ---------------------------------------------------------------------------------------------
# commands
cmd_up() {
  mkdir -p "$STATE"
  STATE=$(cd "$STATE" && pwd -P)
  echo "slurm-fair testbed state ($RELEASE); 'testbed.sh down --purge' deletes this folder" >"$STATE/.slurm-fair-testbed"
  echo "$BASE $MYSQL_PORT" >"$STATE/ports"
  [[ -n $ROOT ]] && { ROOT=$STATE/rootfs; LAB=$ROOT$LABIN; }
  [[ -z $ROOT ]] && { LABIN=$STATE; LAB=$STATE; }
  RUN=$LAB/run
  [[ -n $ROOT ]] || check_searchable "$STATE"   # the chroot has its own /testbed
  log "state $STATE, ports slurmctld $CTLD_PORT slurmdbd $DBD_PORT slurmd $((BASE + 4))-$((BASE + 7)) mysql $MYSQL_PORT"
  if [[ -n $ROOT ]]; then
    chroot_setup
  else
    apt_install "${HOST_PKGS[@]}"
  fi

  local running=0 name
  for name in "${DAEMONS[@]}"; do pid_alive "$name" >/dev/null && ((++running)) || true; done
  if ((running == ${#DAEMONS[@]})); then
    log "already running; reusing it"
  else
    if ((running > 0)); then
      log "partly running ($running of ${#DAEMONS[@]} daemons); restarting it"
      stop_all_daemons
    fi
    local p
    for p in "$CTLD_PORT" "$DBD_PORT" $(seq $((BASE + 4)) $((BASE + 7))) "$MYSQL_PORT"; do
      port_in_use "$p" && die "port $p is already in use (another testbed? set TESTBED_PORT_BASE/TESTBED_MYSQL_PORT)"
      in_ephemeral_range "$p" && log "warning: port $p lies in the ephemeral port range" \
        "($(tr -s '\t ' - </proc/sys/net/ipv4/ip_local_port_range)); an outgoing connection may take it first"
    done
    for name in "${USERS[@]}" "$OPERATOR"; do
      add_unix_user "$name"
      [[ -n $ROOT ]] && add_unix_user "$name" "$(id -u "$name")"
    done
    write_configs
    rm -f "$RUN"/*.pid "$RUN"/*.sock "$RUN"/munge.socket*

    log "starting munged"
    start_daemon munged munged --foreground --force --key-file="$LABIN/munge/munge.key" \
      --socket="$LABIN/run/munge.socket" --pid-file="$LABIN/run/munged.daemon.pid" \
      --log-file="$LABIN/log/munged.log" --seed-file="$LABIN/munge/munged.seed" --num-threads=2
    wait_daemon 20 munged "$LAB/log/munged.log" "$LAB/log/munged.out" -- munge_ok

    if [[ ! -d $LAB/mysql/mysql ]]; then
      log "initialising MariaDB"
      in_env mariadb-install-db --no-defaults --user=root --datadir="$LABIN/mysql" \
        --auth-root-authentication-method=socket --skip-test-db >"$LAB/log/mariadb-install.log" 2>&1 ||
        die "mariadb-install-db failed, see $LAB/log/mariadb-install.log"
    fi
    log "starting MariaDB on 127.0.0.1:$MYSQL_PORT"
    # MariaDB >= 11.8 (trixie, forky) turns innodb_snapshot_isolation on; slurmdbd 26.05 warns that it then
    # fatals on a write conflict, so it is off there (bookworm's 10.11 has no such option)
    local -a myextra=()
    ((CHROOT)) && myextra=(--innodb-snapshot-isolation=OFF)
    start_daemon mariadbd mariadbd --no-defaults --user=root --datadir="$LABIN/mysql" \
      --socket="$LABIN/run/mysqld.sock" --port="$MYSQL_PORT" --bind-address=127.0.0.1 \
      --pid-file="$LABIN/run/mysqld.daemon.pid" --log-error="$LABIN/log/mysqld.err" \
      --innodb-buffer-pool-size=256M --innodb-log-file-size=64M --innodb-lock-wait-timeout=900 "${myextra[@]}"
    wait_daemon 60 mariadbd "$LAB/log/mysqld.err" "$LAB/log/mariadbd.out" -- \
      in_env mariadb-admin --no-defaults --socket="$LABIN/run/mysqld.sock" -u root ping
    # The database is created here, not by slurmdbd: slurmdbd 24.11.5 with trixie's libmariadb 11.8.9 fails its
    # first query ("Number of columns in result (=1) set exceeds maximum allowed number of columns (=0)",
    # fatal in _check_mysql_concat_is_sane) when it connects while slurm_acct_db does not exist yet.
    in_env mariadb --no-defaults --socket="$LABIN/run/mysqld.sock" -u root -e \
      "CREATE DATABASE IF NOT EXISTS slurm_acct_db; CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmtestbed'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" ||
      die "could not create the MariaDB user for slurmdbd"

    log "starting slurmdbd"
    start_daemon slurmdbd slurmdbd -D
    wait_daemon 60 slurmdbd "$LAB/log/slurmdbd.log" "$LAB/log/slurmdbd.out" -- in_env sacctmgr -n show cluster
    setup_accounts

    log "starting slurmctld and ${#NODES[@]} slurmd"
    start_daemon slurmctld slurmctld -D -i
    for name in "${NODES[@]}"; do start_daemon "slurmd-$name" slurmd -D -N "$name"; done
  fi

  if ! wait_until 90 "nodes ready" nodes_ready; then
    in_env sinfo -N -l >&2 || true
    in_env sinfo -R >&2 || true
    die "nodes not ready (idle or busy) after 90 s; logs in $LAB/log"
  fi
  wait_until 30 sacctmgr in_env sacctmgr -n show assoc format=account || die "sacctmgr does not answer"
  for name in "${DAEMONS[@]}"; do pid_alive "$name" >/dev/null || die "$name died, see $LAB/log/$name.out"; done
  [[ -n $ROOT ]] && chroot_venv
  log "up: ${#NODES[@]} nodes ready; SLURM_CONF=$LABIN/etc/slurm.conf"
}

cancel_jobs() {
  pid_alive slurmctld >/dev/null || return 0
  local ids
  ids=$(in_env squeue -h -o %i 2>/dev/null | tr '\n' ' ') || return 0
  [[ -n ${ids// /} ]] || return 0
  log "cancelling jobs $ids"
  # shellcheck disable=SC2086
  in_env scancel $ids 2>/dev/null || true
  wait_until 30 "jobs gone" no_jobs ||
    log "some jobs did not finish within 30 s"
}

stop_all_daemons() {
  local slurm=(slurmctld) n
  for n in "${NODES[@]}"; do slurm+=("slurmd-$n"); done
  stop_daemons "${slurm[@]}"
  stop_daemons slurmdbd
  stop_daemons mariadbd
  stop_daemons munged
}

cmd_down() {
  [[ -d $STATE ]] || { log "no state dir $STATE; nothing to do"; return 0; }
  cancel_jobs
  log "stopping daemons"
  stop_all_daemons
  if [[ -n $ROOT ]]; then
    chroot_umount
    [[ -z $(mounts_under "$ROOT") ]] || die "mounts left under $ROOT"
  fi
  if ((PURGE)); then
    log "deleting $STATE"
    safe_rm_state
  fi
  log "down"
}

cmd_status() {
  local name pid up=0
  echo "release $RELEASE, state $STATE, slurmctld port $CTLD_PORT, mysql port $MYSQL_PORT"
  for name in "${DAEMONS[@]}"; do
    if pid=$(pid_alive "$name"); then echo "  $name: running (pid $pid)"; ((++up)); else echo "  $name: stopped"; fi
  done
  if [[ -n $ROOT ]]; then
    local mp
    while read -r mp; do [[ -n $mp ]] && echo "  mounted: $mp"; done < <(mounts_under "$ROOT" | tac)
    local procs
    procs=$(chroot_procs | tr '\n' ' ')
    if [[ -n ${procs// /} ]]; then
      echo "  processes inside the chroot: $procs"
      ((up == 0)) && up=-1   # not "all stopped"
    fi
  fi
  if pid_alive slurmctld >/dev/null; then
    in_env sinfo -N -o '  %N %t %G' 2>/dev/null || true
    in_env squeue -o '  %i %u %a %T %r %b' 2>/dev/null || true
  fi
  ((up == ${#DAEMONS[@]})) && return 0
  ((up == 0)) && return 3
  return 1
}

cmd_env() {
  printf 'export SLURM_CONF=%q\n' "$LABIN/etc/slurm.conf"
  printf 'export SLURM_FAIR_CONFIG=%q\n' "$LABIN/slurm-fair.toml"
  printf 'export SLURM_FAIR_TESTBED=%q\n' "$LABIN"
  printf 'export SLURM_FAIR_TESTBED_RELEASE=%q\n' "$RELEASE"
  [[ -n $ROOT ]] && echo "# paths inside the chroot $ROOT: run clients with: $0 --release $RELEASE exec -- CMD"
  return 0
}

cmd_exec() {
  (($#)) || die "exec needs a command: exec -- CMD..."
  [[ -f $LAB/testbed.env ]] || die "no testbed in $STATE; run: $0 --release $RELEASE up"
  local -a envs=()
  local line
  while IFS= read -r line; do [[ $line == *=* ]] && envs+=("$line"); done <"$LAB/testbed.env"
  if [[ -z $ROOT ]]; then
    exec env "${envs[@]}" "$@"
  fi
  is_mountpoint "$ROOT/proc" && is_mountpoint "$ROOT$REPO" || die "the chroot is not mounted; run: $0 --release $RELEASE up"
  local v
  envs+=(PATH="$LABIN/venv/bin:$SYS_PATH" VIRTUAL_ENV="$LABIN/venv" HOME=/root LANG=C.UTF-8)
  for v in TERM CI PYTEST_ADDOPTS SLURM_FAIR_SKIP_SLOW; do [[ -n ${!v:-} ]] && envs+=("$v=${!v}"); done
  [[ -f $ROOT/etc/ssl/host-ca-bundle.crt ]] && envs+=(PIP_CERT=/etc/ssl/host-ca-bundle.crt)
  exec chroot "$ROOT" /usr/bin/env -i "${envs[@]}" /bin/sh -c 'cd "$1" 2>/dev/null || cd /; shift; exec "$@"' sh "$PWD" "$@"
}

case $CMD in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  exec) cmd_exec "$@" ;;
esac
