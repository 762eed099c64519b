#!/usr/bin/env bash
# The shipped systemd unit under a real systemd, against a running testbed: boots a Debian 12 container
# (systemd-nspawn, host network) whose systemd runs slurm_fair/share/slurm-fair.service unchanged, with one
# drop-in (SLURM_CONF of the testbed, SLURM_FAIR_ROLLBACK_ON_STOP=yes), and checks: the online security score,
# a round as the Operator slurm-fair under the sandbox (seccomp on, no capability, no new privileges), /metrics,
# `systemctl restart` and `try-restart` keep the limits, a crash (SIGKILL) keeps them and restarts, SIGTERM to
# the daemon, `systemctl stop` and `disable --now` roll back; with SLOW=1 also a round of 130 s (SLURM_FAIR_PAUSE_BEFORE_APPLY)
# that `systemctl stop` lets finish (above the old 120-s TimeoutStopSec) before rolling back.
#
#   eval "$(TESTBED_NAME=<yours> contrib/testbed/testbed.sh env)"
#   contrib/systemd/nspawn-check.sh ROOTFS_DIR      # as root; ROOTFS_DIR is made by debootstrap if empty
#
# Needs: debootstrap, systemd-container (systemd-nspawn), the checkout's .venv (Python 3.11, as Debian 12's),
# a testbed with the Unix users alice, bob and slurm-fair (uid shared with the container). Leaves the testbed's
# jobs cancelled, limits cleared and the Operator removed; the container is shut down, ROOTFS_DIR kept.
set -euo pipefail
trap 'echo "nspawn-check: line $LINENO failed: $BASH_COMMAND" >&2' ERR
ROOT=${1:?usage: nspawn-check.sh ROOTFS_DIR}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
: "${SLURM_CONF:?eval \"\$(contrib/testbed/testbed.sh env)\" first}"
PORT=${METRICS_PORT:-39830}
FAILS=0
ok() { echo "PASS: $*"; }
bad() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
limits() { sacctmgr -n -P show assoc where account=acct_a,acct_b user= format=account,grptres | tr '\n' ' '; }

if [[ ! -x $ROOT/usr/bin/python3 ]]; then
  debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,slurm-client,libmunge2,python3,python3-venv \
    bookworm "$ROOT" http://deb.debian.org/debian >/dev/null
fi
uid=$(id -u slurm-fair); gid=$(id -g slurm-fair)
chroot "$ROOT" sh -c "getent group slurm-fair >/dev/null || groupadd -g $gid slurm-fair
  id slurm-fair >/dev/null 2>&1 || useradd --system -u $uid -g $gid --home /var/lib/slurm-fair \
    --shell /usr/sbin/nologin slurm-fair 2>/dev/null
  [ -x /opt/slurm-fair/bin/python3 ] || python3 -m venv --without-pip /opt/slurm-fair"
# the checkout's packages, bound read-only at their own path, seen from the container's venv
echo "import site; site.addsitedir('$REPO/.venv/lib/python3.11/site-packages')" \
  >"$ROOT/opt/slurm-fair/lib/python3.11/site-packages/checkout.pth"
printf '#!/opt/slurm-fair/bin/python3\nfrom slurm_fair.entry import console_main\nconsole_main()\n' \
  >"$ROOT/usr/local/bin/slurm-fair"
chmod 755 "$ROOT/usr/local/bin/slurm-fair"
install -m 644 "$REPO/slurm_fair/share/slurm-fair.service" "$ROOT/etc/systemd/system/slurm-fair.service"
rm -rf "$ROOT/etc/systemd/system/slurm-fair.service.d"
mkdir -p "$ROOT/etc/systemd/system/slurm-fair.service.d" "$ROOT/etc/slurm-fair"
printf '[Service]\nEnvironment=SLURM_CONF=%s\nEnvironment=SLURM_FAIR_ROLLBACK_ON_STOP=yes\n' "$SLURM_CONF" \
  >"$ROOT/etc/systemd/system/slurm-fair.service.d/testbed.conf"
cat >"$ROOT/etc/slurm-fair/slurm-fair.toml" <<EOF
[daemon]
period = 600
dry_run = false
[cluster]
backend = "cli"
[limits]
lend = false
accounts = ["acct_a", "acct_b"]
[hooks]
spool = "/var/spool/slurm-fair/records"
[submit]
type_map = "/var/lib/slurm-fair/gpu_type_map.txt"
[preemption]
enabled = false
[metrics]
listen = "127.0.0.1:$PORT"
EOF
install -d -o "$uid" -g "$gid" -m 2770 "$ROOT/var/spool/slurm-fair/records"
rm -rf "$ROOT/var/lib/slurm-fair" "$ROOT/var/lib/slurm-fair-ownership"

setsid systemd-nspawn --register=no --keep-unit -q -D "$ROOT" -b --bind-ro="$REPO" </dev/null >"$ROOT.boot.log" 2>&1 &
NSPAWN=$!
cleanup() {
  scancel --name=unit-nspawn >/dev/null 2>&1 || true
  sacctmgr -i delete user slurm-fair >/dev/null 2>&1 || true
  for a in acct_a acct_b; do
    sacctmgr -i modify account where "name=$a" set GrpTRES=gres/gpu=-1,gres/gpu:v100=-1,gres/gpu:a100=-1,gres/gpu:k80=-1 \
      >/dev/null 2>&1 || true
  done
  kill -TERM "$NSPAWN" 2>/dev/null && wait "$NSPAWN" 2>/dev/null || true
}
trap cleanup EXIT
LEADER=""
for _ in $(seq 60); do
  for d in /proc/[0-9]*; do
    [[ $(awk '{print $4}' "$d/stat" 2>/dev/null) == "$NSPAWN" ]] && LEADER=${d#/proc/}
  done
  [[ -n $LEADER ]] && break
  sleep 1
done
[[ -n $LEADER ]] || { echo "the container did not start: $ROOT.boot.log" >&2; exit 1; }
in_c() { nsenter -t "$LEADER" -a "$@"; }
for _ in $(seq 60); do
  case $(in_c systemctl is-system-running 2>/dev/null || true) in running|degraded) break ;; esac
  sleep 1
done

score=$(in_c systemd-analyze security slurm-fair.service 2>&1 | sed -n 's/.*exposure level for slurm-fair.service: \([0-9.]*\) \([A-Z]*\).*/\1 \2/p')
awk -v s="${score%% *}" 'BEGIN { exit !(s != "" && s <= 3.0) }' && ok "systemd-analyze security (online): $score" ||
  bad "systemd-analyze security: '$score'"

sacctmgr -i delete user slurm-fair >/dev/null 2>&1 || true  # a leftover of an aborted run
sacctmgr -i add user slurm-fair account=acct_a adminlevel=Operator >/dev/null
for u in alice:acct_a bob:acct_b; do
  for _ in 1 2 3 4 5 6; do
    runuser -u "${u%%:*}" -- env SLURM_CONF="$SLURM_CONF" sbatch -Q -A "${u#*:}" --gres=gpu:v100:1 \
      -J unit-nspawn -o /dev/null --wrap "sleep 900"
  done
done
wait_round() {  # wait_round N: until the journal has N "round ...: status=ok" lines since the start
  for _ in $(seq 90); do
    (($(in_c journalctl -b -u slurm-fair -o cat --no-pager | grep -c ': status=ok ') >= $1)) && return 0
    sleep 1
  done
  return 1
}
in_c systemctl start slurm-fair
wait_round 1 && ok "a round under the sandbox: $(in_c journalctl -b -u slurm-fair -o cat --no-pager | grep -m1 'status=ok')" ||
  bad "no round: $(in_c journalctl -b -u slurm-fair -o cat --no-pager | tail -5)"
pid=$(in_c systemctl show -P MainPID slurm-fair)
st=$(in_c grep -E '^(Seccomp|NoNewPrivs|CapBnd|CapEff):' "/proc/$pid/status" | tr -s '\t\n' '  ')
[[ $st == *"CapEff: 0000000000000000"*"CapBnd: 0000000000000000"*"NoNewPrivs: 1"*"Seccomp: 2"* ]] &&
  ok "sandboxed: $st" || bad "not sandboxed: $st"
curl -sf "http://127.0.0.1:$PORT/metrics" | grep -q '^slurm_fair_' && ok "/metrics served on $PORT" || bad "/metrics"
before=$(limits)
[[ $before == *v100=* ]] && ok "limits written: $before" || bad "no limits: $before"

in_c systemctl restart slurm-fair && wait_round 2 || true
[[ $(limits) == "$before" ]] && in_c journalctl -b -u slurm-fair -o cat --no-pager | grep -q 'a restart, not a stop' &&
  ok "systemctl restart: no rollback" || bad "systemctl restart: $(limits)"
in_c systemctl try-restart slurm-fair && wait_round 3 || true
[[ $(limits) == "$before" ]] && ok "systemctl try-restart: no rollback" || bad "try-restart: $(limits)"
in_c systemctl kill -s KILL --kill-whom=main slurm-fair
sleep 3
[[ $(limits) == "$before" ]] && ok "a crash (SIGKILL): no rollback" || bad "crash: $(limits)"
wait_round 4 && ok "a crash: Restart=on-failure started it again" || bad "not restarted after a crash"
in_c systemctl kill -s TERM --kill-whom=main slurm-fair
sleep 8
[[ $(limits) == "acct_a| acct_b| " ]] && ok "SIGTERM outside systemctl: rolled back" || bad "SIGTERM: $(limits)"
in_c systemctl start slurm-fair && wait_round 5 || true
again=$(limits)  # written again by the round after the start (a rollback of nothing would prove nothing)
in_c systemctl stop slurm-fair
[[ $again == "$before" && $(limits) == "acct_a| acct_b| " ]] && ok "systemctl stop: rolled back" ||
  bad "systemctl stop: $again -> $(limits)"
in_c systemctl enable --now slurm-fair 2>/dev/null && wait_round 6 || true
again=$(limits)
in_c systemctl disable --now slurm-fair 2>/dev/null
[[ $again == "$before" && $(limits) == "acct_a| acct_b| " ]] && ok "systemctl disable --now: rolled back" ||
  bad "disable --now: $again -> $(limits)"

if [[ ${SLOW:-0} == 1 ]]; then
  printf '[Service]\nEnvironment=SLURM_FAIR_PAUSE_BEFORE_APPLY=130\n' >"$ROOT/etc/systemd/system/slurm-fair.service.d/slow.conf"
  in_c systemctl daemon-reload
  in_c systemctl start slurm-fair
  sleep 8  # the round has begun: the pause is before its apply (its limits are written when it ends)
  t0=$SECONDS
  in_c systemctl stop slurm-fair
  took=$((SECONDS - t0))
  r=$(in_c systemctl show -P Result slurm-fair)
  ((took > 120)) && [[ $r == success && $(limits) == "acct_a| acct_b| " ]] &&
    in_c journalctl -b -u slurm-fair -o cat --no-pager | grep -q 'seconds=1[2-9][0-9]\.' &&
    ok "a 130-s round: stop waited $took s for it (result $r), then rolled back" || bad "slow stop: $took s, $r, $(limits)"
fi
echo "$FAILS failed"
exit $((FAILS > 0))
