"""Guarantee flips (issue 28, item 1): how often an account's guarantee of a GPU type changed from one round to
the next while nothing it depends on changed. Pure: no I/O.

Every round records (``RoundDetails.fingerprint``, from :func:`fingerprint`) a hash of the problem the policy
solved — per account one hash of what the policy sees of it (its classes' throughput per type, demand, per-type
caps and jobs; its tenant's weight and number of classes), and one of the whole problem (every account's hash,
plus the GPU capacity per type) — beside its guarantees (``RoundDetails.real``: account -> type -> GPUs).

:func:`flips` compares each ok round with the ok round before it, account by account and type by type (an
account-type present in either round; absent counts as 0 GPUs):

* (a) ``same_problem``: the account-type-rounds of round pairs whose whole problem was unchanged, and how many
  of those changed the guarantee. Any such change is a flip: nothing the policy sees moved.
* (b) ``same_account``: the account-type-rounds whose account's own inputs and the capacity were unchanged
  (other accounts may have moved: the guarantee may then move legitimately, so (b) bounds the flips from above).
* With the rounds' ``ideal`` (the policy's fractional shares): ``ideal_moved_same_problem``, the (a) rows whose
  ideal moved (the policy itself flipped: a different optimum of the same problem), and
  ``rounding_flips_same_account``, the (b) flips whose ideal on that type did not move (the rounding flipped).

The lead's benchmark (or anyone with a store) calls it on the store's series::

    rows = store.round_series(keys=("real", "fingerprint", "ideal"))
    result = fairness.stability.flips(rows)      # FlipCounts; .as_json() for a report

Rounds without a fingerprint (an older daemon's) are skipped, and so is a pair that straddles one.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from ..model import Problem


@dataclass(frozen=True)
class Fingerprint:
    """Hashes of a round's problem: ``problem`` (the whole: every account's and the capacity), ``capacity``,
    and one per account."""

    problem: str
    capacity: str
    accounts: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"problem": self.problem, "capacity": self.capacity, "accounts": dict(self.accounts)}

    @classmethod
    def from_json(cls, data: Any) -> "Fingerprint | None":
        """None for anything but a recorded fingerprint (an older round has none)."""
        if not isinstance(data, Mapping):
            return None
        p, c, a = data.get("problem"), data.get("capacity"), data.get("accounts")
        if not (isinstance(p, str) and isinstance(c, str) and isinstance(a, Mapping)):
            return None
        return cls(p, c, {str(k): str(v) for k, v in a.items()})


def _num(v: Any) -> str:
    if v is None:
        return "none"
    f = float(v)
    return "inf" if math.isinf(f) else repr(round(f, 9))


def _hash(parts: Iterable[str]) -> str:
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


def fingerprint(problem: Problem, rows: Mapping[tuple[str, str], tuple[str, str]]) -> Fingerprint:
    """The hashes of ``problem``; ``rows``: (account, class) -> (tenant, class name in the problem), as the
    round builds them (``plan.Built.rows``). An account's hash covers its classes (throughput per type, demand,
    per-type caps, jobs) and its tenant's weight and number of classes."""
    tenants = {t.name: t for t in problem.tenants}
    per: dict[str, list[str]] = {}
    for (account, cls), (tname, name) in sorted(rows.items()):
        t = tenants.get(tname)
        c = next((c for c in t.classes if c.name == name), None) if t is not None else None
        if c is None:
            continue
        part = [cls, tname, _num(t.weight), str(len(t.classes)), _num(c.demand),
                ",".join(f"{g}={_num(v)}" for g, v in sorted(c.throughput.items())),
                "none" if c.type_demand is None else ",".join(f"{g}={_num(v)}" for g, v in sorted(c.type_demand.items())),
                "none" if c.jobs is None else repr(c.jobs)]
        per.setdefault(account, []).extend(part)
    accounts = {a: _hash(p) for a, p in sorted(per.items())}
    capacity = _hash(f"{g}={_num(n)}" for g, n in sorted(problem.gpu_types.items()))
    whole = _hash([capacity] + [f"{a}:{h}" for a, h in accounts.items()])
    return Fingerprint(whole, capacity, accounts)


@dataclass(frozen=True)
class FlipCounts:
    """(a) ``same_problem``: account-type-rounds with the whole problem unchanged, ``flips_same_problem`` of them
    changed the guarantee; (b) the same for ``same_account`` (the account's own inputs and the capacity
    unchanged). ``pairs``: consecutive ok round pairs compared; ``examples``: up to 10 flips of (a), then (b),
    as (round id, account, type, before, after)."""

    pairs: int = 0
    same_problem: int = 0
    flips_same_problem: int = 0
    same_account: int = 0
    flips_same_account: int = 0
    changed: int = 0  # all account-type-rounds whose guarantee changed (whatever the inputs did)
    account_type_rounds: int = 0  # all compared
    # with ``ideal`` in the rows (the policy's fractional share): of (a), the account-type-rounds whose ideal
    # moved (the policy's own flips: nothing it sees moved); of (b)'s flips, those whose ideal on that type did
    # not move (the rounding's flips)
    ideal_moved_same_problem: int = 0
    rounding_flips_same_account: int = 0
    examples: tuple[tuple[Any, str, str, int, int], ...] = ()

    @property
    def rate_same_problem(self) -> float | None:
        return self.flips_same_problem / self.same_problem if self.same_problem else None

    @property
    def rate_same_account(self) -> float | None:
        return self.flips_same_account / self.same_account if self.same_account else None

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["examples"] = [list(e) for e in self.examples]
        out["rate_same_problem"] = self.rate_same_problem
        out["rate_same_account"] = self.rate_same_account
        return out


def _get(r: Any, key: str) -> Any:
    """A round's ``key``: a ``store.RoundPoint``'s column or details value (its ``values``), a ``RoundDetails``
    field; None where it has none."""
    values = getattr(r, "values", None)
    if isinstance(values, Mapping) and key in values:
        return values[key]
    return getattr(r, key, None)


def _floats(ideal: Any) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    if isinstance(ideal, Mapping):
        for a, row in ideal.items():
            if isinstance(row, Mapping):
                out[str(a)] = {str(g): float(v) for g, v in row.items()
                               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return out


IDEAL_TOL = 1e-6  # GPUs: an ideal that moved less than this did not move (solver noise)


def _ints(real: Any) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    if not isinstance(real, Mapping):
        return out
    for a, row in real.items():
        if isinstance(row, Mapping):
            out[str(a)] = {str(g): int(v) for g, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return out


def flips(rounds: Iterable[Any]) -> FlipCounts:
    """Count guarantee flips over ``rounds``, oldest first: rows of ``store.round_series(keys=("real",
    "fingerprint", "ideal"))`` (``store.RoundPoint`` with ``status`` and the values ``real``, ``fingerprint`` and
    optionally ``ideal``; rounds whose status is not ``ok`` are skipped) or :class:`~slurm_fair.records.RoundDetails` (every one
    counted). See the module docstring."""
    pairs = same_p = flips_p = same_a = flips_a = changed = total = moved_p = round_a = 0
    ex_p: list[tuple] = []
    ex_a: list[tuple] = []
    prev: tuple[Fingerprint, dict] | None = None
    for r in rounds:
        status = _get(r, "status")
        if status is not None and status != "ok":
            continue
        fp = Fingerprint.from_json(_get(r, "fingerprint"))
        if fp is None:
            prev = None
            continue
        real = _ints(_get(r, "real"))
        ideal = _floats(_get(r, "ideal"))
        if prev is not None:
            pfp, preal, pideal = prev
            known = bool(ideal) and bool(pideal)  # both rounds recorded their ideal
            pairs += 1
            whole = pfp.problem == fp.problem
            cap_same = pfp.capacity == fp.capacity
            for a in sorted(set(real) | set(preal)):
                own = cap_same and a in fp.accounts and pfp.accounts.get(a) == fp.accounts.get(a)
                before, after = preal.get(a, {}), real.get(a, {})
                for g in sorted(set(before) | set(after)):
                    b, n = before.get(g, 0), after.get(g, 0)
                    still = abs(pideal.get(a, {}).get(g, 0.0) - ideal.get(a, {}).get(g, 0.0)) <= IDEAL_TOL
                    total += 1
                    moved = b != n
                    changed += moved
                    item = (_get(r, "id"), a, g, b, n)
                    if whole:
                        same_p += 1
                        flips_p += moved
                        moved_p += known and not still
                        if moved and len(ex_p) < 10:
                            ex_p.append(item)
                    if own:
                        same_a += 1
                        flips_a += moved
                        round_a += known and moved and still
                        if moved and len(ex_a) < 10:
                            ex_a.append(item)
        prev = (fp, real, ideal)
    return FlipCounts(pairs, same_p, flips_p, same_a, flips_a, changed, total, moved_p, round_a,
                      tuple((ex_p + ex_a)[:10]))
