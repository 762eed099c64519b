"""What slurm-fair changed in Slurm: the limits each round applied, the accounts it manages and the limits
accounts had before it first managed them (what ``slurm-fair rollback`` restores)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable, Mapping

from .base import StoreBase
from .codec import _dumps, _int, _loads


@dataclass(frozen=True)
class AppliedChange:
    """A row of ``applied``: a GPU limit ``key`` of an account a round changed from ``old`` to ``new`` (None: none
    set; -1: cleared) at ``time``."""

    round_id: int
    account: str
    key: str
    old: int | None
    new: int | None
    time: float


class LimitsMixin(StoreBase):
    """The ``applied``, ``written``, ``managed``, ``site_limits`` and ``site_factors`` tables."""

    def record_applied(self, round_id: int, rows: Iterable[Mapping]) -> None:
        now = time.time()
        data = [{"round_id": round_id, "account": r["account"], "key": r["key"], "old": _int(r.get("old"), "old"),
                 "new": _int(r.get("new"), "new"), "time": float(r.get("time", now))} for r in rows]
        with self.transaction():
            if data:
                self.db["applied"].insert_all(data)
                self.db["written"].upsert_all([{"account": d["account"], "key": d["key"], "value": d["new"],
                                                "time": d["time"]} for d in data if d["new"] is not None],
                                              pk=("account", "key"))

    def written(self) -> dict[str, dict[str, int]]:
        """account -> GPU limit key -> the value slurm-fair last wrote there (CLEAR: it cleared the limit)."""
        out: dict[str, dict[str, int]] = {}
        for r in self.db["written"].rows:
            out.setdefault(r["account"], {})[r["key"]] = int(r["value"])
        return out

    def forget_written(self, accounts: Iterable[str]) -> None:
        """Drop what slurm-fair wrote for ``accounts`` (after a rollback gave them back)."""
        names = sorted(set(accounts))
        if names:
            with self.transaction():
                self.db.execute(f"delete from written where account in ({','.join('?' * len(names))})", names)

    def applied(self, round_id: int) -> list[AppliedChange]:
        return self._records(AppliedChange, "select round_id, account, key, old, new, time from applied "
                                            "where round_id = ? order by rowid", [round_id])

    def record_factors(self, set_now: Mapping[int, int], before: Mapping[int, int], pending: Iterable[int],
                       now: float | None = None) -> None:
        """SiteFactors set this round (``set_now`` job -> value; ``before``: each job's factor as the round found
        it, kept from the job's first change); rows of jobs not in ``pending`` any more are dropped."""
        t = time.time() if now is None else float(now)
        keep = {int(j) for j in pending}
        with self.transaction():
            have = {r["job_id"]: r["before"] for r in self.db["site_factors"].rows}
            rows = [{"job_id": int(j), "before": int(have.get(int(j), before.get(int(j), 0))), "value": int(v),
                     "time": t} for j, v in set_now.items()]
            if rows:
                self.db["site_factors"].upsert_all(rows, pk="job_id")
            gone = [j for j in have if j not in keep and j not in set_now]
            for i in range(0, len(gone), 500):
                part = gone[i:i + 500]
                self.db.execute(f"delete from site_factors where job_id in ({','.join('?' * len(part))})", part)

    def factors_set(self) -> dict[int, tuple[int, int]]:
        """job -> (its SiteFactor before slurm-fair's first change, the one slurm-fair last set)."""
        return {int(r["job_id"]): (int(r["before"]), int(r["value"])) for r in self.db["site_factors"].rows}

    def forget_factors(self) -> None:
        with self.transaction():
            self.db.execute("delete from site_factors")

    def managed(self) -> set[str]:
        return {r["account"] for r in self.db["managed"].rows}

    def record_site_limits(self, limits: Mapping[str, Mapping[str, int]], now: float | None = None) -> list[str]:
        """Keep each account's GPU limits as they are before slurm-fair first manages it (every round records the
        accounts it plans, changed or not, left alone or not): an account already recorded keeps its first record.
        Returns the accounts recorded now."""
        have = {r["account"] for r in self.db["site_limits"].rows}
        t = time.time() if now is None else float(now)
        new = [{"account": a, "limits": _dumps({k: int(v) for k, v in sorted(row.items())}), "recorded": t}
               for a, row in sorted(limits.items()) if a not in have]
        if new:
            with self.transaction():
                self.db["site_limits"].insert_all(new)
        return [r["account"] for r in new]

    def site_limits(self) -> dict[str, dict[str, int]]:
        """account -> its GPU limits before slurm-fair first managed it ({}: none)."""
        return {r["account"]: {k: int(v) for k, v in (_loads(r["limits"]) or {}).items()}
                for r in self.db["site_limits"].rows}

    def forget_site_limits(self, accounts: Iterable[str]) -> None:
        """Drop the records of ``accounts`` (after a rollback restored them)."""
        names = sorted(set(accounts))
        if names:
            with self.transaction():
                self.db.execute(f"delete from site_limits where account in ({','.join('?' * len(names))})", names)

    def set_managed(self, accounts: Iterable[str]) -> None:
        """Replace the set of accounts whose limits slurm-fair has set."""
        data = [{"account": a} for a in sorted(set(accounts))]
        with self.transaction():
            self.db.execute("delete from managed")
            if data:
                self.db["managed"].insert_all(data)
