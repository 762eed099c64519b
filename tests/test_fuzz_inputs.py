"""Fuzzing the inputs not covered by test_input_hardening.py (issue "Hardening", item 3): the TOML config, the
Slurm JSON and text parsers (22.05 and 24.11 captures mutated), GRES/TRES strings, hook spool files.

Each input either parses to sane values or raises the project's own error (``InputError`` / ``ClusterError``,
both ``SlurmFairError``) naming what was wrong — never another exception. The default examples are few and
derandomized (CI runs the same ones every time); ``SLURM_FAIR_HYPOTHESIS_EXAMPLES=N`` runs N fresh random
examples per test (the soak; docs/testing.md, "Fuzzing").
"""

from __future__ import annotations

import copy
import json
import os
import tomllib
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_fair import config as config_mod
from slurm_fair import jobrecord
from slurm_fair.cluster import gres, parse, sacctmgr, slurm_json, sshare
from slurm_fair.daemon.ingest import ingest
from slurm_fair.errors import SlurmFairError
from slurm_fair.store import Store

SOAK = os.environ.get("SLURM_FAIR_HYPOTHESIS_EXAMPLES")
SETTINGS = settings(max_examples=int(SOAK or "60"), deadline=None, derandomize=not SOAK,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])
FIX = Path(__file__).parent / "fixtures" / "slurm-json"

NASTY = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["", "gpu:a100:2(IDX:0-1)", "gpu:(null):3", "gres/gpu:a100=2", "gres/gpu=-1",
                                           "gpu:v100:99999999999999999999", "gres:gpu:", "gpu::2", "a\x00b", "é"]),
    st.lists(st.integers(-3, 3), max_size=3),
    st.fixed_dictionaries({"set": st.booleans(), "infinite": st.booleans(),
                           "number": st.one_of(st.integers(-10, 2**64), st.floats(allow_nan=True))}),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def _paths(obj, prefix=()):
    """Every (path, container) in a JSON document."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield prefix + (k,), obj
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield prefix + (i,), obj
            yield from _paths(v, prefix + (i,))


@st.composite
def mutated(draw, doc):
    d = copy.deepcopy(doc)
    spots = list(_paths(d))
    for _ in range(draw(st.integers(1, 4))):
        path, parent = spots[draw(st.integers(0, len(spots) - 1))]
        key = path[-1]
        try:
            if draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(key, None)
            else:
                parent[key] = draw(NASTY)
        except (IndexError, KeyError):
            pass
    return d


def _doc(name: str) -> dict:
    return json.loads((FIX / name).read_text())


SQUEUE = [_doc("22.05/squeue_requests.json"), _doc("24.11/squeue_requests_complex.json"), _doc("24.11/squeue.json")]
NODES = [_doc("22.05/sinfo.json"), _doc("24.11/scontrol_node.json"), _doc("24.11/sinfo.json")]


def _only_our_errors(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except SlurmFairError as e:
        assert str(e).strip(), "an error must say what was wrong"
        return None


@SETTINGS
@given(st.sampled_from(range(len(SQUEUE))).flatmap(lambda i: mutated(SQUEUE[i])))
def test_fuzz_squeue_json(doc):
    jobs = _only_our_errors(parse.parse_jobs, doc)
    for j in jobs or ():
        assert j.gpus >= 0 and isinstance(j.account, str)


@SETTINGS
@given(st.sampled_from(range(len(NODES))).flatmap(lambda i: mutated(NODES[i])))
def test_fuzz_node_json(doc):
    for n in _only_our_errors(parse.parse_nodes, doc) or ():
        assert all(v >= 0 for v in n.gpus.values())


GRES = st.one_of(NASTY.filter(lambda v: isinstance(v, str)),
                 st.lists(st.sampled_from(["gpu", "a100", "v100", ":", "=", "2", "(IDX:0-1)", ",", "gres/", "(null)",
                                           "-1", "1e9", "S:0", " ", "*"]), max_size=8).map("".join))


@SETTINGS
@given(GRES)
def test_fuzz_gres_and_tres_strings(s):
    for fn in (gres.gpu_requests, gres.tres_gpus, gres.gres_gpus, sacctmgr.grptres_limits):
        out = _only_our_errors(fn, s)
        if isinstance(out, dict):
            assert all(isinstance(v, int) and v >= 0 for v in out.values()), (fn.__name__, s, out)


@SETTINGS
@given(st.text(max_size=200))
def test_fuzz_text_outputs(text):
    """sacctmgr / sprio / sshare / --version text: parsed or our error."""
    for fn in (sacctmgr.parse_assoc, parse.parse_sprio, sshare.parse_sshare, slurm_json.parse_version_output):
        _only_our_errors(fn, text)


KEYS = [(s, k) for s, sec in config_mod.SCHEMA.items() for k in sec] if hasattr(config_mod, "SCHEMA") else []


@st.composite
def configs(draw):
    base = tomllib.loads(config_mod.render_default())
    for _ in range(draw(st.integers(1, 3))):
        sec = draw(st.sampled_from(sorted(base) + ["nosuch"]))
        table = base.setdefault(sec, {}) if sec in base else {}
        if sec == "nosuch":
            base[sec] = {"x": 1}
            continue
        key = draw(st.sampled_from(sorted(table) + ["weigth"])) if table else "weigth"
        table[key] = draw(NASTY.filter(lambda v: v is not None))
    return base


@SETTINGS
@given(configs())
def test_fuzz_config(data):
    try:
        cfg = config_mod.from_dict(data)
    except SlurmFairError as e:
        assert str(e).strip()
        return
    assert cfg.daemon.period > 0


@SETTINGS
@given(st.lists(st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"{", b"[]", b"null", b'{"job_id": "x"}', b'{"job_id": 1, "event": "start"}',
                     b'{"job_id": 1e999}', b"\xff\xfe", b'{"a": ' * 50]),
    st.dictionaries(st.sampled_from(["job_id", "event", "time", "account", "gpus", "types", "v"]), NASTY,
                    max_size=6).map(lambda d: json.dumps(d, allow_nan=True).encode())), min_size=1, max_size=4))
def test_fuzz_spool_files_never_stop_ingest(tmp_path_factory, blobs):
    tmp = tmp_path_factory.mktemp("spool")
    spool = tmp / "spool"
    spool.mkdir()
    for i, b in enumerate(blobs):
        (spool / f"rec-{i}.json").write_bytes(b)
    (spool / "link.json").symlink_to("/etc/passwd")
    store = Store(str(tmp / "db.sqlite"))
    res = ingest(store, spool)  # never raises
    left = {p.name for p in spool.iterdir() if p.is_file() and not p.is_symlink()}
    assert not any(n.startswith("rec-") for n in left), (left, res)  # each read in or moved to bad/


# ---- issue 21, item 6: any byte a user can set, through the real parse paths (tests/hostile.py; the
# 10 000-case soak: benchmarks/fuzz_soak.py)

from tests import hostile as H  # noqa: E402

BYTES = st.one_of(st.binary(max_size=30), st.lists(st.sampled_from(H.SPECIAL), max_size=6).map(b"".join))
FEW = settings(SETTINGS, max_examples=int(SOAK or "12"))


@FEW
@given(st.sampled_from(H.VERSIONS), st.dictionaries(st.tuples(st.integers(0, 15), st.sampled_from(H.USER_FIELDS_JSON)),
                                                    BYTES, min_size=1, max_size=5), st.booleans())
def test_fuzz_squeue_json_bytes_through_the_backend_and_a_round(version, fields, round_):
    o = H.squeue_case(version, fields, round_)
    assert not o.stopped, o


@SETTINGS
@given(BYTES, BYTES)
def test_fuzz_profile_status_lines(name, comment):
    H.squeue_text_case(name, comment)


@FEW
@given(st.sampled_from(H.VERSIONS), st.sampled_from(["name", "comment", "workdir", "stdout", "wckey"]), BYTES,
       st.sampled_from(sorted(jobrecord.CONTEXTS)))
def test_fuzz_hook_environment_and_scontrol_text_bytes_then_ingest(tmp_path_factory, version, where, b, context):
    H.hook_case(version, where, b, context, tmp_path_factory.mktemp("hook"))


@FEW
@given(st.randoms(use_true_random=False))
def test_fuzz_spool_near_records(tmp_path_factory, rng):
    o = H.run_case(H.random_case(rng, "spool"), tmp_path_factory.mktemp("spool"))
    assert not o.traceback, o


@SETTINGS
@given(st.sampled_from(H.VERSIONS), st.lists(st.tuples(st.integers(0, 5), BYTES), min_size=1, max_size=4))
def test_fuzz_sacctmgr_and_sprio_text_bytes(version, edits):
    """sacctmgr's assoc lines and sprio's lines with any bytes in any field (names there are the admin's, not
    users': a line a byte breaks is our ParseError, which names the line, never another exception)."""
    for name in ("sacctmgr_assoc_fmt_limits.txt", "sprio.txt"):
        lines = (H.FIX / version / name).read_bytes().split(b"\n")
        for field, b in edits:
            i = (field * 7 + len(b)) % max(1, len(lines))
            cells = lines[i].split(b"|")
            cells[field % len(cells)] += b
            lines[i] = b"|".join(cells)
        text = b"\n".join(lines).decode("utf-8", "replace")  # as the CLI backend reads it
        fn = sacctmgr.parse_assoc if name.startswith("sacctmgr") else parse.parse_sprio
        _only_our_errors(fn, text)


@SETTINGS
@given(st.sampled_from(["sshare_long.txt", "sshare_long_classic.txt"]),
       st.lists(st.tuples(st.integers(0, 40), st.integers(0, 10), BYTES), min_size=1, max_size=4))
def test_fuzz_sshare_text_bytes(name, edits):
    """``sshare -a -l -P`` (22.05 captures) with any bytes in any cell, spaces included (the tree is in the Account
    column's indentation): parsed, or our ParseError naming the line."""
    lines = (H.FIX / "22.05" / name).read_bytes().split(b"\n")
    for row, col, b in edits:
        i = row % len(lines)
        cells = lines[i].split(b"|")
        cells[col % len(cells)] = b + cells[col % len(cells)] if row % 2 else cells[col % len(cells)] + b
        lines[i] = b"|".join(cells)
    _only_our_errors(sshare.parse_sshare, b"\n".join(lines).decode("utf-8", "replace"))
