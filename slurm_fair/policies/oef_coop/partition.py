"""POP-style partitioned solving (Narayanan et al., SOSP '21) for any policy on :class:`VirtualUsers`.

The classes (virtual users) are split at random into ``parts`` groups and every GPU type's capacity is split
into as many slices; each group is solved exactly, alone, on its slice, and the results are put side by side.
A policy whose solve grows faster than linearly in the number of classes (cooperative OEF's envy rows are
n(n-1)) gets about ``parts``-fold smaller problems, at a price measured in ``benchmarks/coop_scale.py``.

The split (choices, and why):

- **Which class goes where** (``how``): ``stratified`` (the default) sorts the classes by the GPU type they
  are comparatively fastest on, then demand, then how much faster, and deals them ``parts`` at a time in a
  seeded random order (:func:`stratified`), so every group is close to a scaled copy of the whole problem.
  ``hash``: POP's plain random split, by a keyed hash of (seed, tenant, class) modulo ``parts``; stable from
  round to round (a class keeps its group while others come and go). Measured (benchmarks/coop_scale.py):
  the hash split left classes envying classes of other groups by 20-90 % of their throughput; the
  stratified split cuts that (numbers in docs/_incoming/a22-oef-coop-scale.md). Both are deterministic for a
  seed.
- **Capacity by weight**: group p gets ``m_j * W_p / W`` of every type j (W_p: the group's total weight). With
  this split each group is the whole cluster scaled by W_p / W, so a policy's sharing-incentive guarantee
  inside its group (a user gets at least u_l(w_l / W_p * m_p)) is *exactly* the global one
  (u_l(w_l / W * m)): sharing incentive survives partitioning. A split by demand would put more GPUs where
  they are wanted (less idle capacity) but give a user of a heavily loaded group less than its weight share.
- What partitioning loses: envy-freeness holds inside a group only (a class may envy a class of another
  group), and the total is lower where one group's slice of a type sits idle (its classes are capped by
  their demands) while another group's classes would use it; the caller hands such idle GPUs out globally
  afterwards (``fill_idle``), which keeps the result work-conserving.

``processes`` > 1 solves the groups in forked worker processes (Linux ``fork``: no re-import); on a 2-CPU
machine shared with other work this did not pay (measured in the benchmark), so the default is sequential.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...errors import InputError
from ...model import VirtualUsers


@dataclass(frozen=True)
class Split:
    parts: int
    seed: int
    group: np.ndarray  # (n,) group of every virtual user, 0 .. parts-1
    capacity: np.ndarray  # (parts, k) each group's slice of every GPU type

    def rows(self, p: int) -> np.ndarray:
        return np.flatnonzero(self.group == p)


def check_parts(parts) -> int:
    if isinstance(parts, bool) or not isinstance(parts, (int, np.integer)) or parts < 1:
        raise InputError("partitions", parts, "must be an integer >= 1")
    return int(parts)


def group_of(tenant: str, cls: str, parts: int, seed: int = 0) -> int:
    """The group of class (tenant, cls): a keyed BLAKE2b hash, the same on every machine and in every round."""
    h = hashlib.blake2b(f"{tenant}\x00{cls}".encode(), digest_size=8, key=str(int(seed)).encode())
    return int.from_bytes(h.digest(), "little") % parts


def stratified(vu: VirtualUsers, parts: int, seed: int = 0) -> np.ndarray:
    """Groups dealt from the classes sorted by what decides their place in the allocation (the GPU type they
    are comparatively fastest on, their demand, how much faster), ``parts`` at a time in a seeded random order:
    every group gets a like sample of every kind of class, so each group is close to a scaled copy of the
    whole problem."""
    S = vu.speed
    n = S.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    usable = S > 0
    mean = np.array([S[usable[:, j], j].mean() if usable[:, j].any() else 1.0 for j in range(S.shape[1])])
    rel = S / mean[None, :]
    pref = rel.argmax(axis=1)
    strength = rel.max(axis=1) / np.maximum(np.where(usable, rel, np.inf).min(axis=1), 1e-300)
    demand = np.where(np.isfinite(vu.demand), vu.demand, np.finfo(float).max)
    order = np.lexsort((strength, demand, pref))
    rng = np.random.default_rng([int(seed), parts, n])
    deal = np.concatenate([rng.permutation(parts) for _ in range(-(-n // parts))])[:n]
    group = np.empty(n, dtype=np.int64)
    group[order] = deal
    return group


def split(vu: VirtualUsers, parts: int, seed: int = 0, how: str = "stratified") -> Split:
    """Groups of the classes (``how``: ``stratified`` or ``hash``, see the module) and each group's capacity
    slice (proportional to its weight)."""
    parts = check_parts(parts)
    if how == "hash":
        group = np.array([group_of(t, c, parts, seed) for t, c in zip(vu.tenant, vu.cls)], dtype=np.int64)
    elif how == "stratified":
        group = stratified(vu, parts, seed)
    else:
        raise InputError("partition split", how, "must be stratified or hash")
    if parts == 1:
        return Split(1, int(seed), group, vu.capacity.astype(float)[None, :].copy())
    wp = np.bincount(group, weights=vu.weight, minlength=parts).astype(float)
    total = float(wp.sum())
    frac = wp / total if total > 0 else np.full(parts, 1.0 / parts)
    cap = frac[:, None] * vu.capacity.astype(float)[None, :]
    return Split(parts, int(seed), group, cap)


def subset(vu: VirtualUsers, rows: np.ndarray, capacity: np.ndarray) -> VirtualUsers:
    """The virtual users ``rows`` alone on ``capacity``."""
    rows = np.asarray(rows, dtype=np.int64)
    return dataclasses.replace(
        vu, tenant=tuple(vu.tenant[i] for i in rows), cls=tuple(vu.cls[i] for i in rows),
        weight=vu.weight[rows], raw=vu.raw[rows], speed=vu.speed[rows], demand=vu.demand[rows],
        type_cap=vu.type_cap[rows], capacity=np.asarray(capacity, dtype=float),
    )


# Set by solve_groups in the parent just before forking, read by the workers (fork copies it: nothing is
# pickled but the group index and the result).
_JOB: tuple | None = None


GROUP_TIMEOUT_S = 120.0  # seconds the forked workers get before the groups are solved in this process


def _run_group(p: int):
    solve_group, vu, sp = _JOB
    return solve_group(subset(vu, sp.rows(p), sp.capacity[p]))


def _worker(groups: list[int], conn) -> None:
    """In a forked child: solve ``groups`` and send ``("ok", [results])`` (or ``("error", text)``) as one message."""
    import pickle

    try:
        msg = ("ok", [_run_group(p) for p in groups])
    except BaseException as e:  # noqa: BLE001 - the parent solves the groups itself and raises there
        msg = ("error", repr(e))
    try:
        conn.send_bytes(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))
    finally:
        conn.close()


def _forked(parts: int, processes: int, timeout: float) -> list | None:
    """The groups solved in ``processes`` forked children (group k in child k mod processes), each with its own
    pipe — no lock is shared with the children (a ``multiprocessing.Pool`` shares its queues' locks: a worker
    killed while holding one left the pool's teardown waiting for ever, seen in a unit-test run). None when a
    child fails, dies or is not done by ``timeout`` seconds: every child is then killed (SIGKILL: a child
    deadlocked on a lock another thread of the parent held at the fork may ignore SIGTERM)."""
    import multiprocessing as mp
    import pickle
    import time

    try:
        ctx = mp.get_context("fork")
    except ValueError:
        return None
    n = min(int(processes), parts)
    chunks = [list(range(k, parts, n)) for k in range(n)]
    kids = []
    try:
        for chunk in chunks:
            r, w = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_worker, args=(chunk, w), daemon=True)
            proc.start()
            w.close()
            kids.append((proc, r, chunk))
        out: dict[int, object] = {}
        deadline = time.monotonic() + float(timeout)
        for proc, r, chunk in kids:
            if not r.poll(max(0.0, deadline - time.monotonic())):
                return None
            status, res = pickle.loads(r.recv_bytes())  # EOFError if the child died before it sent
            if status != "ok":
                return None
            out.update(zip(chunk, res))
        return [out[k] for k in range(parts)]
    except (EOFError, OSError, pickle.UnpicklingError):
        return None
    finally:
        for proc, r, _chunk in kids:
            if proc.is_alive():
                proc.kill()
            proc.join(5)
            r.close()


def solve_groups(vu: VirtualUsers, sp: Split, solve_group: Callable[[VirtualUsers], tuple], processes: int = 0) -> list:
    """``solve_group(sub_vu)`` for every group (in group order); ``processes`` > 1: in forked workers — past
    GROUP_TIMEOUT_S, or if one fails or dies, the groups are solved in this process instead."""
    global _JOB
    if processes > 1 and sp.parts > 1:
        _JOB = (solve_group, vu, sp)
        try:
            got = _forked(sp.parts, processes, GROUP_TIMEOUT_S)
        finally:
            _JOB = None
        if got is not None:
            return got
    return [solve_group(subset(vu, sp.rows(p), sp.capacity[p])) for p in range(sp.parts)]
