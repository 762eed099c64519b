"""``scontrol ping`` parsed: which slurmctld serves (daemon.only_on_primary)."""

from __future__ import annotations

import os

import pytest

from slurm_fair.cluster import ping as P
from slurm_fair.cluster.errors import CommandFailed, ParseError

# captured: `scontrol ping` on the project's testbeds (one SlurmctldHost, "vm"), 2026-11-28
CAPTURED_2205 = "Slurmctld(primary) at vm is UP\n"  # Debian 12, slurm-wlm 22.05.8
CAPTURED_2411 = "Slurmctld(primary) at vm is UP\n"  # Debian 13 chroot, slurm-wlm 24.11.5
# written from scontrol.c (22.05 _ping_slurmctld, 24.11 _print_ping: the same format): one backup is "backup",
# more are "backup1", "backup2"...; run as root with one DOWN, a banner follows
PRIMARY_DOWN_AS_ROOT = """Slurmctld(primary) at ctl1 is DOWN
Slurmctld(backup) at ctl2 is UP
*****************************************
** RESTORE SLURMCTLD DAEMON TO SERVICE **
*****************************************
"""
TWO_BACKUPS = """Slurmctld(primary) at ctl1 is DOWN
Slurmctld(backup1) at ctl2 is DOWN
Slurmctld(backup2) at ctl3 is UP
"""
BOTH_UP = "Slurmctld(primary) at ctl1 is UP\nSlurmctld(backup) at ctl2 is UP\n"
ALL_DOWN = "Slurmctld(primary) at ctl1 is DOWN\nSlurmctld(backup) at ctl2 is DOWN\n"


@pytest.mark.parametrize("text", [CAPTURED_2205, CAPTURED_2411])
def test_captured_outputs_parse(text):
    assert P.parse_ping(text) == (P.Controller("primary", "vm", True),)
    assert P.standby_reason(P.parse_ping(text), "vm") is None


def test_primary_down_backup_serves_and_the_banner_is_skipped():
    c = P.parse_ping(PRIMARY_DOWN_AS_ROOT)
    assert c == (P.Controller("primary", "ctl1", False), P.Controller("backup", "ctl2", True))
    assert P.serving(c) == c[1]
    assert P.standby_reason(c, "ctl2") is None
    assert P.standby_reason(c, "ctl1") == ("slurmctld backup at ctl2 serves the cluster; this host (ctl1) is "
                                           "slurmctld primary, DOWN")


def test_numbered_backups():
    c = P.parse_ping(TWO_BACKUPS)
    assert [x.role for x in c] == ["primary", "backup1", "backup2"]
    assert P.serving(c).host == "ctl3"
    assert P.standby_reason(c, "ctl3") is None
    assert "backup1, DOWN" in P.standby_reason(c, "ctl2")


def test_both_up_the_primary_serves():
    c = P.parse_ping(BOTH_UP)
    assert P.standby_reason(c, "ctl1") is None
    assert P.standby_reason(c, "ctl2") == ("slurmctld primary at ctl1 serves the cluster; this host (ctl2) is "
                                           "slurmctld backup, UP")


def test_host_names_compare_short_and_case_blind():
    c = P.parse_ping(BOTH_UP)
    assert P.standby_reason(c, "CTL1.cluster.example.org") is None
    assert P.standby_reason(c, "login1") == ("slurmctld primary at ctl1 serves the cluster; this host (login1) "
                                             "is no SlurmctldHost")


def test_all_down_stands_by():
    assert P.serving(P.parse_ping(ALL_DOWN)) is None
    assert P.standby_reason(P.parse_ping(ALL_DOWN), "ctl1") == "no slurmctld answers scontrol ping"


@pytest.mark.parametrize("text", ["", "slurm_load_ctl_conf error: Unable to contact slurm controller\n",
                                  "Slurmctld(primary) at ctl1 is MAYBE\n"])
def test_no_controller_line_is_a_parse_error(text):
    with pytest.raises(ParseError, match="no 'Slurmctld"):
        P.parse_ping(text)


def _fake_scontrol(tmp_path, out: str, rc: int) -> dict:
    b = tmp_path / "bin"
    b.mkdir()
    echo = "".join(f"echo '{line}'\n" for line in out.splitlines())  # builtins only: PATH has no cat
    (b / "scontrol").write_text(f"#!/bin/sh\n[ \"$1\" = ping ] || exit 9\n{echo}exit {rc}\n")
    (b / "scontrol").chmod(0o755)
    return {**os.environ, "PATH": str(b)}


def test_ping_runs_scontrol_and_reads_its_lines_even_when_it_exits_1(tmp_path):
    assert P.ping(timeout=10, env=_fake_scontrol(tmp_path, ALL_DOWN, 1)) == P.parse_ping(ALL_DOWN)


def test_ping_without_scontrol_or_with_garbage_fails(tmp_path):
    with pytest.raises(CommandFailed, match="command not found"):
        P.ping(timeout=10, env={"PATH": str(tmp_path)})
    with pytest.raises(CommandFailed, match="exited 1"):
        P.ping(timeout=10, env=_fake_scontrol(tmp_path, "Unable to contact slurm controller\n", 1))


def test_ping_with_an_scontrol_that_cannot_run_fails(tmp_path):
    (tmp_path / "scontrol").write_text("#!/bin/sh\n")
    (tmp_path / "scontrol").chmod(0o644)  # not executable
    with pytest.raises(CommandFailed, match="cannot run it"):
        P.ping(timeout=10, env={"PATH": str(tmp_path)})
