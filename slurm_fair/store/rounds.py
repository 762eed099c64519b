"""Rounds and what they computed (shares, placements), the state carried from round to round (deviations,
deficits) and the policies' warm starts."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..errors import InputError
from .base import StoreBase
from .codec import _dumps, _float, _int, _loads

ROUND_STATUSES = ("ok", "dry-run", "unreachable", "solver-failed", "error", "running")
_ROUND_FIELDS = ("finished", "solve_seconds", "total_throughput", "n_accounts", "n_changes", "message", "details")
_SERIES_COLUMNS = ("id", "started", "finished", "policy", "status", "solve_seconds", "total_throughput", "n_accounts",
                   "n_changes")


@dataclass(frozen=True)
class Round:
    """A row of ``rounds``: ``details`` is its decoded JSON (read by :meth:`slurm_fair.records.RoundDetails.of_round`),
    None when read without it (``Store.rounds(details=False)``, ``Store.last_finished_round``)."""

    id: int
    started: float
    finished: float | None
    policy: str
    solver: str
    status: str  # one of ROUND_STATUSES
    solve_seconds: float | None
    total_throughput: float | None
    n_accounts: int | None
    n_changes: int | None
    message: str | None
    details: Any = None


@dataclass(frozen=True)
class RoundPoint:
    """A finished round in a series (``Store.round_series``): its columns but ``solver`` and ``details``, and
    ``values``: the requested top-level keys of its details, decoded (None where absent)."""

    id: int
    started: float
    finished: float | None
    policy: str
    status: str
    solve_seconds: float | None
    total_throughput: float | None
    n_accounts: int | None
    n_changes: int | None
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Share:
    """A row of ``shares``: the ideal (fractional) GPUs of an account's class on a type, ``real`` the rounded."""

    round_id: int
    account: str
    cls: str  # the column ``class``
    gpu_type: str
    ideal: float
    real: int | None


@dataclass(frozen=True)
class Placement:
    """A row of ``placements``: an account's GPUs of a type in a round (``deviation_before`` None in
    ``Store.placements_between``, which does not read it)."""

    round_id: int
    account: str
    gpu_type: str
    ideal: float
    deviation_before: float | None
    real: int | None
    limit: int | None


class RoundsMixin(StoreBase):
    """The ``rounds``, ``shares``, ``placements``, ``deviations``, ``deficits`` and ``warm_start`` tables."""

    def begin_round(self, policy: str, solver: str = "", now: float | None = None) -> int:
        """A new round, status ``running``, started at ``now`` (default: the wall clock)."""
        with self.transaction():
            return self.db["rounds"].insert(
                {"started": time.time() if now is None else float(now), "policy": policy, "solver": solver or "",
                 "status": "running"}
            ).last_pk

    def finish_round(self, round_id: int, status: str, **fields: Any) -> None:
        """Set ``status`` and any of finished (default now), solve_seconds, total_throughput, n_accounts,
        n_changes, message, details (JSON-able)."""
        if status not in ROUND_STATUSES:
            raise InputError("status", status, f"must be one of {', '.join(ROUND_STATUSES)}")
        for k in fields:
            if k not in _ROUND_FIELDS:
                raise InputError(k, fields[k], f"not a round field (known: {', '.join(_ROUND_FIELDS)})")
        update = {"status": status, "finished": time.time(), **fields}
        if "details" in update:
            update["details"] = _dumps(update["details"])
        with self.transaction():
            if self.db.execute("select 1 from rounds where id = ?", [round_id]).fetchone() is None:
                raise InputError("round_id", round_id, "no such round")
            self.db["rounds"].update(round_id, update)

    @staticmethod
    def _round_row(r: Mapping[str, Any]) -> Round:
        return Round(**{**r, "details": _loads(r.get("details"))})

    def _round_columns(self, details: bool) -> str:
        return "*" if details else ", ".join(c for c in self.db["rounds"].columns_dict if c != "details")

    def rounds(self, limit: int = 20, details: bool = True) -> list[Round]:
        """The newest ``limit`` rounds, newest first; ``details=False`` leaves out the (large) details JSON
        (the daemon's own bookkeeping reads only ids, statuses and times)."""
        return [self._round_row(r) for r in self.db["rounds"].rows_where(
            select=self._round_columns(details), order_by="id desc", limit=limit)]

    def round_series(self, since: float | None = None, until: float | None = None,
                     keys: Iterable[str] = ("fairness",)) -> list[RoundPoint]:
        """Finished rounds started in [since, until] (None: no bound), oldest first, with ``keys``, top-level
        keys of their details, as ``values`` (None where absent). SQLite extracts those keys, so the rest of
        each round's large details JSON is never decoded here."""
        names = list(keys)
        for k in names:
            if not k.isidentifier():
                raise InputError("keys", k, "must be a details key (letters, digits, _)")
        cols = ", ".join([*_SERIES_COLUMNS, *(f"json_extract(details, '$.{k}')" for k in names)])
        where, args = self._window("started", since, until)
        cur = self.db.execute(f"select {cols} from rounds where finished is not null and status != 'running'"
                              f"{' and ' + where if where else ''} order by id", args)
        n = len(_SERIES_COLUMNS)
        return [RoundPoint(*row[:n], values={k: _loads(v) for k, v in zip(names, row[n:])})
                for row in cur.fetchall()]

    def round(self, round_id: int | None = None) -> Round | None:
        """Round ``round_id``, or (None) the last finished round whose status is ok or dry-run."""
        if round_id is None:
            rows = list(self.db["rounds"].rows_where(
                "status in ('ok', 'dry-run') and finished is not null", order_by="id desc", limit=1))
        else:
            rows = list(self.db["rounds"].rows_where("id = ?", [round_id]))
        return self._round_row(rows[0]) if rows else None

    def round_counts(self) -> dict[str, int]:
        """status -> number of rounds with that status."""
        return {r[0]: r[1] for r in self.db.execute("select status, count(*) from rounds group by status")}

    def last_finished_round(self) -> Round | None:
        """The newest round that is not ``running`` (any other status), without its details, or None."""
        rows = list(self.db["rounds"].rows_where("status != 'running'", select=self._round_columns(False),
                                                 order_by="id desc", limit=1))
        return self._round_row(rows[0]) if rows else None

    # -------------------------------------------------------------------------------- shares/placements

    def record_shares(self, round_id: int, rows: Iterable[Mapping]) -> None:
        data = [{"round_id": round_id, "account": r["account"], "class": r["class"], "gpu_type": r["gpu_type"],
                 "ideal": float(r["ideal"]), "real": _int(r.get("real"), "real")} for r in rows]
        with self.transaction():
            self._insert_many("shares", data)

    def shares(self, round_id: int) -> list[Share]:
        return self._records(Share, "select round_id, account, class, gpu_type, ideal, real from shares "
                                    "where round_id = ? order by account, class, gpu_type", [round_id])

    def record_placements(self, round_id: int, rows: Iterable[Mapping]) -> None:
        data = [{"round_id": round_id, "account": r["account"], "gpu_type": r["gpu_type"],
                 "ideal": float(r["ideal"]), "deviation_before": _float(r.get("deviation_before")),
                 "real": _int(r.get("real"), "real"), "limit": _int(r.get("limit"), "limit")} for r in rows]
        with self.transaction():
            self._insert_many("placements", data)

    def placements(self, round_id: int) -> list[Placement]:
        return self._records(Placement, 'select round_id, account, gpu_type, ideal, deviation_before, real, "limit" '
                                        "from placements where round_id = ? order by account, gpu_type", [round_id])

    def placements_between(self, since: float | None = None, until: float | None = None) -> list[Placement]:
        """The placements (``deviation_before`` not read: None) of the finished rounds started in [since, until],
        by round, account and type."""
        where, args = self._window("r.started", since, until)
        return self._records(
            Placement, 'select p.round_id, p.account, p.gpu_type, p.ideal, null, p.real, p."limit" from placements p '
            "join rounds r on r.id = p.round_id where r.finished is not null"
            f"{' and ' + where if where else ''} order by p.round_id, p.account, p.gpu_type", args)

    # -------------------------------------------------------------------------------- carried state

    def deviations(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for r in self.db["deviations"].rows_where(order_by="account, gpu_type"):
            out.setdefault(r["account"], {})[r["gpu_type"]] = r["value"]
        return out

    def save_deviations(self, round_id: int | None, devs: Mapping[str, Mapping[str, float]]) -> None:
        """Replace the whole carried deviation state."""
        data = [{"account": a, "gpu_type": t, "value": float(v), "round_id": round_id}
                for a, per in devs.items() for t, v in per.items()]
        with self.transaction():
            self.db.execute("delete from deviations")
            self._insert_many("deviations", data)

    def deficits(self) -> dict[str, float]:
        return {r["account"]: r["value"] for r in self.db["deficits"].rows_where(order_by="account")}

    def save_deficits(self, d: Mapping[str, float]) -> None:
        """Replace the whole deficit state."""
        now = time.time()
        data = [{"account": a, "value": float(v), "updated": now} for a, v in d.items()]
        with self.transaction():
            self.db.execute("delete from deficits")
            if data:
                self.db["deficits"].insert_all(data)

    # -------------------------------------------------------------------------------- warm start

    def warm_start(self, policy: str, with_time: bool = False) -> Any:
        """The warm start saved for ``policy`` (decoded JSON), or None; ``with_time``: (data, time saved).
        An unreadable one counts as none."""
        row = next(self.db["warm_start"].rows_where("policy = ?", [policy]), None)
        data = None
        if row is not None:
            try:
                data = json.loads(row["data"])
            except (TypeError, ValueError):
                data = None
        if with_time:
            return data, (float(row["updated"]) if row is not None and data is not None else 0.0)
        return data

    def save_warm_start(self, policy: str, data: Any, round_id: int | None = None, now: float | None = None) -> None:
        """Replace ``policy``'s warm start (JSON-encodable; tuples become lists), saved at ``now``."""
        self.db["warm_start"].upsert({"policy": policy, "data": json.dumps(data), "round_id": round_id,
                                      "updated": time.time() if now is None else float(now)}, pk="policy")
