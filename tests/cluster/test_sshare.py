"""Unit tests of slurm_fair.cluster.sshare against ``sshare -a -l -P`` recorded on the Slurm 22.05.8 testbed by
tests/fixtures/slurm-json/capture-sshare.sh: a usage history with a ``Fairshare=parent`` sub-account (acct_sub
under acct_a, alice in it), under Fair Tree (sshare_long.txt) and under ``PriorityFlags=NO_FAIR_TREE``
(sshare_long_classic.txt: no LevelFS column, FairShare on accounts too). 24.11.5's sshare prints the same columns
(src/sshare/process.c); no 24.11 capture is kept."""

from __future__ import annotations

import math

import pytest

from slurm_fair.cluster import ParseError
from slurm_fair.cluster.sshare import ShareRow, parse_sshare
from tests.conftest import text


def rows_by_key(name: str) -> dict[tuple[str, str], ShareRow]:
    rows = parse_sshare(text("22.05", name))
    return {(r.account, r.user): r for r in rows}


def test_fair_tree_capture():
    rows = parse_sshare(text("22.05", "sshare_long.txt"))
    assert [(r.depth, r.account, r.user) for r in rows] == [
        (0, "root", ""), (1, "root", "root"), (1, "acct_a", ""), (2, "acct_a", "alice"), (2, "acct_a", "root"),
        (2, "acct_sub", ""), (3, "acct_sub", "alice"), (1, "acct_b", ""), (2, "acct_b", "bob"),
        (2, "acct_b", "root"), (1, "acct_c", ""), (2, "acct_c", "carol"), (2, "acct_c", "root")]
    by = {(r.account, r.user): r for r in rows}
    root = by["root", ""]
    assert (root.parent, root.raw_shares, root.raw_usage, root.fairshare, root.level_fs) == ("", None, 11, None, None)
    assert root.effective_usage == 1.0
    ru = by["root", "root"]  # the root user, directly under the root
    assert (ru.parent, ru.raw_shares, ru.norm_shares, ru.fairshare) == ("root", 1, 0.2, 1.0)
    assert ru.level_fs == math.inf and ru.is_user and ru.name == "root"
    a = by["acct_a", ""]
    assert (a.parent, a.raw_shares, a.raw_usage, a.fairshare, a.level_fs) == ("root", 1, 5, None, 0.400001)
    assert not a.is_user and a.name == "acct_a"
    sub = by["acct_sub", ""]  # Fairshare=parent: no shares of its own, no Level FS
    assert (sub.parent, sub.depth, sub.raw_shares, sub.level_fs, sub.effective_usage) == ("acct_a", 2, None, None, 1.0)
    alice = by["acct_sub", "alice"]
    assert (alice.parent, alice.raw_usage, alice.norm_shares, alice.fairshare, alice.level_fs) == (
        "acct_sub", 5, 0.333333, 0.125, 0.333333)
    assert by["acct_c", ""].raw_shares == 2 and by["acct_c", "carol"].effective_usage == 1.0
    # Fair Tree's factors are ranks over the 8 user associations
    assert sorted(r.fairshare * 8 for r in rows if r.is_user) == pytest.approx([1, 3, 3, 4, 5, 6, 7, 8])


def test_classic_capture_has_no_level_fs_and_factors_on_accounts():
    by = rows_by_key("sshare_long_classic.txt")
    assert len(by) == 13 and all(r.level_fs is None for r in by.values())
    assert by["acct_a", ""].fairshare == 0.176777 and by["root", ""].fairshare == 0.5
    assert by["acct_sub", "alice"].norm_shares == 0.066667  # classic: shares normalized down the whole tree
    assert by["acct_c", "carol"].fairshare == 0.561230


def test_other_column_lists_and_orders():
    out = ("User|Account|FairShare|RawUsage|EffectvUsage|NormShares|RawShares\n|root||0|1.0|0.0|\n"
           "| acct_b||7|1.0|0.5|1\nbob|  acct_b|0.25|7|1.0|0.5|1\n")
    rows = parse_sshare(out)
    assert [(r.account, r.user, r.parent, r.depth, r.raw_usage, r.fairshare) for r in rows] == [
        ("root", "", "", 0, 0, None), ("acct_b", "", "root", 1, 7, None), ("acct_b", "bob", "acct_b", 2, 7, 0.25)]


HEADER = "Account|User|RawShares|NormShares|RawUsage|NormUsage|EffectvUsage|FairShare|LevelFS"


@pytest.mark.parametrize("out, match", [
    ("", "no output"),
    ("Account|User|RawShares\nroot|||", r"missing column\(s\) \['NormShares'"),
    (HEADER + "\nroot|||0.0|0", "line 2: expected 9"),
    (HEADER + "\nroot|||0.0|many||1.0||", "RawUsage: not a whole number: 'many'"),
    (HEADER + "\nroot|||0.0|0||1.0||\n acct_a||1|x|0|0|0||inf", "line 3 \\(acct_a\\): NormShares: not a number"),
    (HEADER + "\nroot|||0.0|0||1.0||\n acct_a||-1|0.5|0|0|0||inf", "RawShares: not a whole number: '-1'"),
    (HEADER + "\nroot|||0.0|\u00b2||1.0||", "RawUsage: not a whole number"),
    (HEADER + "\nroot|||0.0|0||1.0||\n acct_a||1|0.5|0|0|nan||inf", "EffectvUsage: not a number >= 0"),
    (HEADER + "\nroot|||0.0|0||1.0||\n   acct_a||1|0.5|0|0|0||inf", "indented 3 levels"),
    (HEADER + "\nroot|||0.0|0||1.0||\n acct_a||1|0.5|0|0|0||inf\n  acct_b|bob|1|0.5|0|0|0|1|inf",
     "user row must sit one level below its account 'acct_b'"),
    (HEADER + "\n|||0.0|0||1.0||", "empty Account"),
])
def test_bad_output_names_the_line_and_field(out, match):
    with pytest.raises(ParseError, match=match):
        parse_sshare(out)
