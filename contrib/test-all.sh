#!/usr/bin/env bash
# The full test run (README's test command; CI runs it via .ci/run). As root:
#   1. .venv (created if absent) with `pip install -c constraints.txt -e '.[test]'` (SLURM_FAIR_UNPINNED=1: no -c)
#   1b. etc/job_submit.lua and the site example: `luac5.1 -p` + the offline Lua tests (tests/lua/test_*.lua;
#       lua5.1 installed with apt if missing)
#   2. Slurm 22.05 testbed up (contrib/testbed/testbed.sh), `pytest -q tests` against it
#   3. unless SLURM_FAIR_SKIP_TRIXIE=1: Slurm 24.11 testbed (trixie chroot) up,
#      `pytest -q tests/integration` inside the chroot
#   4. unless SLURM_FAIR_SKIP_FORKY=1: Slurm 26.05 testbed (forky chroot) up, the same inside that chroot
#   5. every testbed down (always, also on error/interrupt), host /dev checked intact
# Exits non-zero if any phase or pytest run failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
REPO=$(pwd -P)
TB=(bash "$REPO/contrib/testbed/testbed.sh")
LOGDIR=$REPO/.testbed/logs
mkdir -p "$LOGDIR"
T0=$SECONDS
FAILED=()
TIMES=()
SUMMARIES=()
say() { echo "== test-all +$((SECONDS - T0))s: $*"; }
PHASE_NAME="" PHASE_T=0
phase() {  # phase NAME: ends the previous phase (records its time), starts a new one
  [[ -n $PHASE_NAME ]] && TIMES+=("$(printf '%-34s %5ss' "$PHASE_NAME" $((SECONDS - PHASE_T)))")
  PHASE_NAME=$1 PHASE_T=$SECONDS
  [[ -n $1 ]] && say "$1"
  return 0
}

dev_state() {  # what the host /dev looks like (compared before and after)
  local p
  for p in /dev/pts /dev/shm /dev/mqueue /dev/hugepages; do mountpoint -q "$p" && echo "mountpoint $p"; done
  awk '$5 ~ "^/dev(/|$)" {print $5, $9}' /proc/self/mountinfo | sort
}
DEV_BEFORE=$(dev_state)

check_host_dev() {
  local ok=1 f
  [[ -c /dev/null ]] || { echo "host /dev/null is not a character device!" >&2; ok=0; }
  echo test >/dev/null || ok=0
  if mountpoint -q /dev/shm; then
    f=$(mktemp -p /dev/shm test-all.XXXXXX) && rm -f "$f" || { echo "host /dev/shm not writable" >&2; ok=0; }
  fi
  if [[ $(dev_state) != "$DEV_BEFORE" ]]; then
    echo "host /dev mounts changed!" >&2
    diff <(echo "$DEV_BEFORE") <(dev_state) >&2
    ok=0
  fi
  ((ok))
}

teardown() {
  local rc=$? r
  trap - EXIT INT TERM
  phase "testbeds down"
  for r in bookworm trixie forky; do
    if ! "${TB[@]}" --release "$r" down; then FAILED+=("down $r"); fi
    "${TB[@]}" --release "$r" status >"$LOGDIR/status-$r.txt" 2>&1
    if [[ $? != 3 ]]; then
      FAILED+=("$r testbed processes left")
      cat "$LOGDIR/status-$r.txt" >&2
    fi
  done
  if check_host_dev; then say "host /dev intact"; else FAILED+=("host /dev check"); fi
  phase ""
  echo
  echo "== test-all: phase times"
  printf '   %s\n' "${TIMES[@]}"
  printf '   %-34s %5ss\n' total $((SECONDS - T0))
  ((${#SUMMARIES[@]})) && printf '== %s\n' "${SUMMARIES[@]}"
  if ((${#FAILED[@]})); then
    echo "== test-all: FAILED: ${FAILED[*]}"
    exit 1
  fi
  ((rc == 0)) || { echo "== test-all: FAILED (exit $rc)"; exit "$rc"; }
  echo "== test-all: OK"
  exit 0
}
trap teardown EXIT
trap 'FAILED+=(interrupted); exit 130' INT TERM

run_pytest() {  # run_pytest LABEL CMD... (output teed to a log; summary line kept)
  local label=$1 rc; shift
  "$@" 2>&1 | tee "$LOGDIR/pytest-$label.log"
  rc=${PIPESTATUS[0]}
  SUMMARIES+=("$label: $(grep -E '^=*.*( passed| failed| error| skipped| no tests ran)' "$LOGDIR/pytest-$label.log" | tail -1 | sed 's/^=* *//; s/ *=*$//') (exit $rc)")
  ((rc == 0)) || FAILED+=("pytest $label")
}

phase "python venv"
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then "$PY" -m venv .venv || exit 1; fi
PIN=(-c constraints.txt)  # the versions last tested; SLURM_FAIR_UNPINNED=1 tests the newest releases
[[ -n ${SLURM_FAIR_UNPINNED:-} ]] && PIN=() && say "unpinned: installing the newest releases"
.venv/bin/pip install -q "${PIN[@]}" -e '.[test]' || { FAILED+=("pip install"); exit 1; }

phase "job_submit.lua (luac5.1 -p, offline Lua tests)"
if ! command -v lua5.1 >/dev/null || ! command -v luac5.1 >/dev/null; then
  { apt-get install -y -q --no-install-recommends lua5.1 >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends lua5.1 >/dev/null; }; } ||
    FAILED+=("apt-get install lua5.1")
fi
if luac5.1 -p etc/job_submit.lua slurm_fair/share/job_submit_site_example.lua; then
  lua5.1 tests/lua/test_job_submit.lua etc/job_submit.lua | tail -1 | tee "$LOGDIR/lua.log" | grep -qx '[0-9]* passed, 0 failed' ||
    FAILED+=("lua tests ($(cat "$LOGDIR/lua.log"))")
  lua5.1 tests/lua/test_partitions.lua etc/job_submit.lua slurm_fair/share/job_submit_site_example.lua | tail -1 |
    tee "$LOGDIR/lua-partitions.log" | grep -qx '[0-9]* passed, 0 failed' ||
    FAILED+=("lua partition/module tests ($(cat "$LOGDIR/lua-partitions.log"))")
  lua5.1 tests/lua/test_fail_open.lua etc/job_submit.lua | tail -1 |
    tee "$LOGDIR/lua-fail-open.log" | grep -qx '[0-9]* passed, 0 failed' ||
    FAILED+=("lua fail-open tests ($(cat "$LOGDIR/lua-fail-open.log"))")
  lua5.1 tests/lua/test_map_index.lua etc/job_submit.lua | tail -1 |
    tee "$LOGDIR/lua-map-index.log" | grep -qx '[0-9]* passed, 0 failed' ||
    FAILED+=("lua indexed map tests ($(cat "$LOGDIR/lua-map-index.log"))")
  lua5.1 tests/lua/test_token_grammar.lua etc/job_submit.lua tests/fixtures/token_grammar.tsv | tail -1 |
    tee "$LOGDIR/lua-grammar.log" | grep -qx '[0-9]* passed, 0 failed' ||
    FAILED+=("lua token grammar tests ($(cat "$LOGDIR/lua-grammar.log"))")
else
  FAILED+=("luac5.1 -p etc/job_submit.lua slurm_fair/share/job_submit_site_example.lua")
fi

phase "bookworm testbed up"
if "${TB[@]}" up; then
  eval "$("${TB[@]}" env)"
  export SLURM_CONF SLURM_FAIR_CONFIG SLURM_FAIR_TESTBED SLURM_FAIR_TESTBED_RELEASE
  phase "pytest tests (Slurm 22.05)"
  run_pytest "bookworm (unit + integration, Slurm 22.05)" .venv/bin/python -m pytest -q tests
else
  FAILED+=("bookworm testbed up")
  phase "pytest tests (no testbed)"
  run_pytest "unit only (no testbed)" .venv/bin/python -m pytest -q -m "not integration" tests
fi

chroot_phase() {  # chroot_phase RELEASE SLURM_SERIES SKIP_VARIABLE
  local rel=$1 series=$2 skip=$3
  if [[ ${!skip:-0} == 1 ]]; then
    say "$skip=1: skipping the Slurm $series run"
    return 0
  fi
  phase "$rel testbed up"
  if "${TB[@]}" --release "$rel" up; then
    phase "pytest integration (Slurm $series)"
    run_pytest "$rel (integration, Slurm $series)" \
      "${TB[@]}" --release "$rel" exec -- python -m pytest -q -p no:cacheprovider tests/integration
    # its daemons stopped now (the teardown checks again): the next release's testbed gets the 2 cores alone
    "${TB[@]}" --release "$rel" down || FAILED+=("down $rel")
  else
    FAILED+=("$rel testbed up")
  fi
}
chroot_phase trixie 24.11 SLURM_FAIR_SKIP_TRIXIE
chroot_phase forky 26.05 SLURM_FAIR_SKIP_FORKY
exit 0
