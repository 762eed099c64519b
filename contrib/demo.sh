#!/usr/bin/env bash
# slurm-fair demo on the local Slurm testbed (root; Debian 12 host, Slurm 22.05).
#
#   contrib/demo.sh            # testbed up, profiles, a mixed workload, daemon rounds with preemption, status
#
# Three accounts share 4 A100 + 6 V100 + 6 K80 GPUs with the cooperative OEF policy:
#   acct_a (alice, class "cnn"): big V100 speedup (10x a K80)
#   acct_b (bob,   class "rl") : almost none (1.1x)
#   acct_c (carol, class "lm") : in between (3x), fair-share weight 2
# bob comes first with long untyped jobs into the idle cluster: job_submit.lua spreads them over the types the
# map lends (they checkpoint on USR1) and they start at once. Then every account submits typed 1-GPU jobs on all
# three GPU types. slurm-fair turns the profiles into per-account per-type guarantees (acct_a is guaranteed the
# V100s), lends every GPU no waiting guarantee claims, and reclaims the GPUs bob borrowed: checkpoint signal,
# 5 s grace, requeue. The testbed's hooks record every job start and end.
# Environment: TESTBED_NAME (default demo) / TESTBED_DIR / TESTBED_PORT_BASE (15817) / TESTBED_MYSQL_PORT (22306)
# as for testbed.sh; SLURM_FAIR
# (default: `slurm-fair` on PATH, else .venv/bin/slurm-fair, installed there if missing); DEMO_ROUNDS (default 3); DEMO_PERIOD (5 s).
set -euo pipefail
# The demo runs on a testbed of its own (state .testbed/demo, ports 15817.../22306), so it never disturbs the
# test suite's testbed and the tests never see its jobs or limits: both README commands work in either order.
export TESTBED_NAME=${TESTBED_NAME:-demo} TESTBED_PORT_BASE=${TESTBED_PORT_BASE:-15817} \
  TESTBED_MYSQL_PORT=${TESTBED_MYSQL_PORT:-22306}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
TB="$REPO/contrib/testbed/testbed.sh"
ROUNDS=${DEMO_ROUNDS:-3}
PERIOD=${DEMO_PERIOD:-5}
if [[ -n ${SLURM_FAIR:-} ]]; then SF=("$SLURM_FAIR")
elif command -v slurm-fair >/dev/null; then SF=(slurm-fair)
else
  # a fresh clone: install the project into .venv (as contrib/test-all.sh does)
  if [[ ! -x $REPO/.venv/bin/slurm-fair ]]; then
    echo "demo: installing slurm-fair into $REPO/.venv"
    [[ -x $REPO/.venv/bin/python ]] || python3 -m venv "$REPO/.venv"
    PIN=(-c "$REPO/constraints.txt"); [[ -n ${SLURM_FAIR_UNPINNED:-} ]] && PIN=()
    "$REPO/.venv/bin/pip" install -q "${PIN[@]}" -e "$REPO"
  fi
  SF=("$REPO/.venv/bin/slurm-fair")
fi
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "testbed up"
bash "$TB" up
eval "$(bash "$TB" env)"
DEMO="$SLURM_FAIR_TESTBED/demo"
rm -rf "$DEMO"; mkdir -p "$DEMO/out"; chmod 755 "$DEMO"; chmod 1777 "$DEMO/out"  # out/: the users' job files
CFG="$DEMO/slurm-fair.toml"
cat >"$CFG" <<EOF
[daemon]
period = $PERIOD
early_round_after = 2
database = "demo.sqlite"
dry_run = false  # the demo acts; a site's fresh config starts in shadow mode (dry_run = true)

[policy]
name = "oef-coop"

[cluster]
backend = "cli"

[hooks]
spool = "$SLURM_FAIR_TESTBED/hooks-spool"

[submit]
type_map = "$SLURM_FAIR_TESTBED/etc/gpu_type_map.txt"

[preemption]
enabled = true
grace = 5
min_runtime = 0
EOF
export SLURM_FAIR_CONFIG=$CFG
# start from a clean cluster: no jobs of the demo users, and no GPU limit of an earlier demo (its database was
# just deleted: `limits clear` is how an admin says such limits were an earlier install's, issue 29)
for u in alice bob carol; do scancel -u "$u" 2>/dev/null || true; done
"${SF[@]}" limits clear acct_a acct_b acct_c >/dev/null

say "profiles (steps/s per GPU type)"
# Illustrative demo numbers, not measurements: a class with a large V100 speedup (cnn, 10x a K80), one with
# almost none (rl, 1.1x) and one in between (lm, 3x). Real sites import measured profiles (profiles import).
for spec in cnn:a100:12 cnn:v100:10 cnn:k80:1  rl:a100:1.2 rl:v100:1.1 rl:k80:1  lm:a100:4 lm:v100:3 lm:k80:1; do
  IFS=: read -r cls gpu thr <<<"$spec"
  "${SF[@]}" profiles set "$cls" "$gpu" "$thr" >/dev/null
done
"${SF[@]}" profiles list

say "round 0: no jobs yet: nobody waits, so no limit binds anyone; the type map lends every GPU"
"${SF[@]}" daemon --once
cat "$SLURM_FAIR_TESTBED/etc/gpu_type_map.txt"

say "bob (acct_b) comes first: 6 long untyped jobs that checkpoint on USR1 (contrib/checkpoint/train.sh)"
echo "  job_submit.lua spreads them over the types the map lends, fastest first; all start at once"
install -m 644 "$REPO/contrib/checkpoint/train.sh" "$DEMO/out/train.sh"  # bob may not reach a private checkout
for ((i = 0; i < 6; i++)); do
  # job_submit.lua gives each untyped request the map's type and says so on stderr (shown once)
  runuser -u bob -- sbatch --parsable -A acct_b -J rl --gres=gpu:1 --requeue --open-mode=append \
    --chdir="$SLURM_FAIR_TESTBED/jobs" --output="$DEMO/out/rl-%j.out" \
    --wrap "export CKPT=$DEMO/out/ckpt-\$SLURM_JOB_ID STEPS=100000 STEP_SECONDS=1; exec bash $DEMO/out/train.sh" \
    2>"$DEMO/sbatch.err" >/dev/null
  ((i == 0)) && sed 's/^/  /' "$DEMO/sbatch.err"
done
sleep 2
"${SF[@]}" daemon --once  # acct_b alone: it is guaranteed what its jobs ask for
squeue -h -o "  %i %a %T %b %k"

say "then alice and carol (and more from bob): per account 2 x a100, 4 x v100, 4 x k80 jobs (1 GPU each)"
submit() {  # user account class type count
  local i
  for ((i = 0; i < $5; i++)); do
    runuser -u "$1" -- sbatch -Q --parsable -A "$2" -J "$3" --gres="gpu:$4:1" --chdir="$SLURM_FAIR_TESTBED/jobs" \
      --output=/dev/null --wrap "sleep 300" >/dev/null
  done
}
for t in a100:2 v100:4 k80:4; do
  submit alice acct_a cnn "${t%%:*}" "${t##*:}"
  submit bob acct_b rl "${t%%:*}" "${t##*:}"
  submit carol acct_c lm "${t%%:*}" "${t##*:}"
done
squeue -h -t PD -o "%a" | sort | uniq -c | sed 's/^/  pending: /'

say "slurm-fair daemon: $ROUNDS rounds, period $PERIOD s"
"${SF[@]}" daemon &
DPID=$!
sleep $((ROUNDS * PERIOD - PERIOD / 2))
kill -TERM "$DPID"
wait "$DPID"
sleep 3  # one scheduling pass

say "slurm-fair status"
"${SF[@]}" status
say "slurm-fair explain acct_b (the GPUs it borrowed beyond its guarantee were reclaimed: checkpointed, requeued)"
"${SF[@]}" explain acct_b
say "a preempted job's output"
f=$(grep -l "got USR1" "$DEMO"/out/rl-*.out 2>/dev/null | head -1) && sed 's/^/  /' "$f" | head -8 || echo "  (no job was preempted)"
say "sacctmgr show assoc (GPU limits)"
sacctmgr show assoc where account=acct_a,acct_b,acct_c user= format=account,fairshare,grptres%70
say "running jobs per account and GPU type"
squeue -h -t R -o "%a %b" | sort | uniq -c
echo
echo "The demo's testbed keeps running (its jobs too) so you can look around:"
echo "  eval \"\$(TESTBED_NAME=$TESTBED_NAME bash $TB env)\"; export SLURM_FAIR_CONFIG=$CFG"
echo "  ${SF[*]} status; ${SF[*]} history; squeue"
echo "Stop it: TESTBED_NAME=$TESTBED_NAME bash $TB down   (add --purge to delete its state)"
