"""The systemd unit's sandbox with a real round (issue 40 item 5). No systemd runs here, so the unit's
restrictions are applied by hand, each the way systemd applies it: bubblewrap for the file system (everything
read-only; writable only the unit's ReadWritePaths and StateDirectory, bound at their own paths; empty private
/tmp, /var/tmp, /home, /root; a minimal /dev; its own /proc, PID, IPC and UTS namespaces), setpriv for the user,
NoNewPrivileges and the empty capability set, and libseccomp (unit_sandbox_exec.py) for SystemCallFilter,
SystemCallArchitectures, RestrictAddressFamilies and MemoryDenyWriteExecute, with the system-call sets expanded by
``systemd-analyze syscall-filter`` from the unit's own lines. In it the daemon, as the non-root Operator
``slurm-fair``, runs a round on the testbed (the Slurm clients, munge's socket, slurm.conf), writes its database,
ownership file, type map and status file, reads the hooks' spool, serves /metrics, and stops on SIGTERM; a probe in
the same sandbox finds what the unit forbids forbidden. Skipped without bwrap, setpriv, systemd-analyze or
python3-seccomp. Not covered: ProtectKernel*/ProtectClock/ProtectControlGroups/RestrictNamespaces/RestrictRealtime
beyond what the read-only root and the filter already refuse, MemoryMax/CPUQuota (cgroups), and systemd itself
(ExecStopPost, restart jobs: tests/test_systemd_unit.py runs ExecStopPost with a stub systemctl)."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from slurm_fair import config as config_mod

from .test_operator import OPERATOR, _grant_traversal

HERE = Path(__file__).resolve()
UNIT = HERE.parents[2] / "slurm_fair" / "share" / "slurm-fair.service"
SYSTEM_PYTHON = "/usr/bin/python3"


def _service() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    section = None
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            k, v = line.split("=", 1)
            out.setdefault(k, []).append(v)
    return out


def _expand(group: str) -> set[str]:
    out = subprocess.run(["systemd-analyze", "syscall-filter", group], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    names: set[str] = set()
    for line in out.splitlines()[1:]:
        line = line.strip()
        if line and not line.startswith("#"):
            names |= _expand(line) if line.startswith("@") else {line}
    return names


def _allowed(svc: dict[str, list[str]]) -> set[str]:
    """The unit's SystemCallFilter lines as systemd combines them: the first an allow list, ~ lines remove."""
    allowed: set[str] = set()
    for i, line in enumerate(svc["SystemCallFilter"]):
        deny = line.startswith("~")
        names = set().union(*(_expand(w) if w.startswith("@") else {w} for w in line.lstrip("~").split()))
        assert i > 0 or not deny, "the unit's filter starts with an allow list"
        allowed = allowed - names if deny else allowed | names
    return allowed


def _needs() -> None:
    for tool in ("bwrap", "setpriv", "systemd-analyze"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (Debian: bubblewrap, util-linux, systemd)")
    if subprocess.run([SYSTEM_PYTHON, "-c", "import seccomp"], capture_output=True).returncode != 0:
        pytest.skip(f"{SYSTEM_PYTHON} has no seccomp module (Debian: python3-seccomp)")


def _sandbox(svc: dict[str, list[str]], binds: dict[str, Path], filter_file: Path, argv: list[str],
             shown: Path | None = None) -> list[str]:
    """bwrap + setpriv + the seccomp filter, as the unit's lines say (asserted here, so a change to the unit that
    this emulation does not follow fails instead of passing untested). ``shown``: a folder under /tmp or /var/tmp
    bound back read-only at its own path, as a drop-in's ``BindReadOnlyPaths=`` would (the testbed's state,
    which testbed.sh keeps in /var/tmp when the checkout is private: its slurm.conf, munge's socket)."""
    assert svc["ProtectSystem"] == ["strict"] and svc["ProtectHome"] == ["yes"] and svc["PrivateTmp"] == ["yes"]
    assert svc["PrivateDevices"] == ["yes"] and svc["ProtectProc"] == ["invisible"]
    assert svc["NoNewPrivileges"] == ["yes"] and svc["CapabilityBoundingSet"] == [""]
    assert svc["ProtectHostname"] == ["yes"] and svc["SystemCallArchitectures"] == ["native"]
    assert svc["MemoryDenyWriteExecute"] == ["yes"] and svc["SystemCallErrorNumber"] == ["EPERM"]
    assert svc["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"]
    writable = {p.lstrip("-") for v in svc["ReadWritePaths"] for p in v.split()}
    writable |= {"/var/lib/" + d for d in svc["StateDirectory"][0].split()}
    assert writable == set(binds), (writable, binds)
    cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
           "--proc", "/proc", "--die-with-parent"]
    cmd += ["--perms", "1777", "--tmpfs", "/tmp", "--perms", "1777", "--tmpfs", "/var/tmp"]  # PrivateTmp
    for hidden in ("/home", "/root", "/run/user"):  # ProtectHome=yes
        if os.path.isdir(hidden):
            cmd += ["--tmpfs", hidden]
    if shown is not None:
        for d in reversed(shown.parents):
            if d.parent != d and str(d) not in ("/tmp", "/var", "/var/tmp"):
                cmd += ["--perms", "0755", "--dir", str(d)]  # the private /tmp's folders above it, traversable
        cmd += ["--ro-bind", str(shown), str(shown)]
    for inside, outside in binds.items():
        cmd += ["--bind", str(outside), inside]
    # this checkout's Python may live under /root (pyenv): shown read-only, as a drop-in's
    # BindReadOnlyPaths= would; the README's install uses the system's python3 (/usr/bin), which needs nothing
    prefix = os.path.realpath(sys.base_prefix)
    if any(prefix == h or prefix.startswith(h + "/") for h in ("/root", "/home")):
        top = Path("/" + prefix.split("/")[1])
        for d in reversed(Path(prefix).parents):
            if d != top and top in d.parents:
                cmd += ["--perms", "0755", "--dir", str(d)]  # bwrap would make them 0700
        cmd += ["--ro-bind", prefix, prefix]
    cmd += ["--", "setpriv", f"--reuid={OPERATOR}", f"--regid={OPERATOR}", "--init-groups",
            "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs",
            SYSTEM_PYTHON, str(HERE.parent / "unit_sandbox_exec.py"), str(filter_file), "--", *argv]
    return cmd


def _shown(top: str) -> list[str]:
    """What of ``top`` (/root, /home) the sandbox shows: nothing, or the folder holding this checkout's Python."""
    prefix = os.path.realpath(sys.base_prefix)
    return [prefix.split("/")[2]] if prefix.startswith(top + "/") else []


PROBE = r"""
import ctypes, errno, json, mmap, os, socket
out = {}
def attempt(name, f):
    try:
        f(); out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
attempt("write /etc", lambda: open("/etc/slurm-fair-probe", "w"))
attempt("write /usr", lambda: open("/usr/slurm-fair-probe", "w"))
attempt("write state", lambda: open("/var/lib/slurm-fair/probe", "w").close())
attempt("write spool", lambda: open("/var/spool/slurm-fair/probe", "w").close())
attempt("write /tmp", lambda: open("/tmp/probe", "w").close())
out["/root"] = sorted(os.listdir("/root"))
out["/home"] = sorted(os.listdir("/home"))
attempt("AF_UNIX", lambda: socket.socket(socket.AF_UNIX).close())
attempt("AF_INET", lambda: socket.socket(socket.AF_INET).close())
attempt("AF_INET6", lambda: socket.socket(socket.AF_INET6).close())
attempt("AF_NETLINK", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close())
attempt("AF_PACKET", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close())
attempt("setuid 0", lambda: os.setuid(0))
attempt("sethostname", lambda: socket.sethostname("x"))
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
p = libc.mmap(None, 4096, 0x1 | 0x2 | 0x4, 0x02 | 0x20, -1, 0)
out["mmap W+X"] = "ok" if p not in (None, ctypes.c_void_p(-1).value) else errno.errorcode[ctypes.get_errno()]
out["uid"] = os.getuid()
print(json.dumps(out))
"""


def _descendants(pid: int) -> list[int]:
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                kids += [int(d.name), *_descendants(int(d.name))]
    return kids


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_round_in_the_units_sandbox(testbed):
    _needs()
    try:
        pw = pwd.getpwnam(OPERATOR)
    except KeyError:
        pytest.skip(f"no Unix user {OPERATOR} (a testbed started by an older testbed.sh: down, then up)")
    svc = _service()
    restore = _grant_traversal([sys.executable, HERE])
    # the config and the filter's list where the sandbox sees them (not in /tmp or /var/tmp: its own are empty)
    outside = Path(tempfile.mkdtemp(prefix="sf-unit-", dir=testbed.state_dir))
    state = Path(os.path.realpath(testbed.state_dir))
    # a private checkout's testbed lives in /var/tmp (testbed.sh), which PrivateTmp hides: shown back read-only
    shown = state if any(state.is_relative_to(t) for t in ("/tmp", "/var/tmp")) else None
    binds = {"/var/lib/slurm-fair": outside / "state", "/var/lib/slurm-fair-ownership": outside / "ownership",
             "/var/spool/slurm-fair": outside / "spool"}
    made = [Path(p) for p in binds if not os.path.exists(p)]  # bwrap binds onto existing folders
    proc = None
    try:
        for p in made:
            p.mkdir(parents=True)
        os.chmod(outside, 0o755)
        filter_file = outside / "syscalls"
        filter_file.write_text("\n".join(sorted(_allowed(svc))))
        for p in binds.values():
            p.mkdir()
            os.chown(p, pw.pw_uid, pw.pw_gid)
        (outside / "spool" / "records").mkdir()
        os.chown(outside / "spool" / "records", pw.pw_uid, pw.pw_gid)
        port = _free_port()
        base = tomllib.loads(Path(testbed.env["SLURM_FAIR_CONFIG"]).read_text())
        base["daemon"] = {"dry_run": False, "period": 600}  # the database where the unit has it (the default)
        base["limits"] = {"lend": False, "accounts": ["acct_a", "acct_b"]}  # ownership_file "auto": beside it
        base["hooks"] = {"spool": "/var/spool/slurm-fair/records"}
        base["submit"] = {"type_map": "/var/lib/slurm-fair/gpu_type_map.txt"}
        base["preemption"] = {"enabled": False}
        base["metrics"] = {"listen": f"127.0.0.1:{port}"}
        cfg = outside / "slurm-fair.toml"
        cfg.write_text(config_mod.render(config_mod.from_dict(base).as_dict()))
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
               "SLURM_CONF": testbed.env["SLURM_CONF"], "HOME": "/var/lib/slurm-fair"}

        # what the unit forbids is forbidden, what it allows is allowed
        r = subprocess.run(_sandbox(svc, binds, filter_file, [sys.executable, "-c", PROBE], shown), env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        probe = json.loads(r.stdout)
        assert probe == {
            "write /etc": "EROFS", "write /usr": "EROFS", "write state": "ok", "write spool": "ok",
            "write /tmp": "ok", "/root": _shown("/root"), "/home": _shown("/home"),
            "AF_UNIX": "ok", "AF_INET": "ok", "AF_INET6": "ok",
            "AF_NETLINK": "EPERM", "AF_PACKET": "EPERM", "setuid 0": "EPERM", "sethostname": "EPERM",
            "mmap W+X": "EPERM", "uid": pw.pw_uid}, probe

        testbed.sacctmgr("add", "user", OPERATOR, "account=acct_a", "adminlevel=Operator")
        testbed.reset_limits()
        jobs = [testbed.sbatch(a, gpus=1, gpu_type="v100", name="unit") for a in ("acct_a", "acct_b")
                for _ in range(6)]
        testbed.wait_scheduled(jobs)
        log = outside / "daemon.log"
        argv = [sys.executable, "-c", "from slurm_fair.cli import main; main()", "daemon", "--config", str(cfg)]
        with open(log, "w") as out:
            proc = subprocess.Popen(_sandbox(svc, binds, filter_file, argv, shown), env=env, stdout=out,
                                    stderr=subprocess.STDOUT, cwd="/")
        status = outside / "state" / "status.json"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not re.search(r"round \d+: status=", log.read_text()):
            assert proc.poll() is None, log.read_text()
            time.sleep(0.5)
        text = log.read_text()
        assert re.search(r"round \d+: status=ok ", text), text
        limits = testbed.gpu_limits(("acct_a", "acct_b"))
        assert limits["acct_a"].get("v100", 0) > 0 and limits["acct_b"].get("v100", 0) > 0, (limits, text)
        assert (outside / "state" / "slurm-fair.sqlite").stat().st_uid == pw.pw_uid
        assert (outside / "state" / "gpu_type_map.txt").stat().st_uid == pw.pw_uid
        assert (outside / "ownership" / "limits.json").exists(), text
        assert status.exists(), text
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
            body = resp.read().decode()
        assert resp.status == 200 and "slurm_fair_" in body, body[:500]

        daemon = [p for p in _descendants(proc.pid)
                  if b"daemon" in Path(f"/proc/{p}/cmdline").read_bytes() and
                  Path(f"/proc/{p}/comm").read_text().startswith("python")]
        assert daemon, _descendants(proc.pid)
        os.kill(daemon[-1], signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log.read_text()
        text = log.read_text()
        assert "lease given up" in text
        assert not re.search(r"Traceback|Operation not permitted|Permission denied|Read-only file system", text), text
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        testbed.cancel_all()
        testbed.sacctmgr("delete", "user", OPERATOR, check=False)
        testbed.reset_limits()
        shutil.rmtree(outside, ignore_errors=True)
        for p in made:
            p.rmdir()
        for d, mode in reversed(restore):
            os.chmod(d, mode)
