"""The simulated ``job_submit.lua``: the published type map as the script reads it, and its choice of a GPU type
for an untyped request (:class:`SubmitMap`, used by :class:`.cluster.SimCluster`). It mirrors the script's rules
(docs/typing.md): rooms counted per publication (each ``set`` without the previous ``map_id`` is a new map, as
``#@map ID T`` is in the daemon's file: the same content from a later snapshot is a new ``T``), the shared free pool (``#@free``), class lines with their slow types
(``TYPE:0``) and the account's untyped room (``#@untyped``). In simulated time the snapshot and the publication
are one instant, so nothing handed out carries over from one map to the next."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..daemon.plan import DEFAULT_TARGET

ALL = "#all"  # the key under which every line's GPUs per type are counted against the pool
LOOSE = ""  # the key, within a line's counts, of the GPUs left untyped


class SubmitMap:
    """The last published map and what was handed out against it."""

    def __init__(self) -> None:
        self.lines: dict[str, list[tuple[str, int | None]]] = {}  # account, '*' or class line -> [(type, room)]
        self.blocks: dict[str, dict[str, int]] = {}  # line -> type -> largest job that fits now
        self.tiers: dict[str, dict[str, int]] = {}  # line -> type -> tier (class lines reorder within)
        self.untyped: dict[str, int] = {}  # account -> GPUs its jobs may be left untyped (#@untyped)
        self.pool: dict[str, int] = {}  # type -> GPUs idle for every account together (#@free)
        self.slow: dict[str, set[str]] = {}  # class line -> types slow for the class (TYPE:0)
        self.soon: dict[str, list[tuple[int, float]]] = {}  # type -> [(job size, time it could start)] (#@soon)
        self.speeds: dict[str, dict[str, int]] = {}  # class line -> type -> per mille of its best (#@speed)
        self.spent: dict[str, dict[str, int]] = {}  # line (or ALL) -> type (or LOOSE) -> GPUs handed out
        self.map_id: str | None = None

    def set(self, targets: Mapping[str, Any], map_id: str | None = None) -> None:
        """A publication: ``{line: plan.Target}``, as the round records it (``{"types": [[type, room], ...],
        "blocks":, "untyped":, "slow":, "pool":}``) or plainly ``{account: type}`` / ``(type, reason)``. Another
        ``map_id`` than the last, or none, starts with nothing spent."""
        self.lines, self.blocks, self.tiers, self.untyped, self.pool, self.slow = {}, {}, {}, {}, {}, {}
        self.soon, self.speeds = {}, {}
        for a, v in targets.items():
            get = (lambda k, d=None, v=v: getattr(v, k, d)) if hasattr(v, "types") else \
                  (lambda k, d=None, v=v: v.get(k, d)) if isinstance(v, Mapping) else None
            if get is None:
                if isinstance(v, str) or (isinstance(v, (list, tuple)) and v):
                    self.lines[a] = [(str(v if isinstance(v, str) else v[0]), None)]
                continue
            types = list(get("types", ()) or ())
            self.lines[a] = [(str(t), None if n is None else int(n)) for t, n in types]
            self.blocks[a] = {str(t): int(b) for t, b in (get("blocks") or {}).items()}
            if get("tiers"):
                self.tiers[a] = {str(t): int(k) for (t, _n), k in zip(types, get("tiers"))}
            if int(get("untyped", 0) or 0) > 0 and a != DEFAULT_TARGET and "/" not in a:
                self.untyped[a] = int(get("untyped"))
            if get("slow"):
                self.slow[a] = {str(t) for t in get("slow")}
            self.pool = self.pool or {str(t): int(n) for t, n in (get("pool") or {}).items()}
            if get("speeds"):
                self.speeds[a] = {str(t): int(v) for t, v in get("speeds").items()}
            self.soon = self.soon or {str(t): sorted((int(n), float(at)) for n, at in row.items())
                                      for t, row in (get("soon") or {}).items()}
        if map_id is None or map_id != self.map_id:
            self.spent = {}
        self.map_id = map_id

    def choose(self, account: str, gpus: int, cls: str, speed: Mapping[str, float], limit: float | None = None,
               now: float = 0.0) -> str | None:
        """The script's type for an untyped job of ``gpus`` GPUs of class ``cls`` (``speed``: its throughput per
        type; types it cannot run on are skipped, as a user would; ``limit``: its time limit in seconds, ``now``:
        the daemon's clock, for :meth:`by_completion`). None: no line, no type the class can run on,
        or left untyped within the account's ``#@untyped`` room (no type has room; its class line keeps every
        type of the map and marks none slow; it runs on each). No type has room and it is not left untyped: the
        type of its line expected to start it first (:meth:`first_start`), else the line's first type."""
        key = account if account in self.lines else DEFAULT_TARGET
        line = list(self.lines.get(key, ()))
        class_key = next((k for k in (f"{account}/{cls}", f"{DEFAULT_TARGET}/{cls}") if self.lines.get(k)), "")
        order = [t for t, _n in self.lines.get(class_key, ())]
        if order:  # the class line: its order of the line's types, within each tier of the line
            rooms, tier, rank = dict(line), self.tiers.get(key, {}), {t: i for i, t in enumerate(order)}
            line = sorted(((t, rooms[t]) for t in order if t in rooms),
                          key=lambda e: (tier.get(e[0], 0), rank[e[0]])) or line
        line = [(t, room) for t, room in line if speed.get(t, 0) > 0]
        if not line:
            return None
        spent, every = self.spent.setdefault(key, {}), self.spent.setdefault(ALL, {})
        block = self.blocks.get(key, {})
        pick = next((t for t, room in line if (room is None or spent.get(t, 0) + gpus <= room)
                     and gpus <= block.get(t, gpus)
                     and (t not in block or t not in self.pool or every.get(t, 0) + gpus <= self.pool[t])), None)
        if pick is not None and class_key in self.speeds:
            pick = self.by_completion(self.speeds[class_key], pick, gpus, float(limit) if limit else None, now,
                                      lambda t: t in self.pool and every.get(t, 0) + gpus <= self.pool[t]) or pick
        loose = self.untyped.get(account, 0) if key == account else 0
        if pick is None and loose and spent.get(LOOSE, 0) + gpus <= loose:
            mapped = {t for k, v in self.lines.items() if "/" not in k for t, _n in v}
            if (mapped <= (set(order) if order else mapped) and not mapped & self.slow.get(class_key, set())
                    and all(speed.get(t, 0) > 0 for t in mapped)):
                spent[LOOSE] = spent.get(LOOSE, 0) + gpus
                return None
        if pick is None:
            pick = self.first_start(line, gpus, now, lambda t: t in self.pool and every.get(t, 0) + gpus <= self.pool[t],
                                    self.slow.get(class_key, set())) or line[0][0]
        spent[pick] = spent.get(pick, 0) + gpus
        every[pick] = every.get(pick, 0) + gpus
        return pick

    def first_start(self, line: list[tuple[str, int | None]], gpus: int, now: float,
                    idle: Callable[[str], bool] | None = None, slow: set[str] | frozenset[str] = frozenset()) -> str | None:
        """The script's ``SF.first_start``: of the types of ``line`` (in its order), the one whose ``#@soon`` says a
        job of ``gpus`` GPUs starts first (the first entry of at least that size; the first of equal ones). A
        start now counts only where ``idle(t)`` — the map's ``#@free`` room less what it handed out — still has
        room for it (earlier submissions took those GPUs: when it starts there is not known). Types ``slow`` for
        the job's class (its class line's ``TYPE:0``: under half its best speed) only when no other type has
        such a start. None when no type of the line has one."""
        fast = [(t, n) for t, n in line if t not in slow]
        if slow and fast and len(fast) < len(line):
            return self.first_start(fast, gpus, now, idle) or self.first_start(line, gpus, now, idle)
        best: tuple[float, str] | None = None
        for t, _room in line:
            at = next((max(0.0, a - now) for n, a in self.soon.get(t, ()) if n >= gpus), None)
            if at == 0.0 and not (idle is not None and idle(t)):
                continue
            if at is not None and (best is None or at < best[0]):
                best = (at, t)
        return best[1] if best else None

    def by_completion(self, speeds: Mapping[str, int], pick: str, gpus: int, limit: float | None,
                      now: float, idle: Callable[[str], bool] | None = None) -> str | None:
        """The script's ``SF.by_completion``: another type for a job that got ``pick`` by room, where the class
        runs at under half its best speed there and the other type is expected to finish it sooner (its
        ``#@soon`` start plus ``limit`` × the speed ratio, against ``limit`` from ``pick``'s own start; without a
        time limit, ``limit`` None: the fastest type that can start it now — ``#@soon`` says so and ``idle(t)``,
        the map's ``#@free`` room less what it handed out, has room for it); types with a speed and a ``#@soon``
        line, by name, the first of equal ones; None: keep ``pick``."""
        names = sorted(t for t, v in speeds.items() if v > 0 and t in self.soon)
        best = max((speeds[t] for t in names), default=0)
        sp = speeds.get(pick, 0)
        if sp <= 0 or sp * 2 >= best:
            return None

        def start(t: str) -> float | None:
            return next((max(0.0, at - now) for n, at in self.soon.get(t, ()) if n >= gpus), None)

        if limit is None:  # nothing to compare: only where it starts now and runs faster, whatever its length
            now_ok = [t for t in names if t != pick and speeds[t] > sp and start(t) == 0.0 and idle is not None
                      and idle(t)]
            return max(now_ok, key=lambda t: speeds[t], default=None)  # (max keeps the first of equal ones)
        own = start(pick)
        cost, alt = (own or 0.0) + limit, None
        for t in names:
            s = start(t)
            if t != pick and speeds[t] > sp and s is not None and s + limit * sp / speeds[t] < cost:
                cost, alt = s + limit * sp / speeds[t], t
        return alt
