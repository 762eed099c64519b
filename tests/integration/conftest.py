"""Fixtures for integration tests against the real local Slurm testbed (contrib/testbed/testbed.sh).

* ``testbed`` (session): reuses the testbed named by ``SLURM_FAIR_TESTBED=<state dir>`` (it must be up;
  this is what contrib/test-all.sh and ``testbed.sh exec`` set), or otherwise runs
  ``contrib/testbed/testbed.sh up`` (bookworm, Slurm 22.05) and stops it again at the end of the session
  if it started it (``SLURM_FAIR_TESTBED_KEEP=1`` keeps it).  If no testbed can be started (not root,
  no Debian packages, ...), the tests are skipped with the reason.
* Before the first and after every test that used ``testbed``: all jobs are cancelled, the accounts' GPU limits
  cleared and the published GPU type map removed (untyped jobs pass job_submit.lua unchanged until a test's
  own daemon round publishes one).
* ``testbed.wait_scheduled()``: a test that submits jobs and then runs a round or starts the daemon waits until
  Slurm has scheduled them first (never on the daemon's start-up time).
* Every test under tests/integration is marked ``integration``.

Tests import the project normally; inside a chroot release (``testbed.sh --release trixie|forky exec``)
the venv at ``<state>/venv`` has it installed in editable mode from the same repository path, and
``REPO_ROOT`` is put on ``sys.path`` so ``tests.integration...`` helpers import too.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTBED_SH = REPO_ROOT / "contrib" / "testbed" / "testbed.sh"
if str(REPO_ROOT) not in sys.path:  # make tests.* importable from any cwd (e.g. chroot runs)
    sys.path.insert(0, str(REPO_ROOT))

NODES = ("a100-1", "v100-1", "k80-1", "mixed-1")
GPUS = {"a100-1": {"a100": 4}, "v100-1": {"v100": 4}, "k80-1": {"k80": 4}, "mixed-1": {"v100": 2, "k80": 2}}
ACCOUNTS = {"acct_a": 1, "acct_b": 1, "acct_c": 2}  # account -> fairshare
USER_ACCOUNT = {"alice": "acct_a", "bob": "acct_b", "carol": "acct_c"}
ACCOUNT_USER = {a: u for u, a in USER_ACCOUNT.items()}
GPU_TRES = ("gres/gpu", "gres/gpu:a100", "gres/gpu:v100", "gres/gpu:k80")

T = TypeVar("T")


# testbed.sh's releases and the Slurm series each carries (bookworm on the host, the others in chroots)
RELEASE_SLURM = {"bookworm": "22.05", "trixie": "24.11", "forky": "26.05"}
CHROOT_RELEASES = ("trixie", "forky")


def in_chroot() -> bool:
    """True when running inside a chroot release's testbed (``testbed.sh --release trixie|forky exec``)."""
    return (os.environ.get("SLURM_FAIR_TESTBED_RELEASE") in CHROOT_RELEASES
            and Path("/testbed/testbed.env").exists())


def read_env_file(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            env[key.strip()] = value.strip()
    return env


@dataclass
class Testbed:
    """A running testbed.  ``env`` is a full environment for subprocesses (includes SLURM_CONF)."""

    state_dir: Path
    release: str
    env: dict[str, str]
    jobdir: Path
    started_here: bool = False
    _log: list[str] = field(default_factory=list, repr=False)

    @property
    def slurm_series(self) -> str:
        """The Slurm series the release's testbed carries: '22.05', '24.11' or '26.05'."""
        return RELEASE_SLURM[self.release]

    @property
    def slurm_version(self) -> tuple[int, ...]:
        """Version of the Slurm clients, e.g. (22, 5, 8) or (24, 11, 5)."""
        text = self.run(["sinfo", "--version"]).stdout.split()[-1]
        return tuple(int(x) for x in re.findall(r"\d+", text)[:3])

    # -- plain commands -----------------------------------------------------------------------
    def run(self, argv: Sequence[str], *, timeout: float = 60, check: bool = True,
            env: Mapping[str, str] | None = None, **kw: Any) -> subprocess.CompletedProcess[str]:
        """subprocess.run(argv) with the testbed env, text output captured, a timeout and check."""
        full_env = dict(self.env)
        if env:
            full_env.update(env)
        kw.setdefault("capture_output", True)
        try:
            return subprocess.run(list(argv), env=full_env, timeout=timeout, check=check, text=True, **kw)
        except subprocess.CalledProcessError as e:
            raise AssertionError(
                f"{shlex.join(map(str, argv))} exited {e.returncode}\nstdout: {e.stdout}\nstderr: {e.stderr}"
            ) from None

    # -- jobs ---------------------------------------------------------------------------------
    def sbatch(self, account: str = "acct_a", user: str | None = None, gpus: int = 1,
               gpu_type: str | None = None, name: str = "tb-job", comment: str | None = None,
               wckey: str | None = None, time: str | None = None, extra: Sequence[str] = (),
               command: str = "sleep 600", via: str = "gres") -> int:
        """Submit a batch job and return its id.

        The job runs ``command`` (a shell snippet written by the test, via ``--wrap``) as ``user``
        (default: the account's user, alice for acct_a ...; ``"root"`` submits as root) in the
        testbed's job dir.  GPUs: ``--gres=gpu[:type]:N`` (``via="gres"``) or ``--gpus=[type:]N``
        (``via="gpus"``); ``gpus=0`` requests none.
        """
        user = user or ACCOUNT_USER.get(account, "root")
        argv = ["sbatch", "--parsable", f"--account={account}", f"--job-name={name}",
                f"--chdir={self.jobdir}", f"--output={self.jobdir}/slurm-%j.out"]
        if gpus:
            spec = f"{gpu_type}:{gpus}" if gpu_type else str(gpus)
            if via == "gres":
                argv.append(f"--gres=gpu:{spec}")
            elif via == "gpus":
                argv.append(f"--gpus={spec}")
            else:
                raise ValueError(f"via must be 'gres' or 'gpus', not {via!r}")
        if comment is not None:
            argv.append(f"--comment={comment}")
        if wckey is not None:
            argv.append(f"--wckey={wckey}")
        if time is not None:
            argv.append(f"--time={time}")
        argv += list(extra)
        argv += ["--wrap", command]
        if user != "root":
            argv = ["runuser", "-u", user, "--", *argv]
        out = self.run(argv, cwd=str(self.jobdir), timeout=30).stdout.strip()
        return int(out.split(";")[0])

    def gpu_limits(self, accounts: Sequence[str] = tuple(ACCOUNTS)) -> dict[str, dict[str, int]]:
        """account -> GPU type -> its GrpTRES limit as Slurm has it now (``"*"``: the untyped gres/gpu total)."""
        out = self.run(["sacctmgr", "-n", "-P", "show", "assoc", "format=account,user,grptres"]).stdout
        limits: dict[str, dict[str, int]] = {}
        for line in out.splitlines():
            acct, user, tres = (line.split("|") + ["", ""])[:3]
            if user or acct not in accounts:
                continue
            row = limits.setdefault(acct, {})
            for item in filter(None, tres.split(",")):
                k, _, v = item.partition("=")
                if k == "gres/gpu":
                    row["*"] = int(v)
                elif k.startswith("gres/gpu:"):
                    row[k.split(":", 1)[1]] = int(v)
        return limits

    def job_file(self, src: Path) -> Path:
        """A copy of ``src`` in the job dir, readable by the test users: jobs run as alice, bob or carol, who may
        not reach a checkout under a private folder (CI clones into ``mktemp -d``).

        Written only when it differs, and then atomically (a temporary file renamed over it): a test that submits
        jobs in a loop calls this once per job, and bash reads a running script from its file as it goes —
        rewriting it in place (truncate, write) made a job that was just starting read an empty or half-written
        script and end at once, so "16 flood jobs running" never came (the either-order test's random
        failure)."""
        dst = self.jobdir / src.name
        data = src.read_bytes()
        if dst.exists() and dst.read_bytes() == data and (dst.stat().st_mode & 0o777) == 0o644:
            return dst
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.chmod(0o644)
        os.replace(tmp, dst)
        return dst

    def job(self, job_id: int) -> dict[str, str]:
        """``scontrol show job -o`` as a dict (empty if the job is unknown)."""
        r = self.run(["scontrol", "show", "job", "-o", str(job_id)], check=False)
        if r.returncode != 0:
            return {}
        fields: dict[str, str] = {}
        for tok in shlex.split(r.stdout.strip().splitlines()[0]) if r.stdout.strip() else []:
            if "=" in tok:
                k, v = tok.split("=", 1)
                fields[k] = v
        return fields

    def job_state(self, job_id: int) -> tuple[str, str]:
        """(JobState, Reason) of a job, ("", "") if unknown."""
        j = self.job(job_id)
        return j.get("JobState", ""), j.get("Reason", "")

    def wait_state(self, job_id: int, states: str | Sequence[str], timeout: float = 60) -> dict[str, str]:
        wanted = {states} if isinstance(states, str) else set(states)
        return self.wait_for(lambda: (j := self.job(job_id)).get("JobState") in wanted and j, timeout,
                             what=f"job {job_id} in {sorted(wanted)}")

    def job_ids(self) -> list[int]:
        out = self.run(["squeue", "-h", "-o", "%i"]).stdout
        return [int(x) for x in out.split() if x.isdigit()]

    def cancel_all(self, timeout: float = 60) -> None:
        """Cancel every job and wait until squeue shows none (completing ones included)."""
        ids = self.job_ids()
        if ids:
            self.run(["scancel", *map(str, ids)], check=False)
            self.wait_for(lambda: not self.job_ids(), timeout, what="all jobs gone")

    def wait_scheduled(self, jobs: Iterable[int] | None = None, timeout: float = 60,
                       quiet: float = 3.0) -> dict[str, tuple[str, str]]:
        """Wait until Slurm has scheduled what it will schedule of ``jobs`` (default: every job squeue shows), and
        return job id -> (state, reason) as squeue then shows them.

        Scheduled: every job RUNNING with its start done (not CONFIGURING: PrologSlurmctld still running),
        PENDING with a reason Slurm's scheduler gave it (not ``None``, which a job has until the scheduler looked
        at it), SUSPENDED, or gone (a COMPLETING job is waited for too), and squeue's picture (state, reason,
        nodes) unchanged for ``quiet`` seconds. A reason alone is not enough: sbatch's own check at submission
        already gives the jobs behind others ``Priority``, and in one partition it is the backfill scheduler that
        starts them, a second later (24.11: 20 of 21 jobs pending on ``Priority`` 0.3 s after the submissions, 16
        of them running 1.2 s after). The testbed's slurm.conf runs both schedulers every second (sched_interval=1,
        bf_interval=1) and a submission, release or end is a change the backfill scheduler runs for: a queue
        that stays as it is for 3 s is one both have passed over.

        A test that submits jobs and then runs a round, starts the daemon or takes a snapshot calls this first, so
        that what the round observes does not depend on how fast the daemon starts (with the CLI starting at once
        the first round of test_metrics_live and test_daemon[themis] saw jobs about to start as pending)."""
        wanted = None if jobs is None else {str(j) for j in jobs}
        seen: dict[str, tuple[str, str, str]] = {}
        since = time.monotonic()

        def mine(job_id: str) -> bool:
            return wanted is None or job_id in wanted or job_id.split("_", 1)[0] in wanted  # array tasks: 12_3

        def scheduled() -> tuple[dict[str, tuple[str, str]]] | None:
            nonlocal seen, since
            out = self.run(["squeue", "-h", "-o", "%i|%T|%r|%N"]).stdout
            now: dict[str, tuple[str, str, str]] = {}
            for line in out.splitlines():
                job_id, state, reason, nodes = (line.strip().split("|") + ["", "", ""])[:4]
                if job_id and mine(job_id):
                    now[job_id] = (state, reason, nodes)
            if now != seen:
                seen, since = now, time.monotonic()
            waiting = [j for j, (state, reason, _n) in now.items()
                       if not (state in ("RUNNING", "SUSPENDED") or (state == "PENDING" and reason != "None"))]
            if waiting or time.monotonic() - since < quiet:
                return None
            return ({j: (state, reason) for j, (state, reason, _n) in now.items()},)

        try:
            return self.wait_for(scheduled, timeout, what="Slurm to schedule the jobs")[0]
        except AssertionError as e:
            raise AssertionError(f"{e}; squeue: {seen}") from None

    def wait_for(self, pred: Callable[[], T], timeout: float = 60, interval: float = 0.5,
                 what: str = "condition") -> T:
        """Poll ``pred`` until it returns something truthy; return it, or fail after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            value = pred()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(interval)

    # -- accounting ---------------------------------------------------------------------------
    def sacctmgr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(["sacctmgr", "-i", *args], check=check)

    def reset_type_map(self) -> None:
        """Remove the GPU type map a daemon round published (job_submit.lua then lets untyped requests through
        unchanged): tests that submit untyped jobs must not depend on what an earlier test's round planned."""
        import tomllib

        cfg = tomllib.loads(Path(self.env["SLURM_FAIR_CONFIG"]).read_text())
        path = cfg.get("submit", {}).get("type_map")
        if path:
            Path(path).unlink(missing_ok=True)

    def reset_limits(self) -> None:
        """Clear GPU GrpTRES limits and restore the fairshares on acct_a/b/c (only where changed)."""
        out = self.run(["sacctmgr", "-n", "-P", "show", "assoc", "where", "account=" + ",".join(ACCOUNTS),
                        "format=account,user,fairshare,grptres"]).stdout
        clear = ",".join(f"{t}=-1" for t in GPU_TRES)
        for line in out.splitlines():
            acct, user, share, grptres = (line.split("|") + ["", "", "", ""])[:4]
            if user or acct not in ACCOUNTS:
                continue
            if any(t.split("=")[0] in GPU_TRES for t in grptres.split(",") if t):
                self.sacctmgr("modify", "account", "where", f"name={acct}", "set", f"GrpTRES={clear}")
            if share != str(ACCOUNTS[acct]):
                self.sacctmgr("modify", "account", "where", f"name={acct}", "set", f"fairshare={ACCOUNTS[acct]}")
        # the lab config's record of what slurm-fair wrote (limits.ownership_file) goes with the limits
        (self.state_dir / "ownership" / "limits.json").unlink(missing_ok=True)


def _start_testbed() -> Testbed:
    explicit = os.environ.get("SLURM_FAIR_TESTBED")
    if explicit:
        state = Path(explicit)
        env_file = state / "testbed.env"
        if not env_file.exists():
            if (state / "rootfs" / "testbed" / "testbed.env").exists():
                pytest.fail(f"SLURM_FAIR_TESTBED={explicit} is a chroot (trixie or forky) testbed: run the tests "
                            "inside its chroot: contrib/testbed/testbed.sh --release RELEASE exec -- python -m pytest ...")
            pytest.fail(f"SLURM_FAIR_TESTBED={explicit}: no testbed.env there; run contrib/testbed/testbed.sh up")
        started = False
    else:
        if os.geteuid() != 0:
            pytest.skip("Slurm testbed: needs root to start (or set SLURM_FAIR_TESTBED to a running one)")
        if not TESTBED_SH.exists():
            pytest.skip(f"Slurm testbed: {TESTBED_SH} missing")
        status = subprocess.run(["bash", str(TESTBED_SH), "status"], capture_output=True, text=True, timeout=60)
        try:
            r = subprocess.run(["bash", str(TESTBED_SH), "up"], capture_output=True, text=True, timeout=900,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pytest.skip("Slurm testbed: 'testbed.sh up' timed out")
        if r.returncode != 0:
            tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-5:])
            pytest.skip(f"Slurm testbed could not be started:\n{tail}")
        env_out = subprocess.run(["bash", str(TESTBED_SH), "env"], capture_output=True, text=True, timeout=60,
                                 check=True).stdout
        values = dict(line.removeprefix("export ").split("=", 1) for line in env_out.splitlines()
                      if line.startswith("export "))
        state = Path(values["SLURM_FAIR_TESTBED"])
        env_file = state / "testbed.env"
        started = status.returncode != 0  # it was not (fully) running before
    values = read_env_file(env_file)
    env = dict(os.environ)
    env.update(values)
    tb = Testbed(state_dir=state, release=values.get("SLURM_FAIR_TESTBED_RELEASE", "bookworm"), env=env,
                 jobdir=Path(values.get("TESTBED_JOBDIR", str(state / "jobs"))), started_here=started)
    try:
        r = tb.run(["sinfo", "-h", "-o", "%D"], check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.fail(f"testbed at {state} does not answer: {e}")
    if r.returncode != 0:
        pytest.fail(f"testbed at {state} does not answer: sinfo: {r.stderr.strip()}")
    return tb


_session_testbed: Testbed | None = None
_session_skip: str | None = None


@pytest.fixture(scope="session")
def testbed() -> Any:
    """The running Slurm testbed (see the module docstring)."""
    global _session_testbed, _session_skip
    if _session_skip:
        pytest.skip(_session_skip)
    try:
        tb = _start_testbed()
    except pytest.skip.Exception as e:
        _session_skip = str(e)
        raise
    _session_testbed = tb
    # a test owns its state: never trust a pristine cluster (a demo or an aborted run may have left jobs/limits)
    tb.cancel_all()
    tb.reset_limits()
    tb.reset_type_map()
    yield tb
    if tb.started_here and not os.environ.get("SLURM_FAIR_TESTBED_KEEP"):
        subprocess.run(["bash", str(TESTBED_SH), "down"], capture_output=True, text=True, timeout=300)


@pytest.fixture(autouse=True)
def _testbed_cleanup(request: pytest.FixtureRequest) -> Any:
    """After each test that used the testbed: cancel its jobs and clear the account limits."""
    yield
    if "testbed" in request.fixturenames and _session_testbed is not None:
        _session_testbed.cancel_all()
        _session_testbed.reset_limits()
        _session_testbed.reset_type_map()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)

