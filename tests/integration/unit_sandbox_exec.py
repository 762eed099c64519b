"""Run a command under the system-call filter the systemd unit sets (tests/integration/test_unit_sandbox.py):
``python3 unit_sandbox_exec.py ALLOWED_SYSCALLS_FILE -- CMD ARGS...``. Needs libseccomp's Python module
(Debian: python3-seccomp), so it runs under the system's python3, then execs CMD.

Mirrors, in libseccomp terms, what systemd loads for these unit lines (systemd.exec(5)):
* SystemCallFilter=@system-service + ~@privileged @resources, SystemCallErrorNumber=EPERM: the syscalls named in
  the file (expanded by ``systemd-analyze syscall-filter``) are allowed, every other one fails with EPERM;
* SystemCallArchitectures=native: libseccomp's filter covers the native ABI only (another ABI is killed);
* RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6: socket() of another family fails (EPERM here, systemd says
  EAFNOSUPPORT);
* MemoryDenyWriteExecute=yes: mmap() writable and executable at once, mprotect()/pkey_mprotect() adding
  PROT_EXEC, and shmat() with SHM_EXEC fail.
NoNewPrivileges (a filter needs it) is set by setpriv before this runs, and so is the empty capability set."""

import os
import socket
import sys

import seccomp

PROT_WRITE, PROT_EXEC, SHM_EXEC = 0x2, 0x4, 0o100000
ARGS = {"mmap", "mprotect", "pkey_mprotect", "shmat", "socket"}


def main() -> None:
    names_file, sep, *cmd = sys.argv[1:]
    assert sep == "--" and cmd, __doc__
    f = seccomp.SyscallFilter(defaction=seccomp.ERRNO(1))  # EPERM
    for name in open(names_file).read().split():
        if name in ARGS:
            continue
        try:
            f.add_rule(seccomp.ALLOW, name)
        except (RuntimeError, ValueError, OSError):
            pass  # a name that is not a syscall of this ABI (chown32 on x86_64)
    allowed = set(open(names_file).read().split())
    if "socket" in allowed:
        for fam in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6):
            f.add_rule(seccomp.ALLOW, "socket", seccomp.Arg(0, seccomp.EQ, fam))
    wx = PROT_WRITE | PROT_EXEC
    if "mmap" in allowed:
        for ok in (0, PROT_WRITE, PROT_EXEC):  # not both
            f.add_rule(seccomp.ALLOW, "mmap", seccomp.Arg(2, seccomp.MASKED_EQ, wx, ok))
    for name in ("mprotect", "pkey_mprotect"):
        if name in allowed:
            f.add_rule(seccomp.ALLOW, name, seccomp.Arg(2, seccomp.MASKED_EQ, PROT_EXEC, 0))
    if "shmat" in allowed:
        f.add_rule(seccomp.ALLOW, "shmat", seccomp.Arg(2, seccomp.MASKED_EQ, SHM_EXEC, 0))
    f.load()
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
