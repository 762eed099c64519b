"""Prometheus metrics of the daemon: ``GET /metrics`` on ``metrics.listen`` (docs/metrics-reports.md, "Metrics (Prometheus)").

Two parts:

* :func:`families` (pure): the metric families, as plain data, from what the rounds recorded
  (:class:`Inputs`: the last good round with its placements and details, the newest finished round, round and
  preemption counts). :func:`read_inputs` reads those from the store.
* :class:`Exporter` (I/O): a prometheus_client collector in a *private* ``CollectorRegistry`` served by
  prometheus_client's threaded HTTP server.

Why a snapshot refreshed after each round, not a collector that reads the store at scrape time: the values
change only when a round is recorded, so reading them once per round (in the daemon's own thread, on its own
connection, right after the round) is all the work there is; a scrape only takes the last snapshot under a
lock. A scrape therefore never opens the database, never waits for a round's write transaction and never
decodes the round's details (megabytes at 1000 accounts) again, however often Prometheus asks; and a
failed scrape cannot touch a round. The daemon also refreshes once at start, so a restarted daemon serves
the last recorded round at once.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from ..config import Config
from ..fairness.live import LiveRealized
from ..records import RoundDetails
from ..store import ROUND_STATUSES, Placement, Round, Store
from .plan import NEVER_MANAGED
from .preemption.store import PreemptionStore, PreemptionTotal
from .realized_window import METRICS_WINDOW_S, read as read_realized

PREFIX = "slurm_fair_"
# statuses of finished rounds (a round is "running" only while it runs, or until the next one marks it error)
FINISHED_STATUSES = tuple(s for s in ROUND_STATUSES if s != "running")


@dataclass(frozen=True)
class Family:
    """One metric family: ``kind`` gauge or counter (the name of a counter ends in ``_total``)."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()
    samples: tuple[tuple[tuple[str, ...], float], ...] = ()


@dataclass(frozen=True)
class Inputs:
    """What the metrics are computed from (all as the store returns it)."""

    good: Round | None = None  # last ok/dry-run round (Store.round()), details decoded
    placements: Sequence[Placement] = ()  # that round's placements
    latest: Round | None = None  # newest finished round of any status (Store.last_finished_round())
    round_counts: Mapping[str, int] = field(default_factory=dict)  # status -> rounds
    preemptions: Sequence[PreemptionTotal] = ()  # PreemptionStore.totals()
    realized: LiveRealized | None = None  # realized fairness of the last METRICS_WINDOW_S (None: not computed)
    realized_seconds: float | None = None  # what computing it took


def read_inputs(store: Store, cfg: Config | None = None, now: float | None = None,
                with_realized: bool = True) -> Inputs:
    """Everything :func:`families` needs, read from the store (the caller's thread and connection); with
    ``with_realized``, realized fairness of the last :data:`METRICS_WINDOW_S` seconds up to ``now`` (a failure
    leaves it out: it never costs the other series)."""
    good = store.round()
    realized: LiveRealized | None = None
    seconds = None
    if with_realized:
        t = time.perf_counter()
        end = time.time() if now is None else now
        try:
            realized = read_realized(store, end - METRICS_WINDOW_S, end, cfg)
        except Exception:  # noqa: BLE001 - no round or job yet, or a store that cannot say: no realized series
            realized = None
        seconds = time.perf_counter() - t
    return Inputs(good=good, placements=store.placements(good.id) if good else [],
                  latest=store.last_finished_round(), round_counts=store.round_counts(),
                  preemptions=PreemptionStore(store).totals(), realized=realized, realized_seconds=seconds)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _per_type(name: str, help: str, rows: Mapping[tuple[str, str], Any]) -> Family:
    samples = tuple(((a, g), float(v)) for (a, g), v in sorted(rows.items()) if _num(v) is not None)
    return Family(PREFIX + name, "gauge", help, ("account", "gpu_type"), samples)


def families(inp: Inputs) -> list[Family]:
    """The metric families (pure). Per-account series come from the last good round (ok or dry-run: the one
    whose limits are in force, as ``slurm-fair status`` shows), every account it managed and every GPU type
    of its capacity, so a series drops to 0 instead of vanishing; round timings and the status come from the
    newest finished round of any status."""
    d = RoundDetails.of_round(inp.good)
    capacity: Mapping[str, Any] = d.capacity
    accounts = sorted(set(d.accounts) | {p.account for p in inp.placements})
    types = sorted(set(capacity) | {p.gpu_type for p in inp.placements})
    ideal, real, limit = {}, {}, {}
    for p in inp.placements:
        key = (p.account, p.gpu_type)
        ideal[key], real[key], limit[key] = p.ideal, p.real, p.limit
    devs = d.deviations
    deviation = {(a, g): (devs.get(a) or {}).get(g, 0.0) for a in accounts for g in types}
    in_use = d.in_use
    usage = {(a, g): 0 for a in accounts for g in types}
    for a, row in in_use.items():
        for g, n in (row or {}).items():
            if a not in NEVER_MANAGED:  # also accounts it did not manage, and "?" (a running job of unknown type)
                usage[(a, g)] = n
    pending_d = d.pending_gpus
    pending = {a: pending_d.get(a, 0) for a in accounts} | {a: v for a, v in pending_d.items() if a not in NEVER_MANAGED}

    out = [
        _per_type("share_gpus", "Ideal (fractional) GPUs of the type the policy gave the account in the last good "
                  "round.", ideal),
        _per_type("rounded_share_gpus", "The share rounded to whole GPUs (ideal + carried deviation, rounded) in "
                  "the last good round.", real),
        _per_type("limit_gpus", "GrpTRES gres/gpu:<type> limit the last good round planned for the account.",
                  limit),
        _per_type("usage_gpus", "GPUs held by the account's running jobs at the last good round's observation "
                  '(gpu_type "?": type unknown).', usage),
        _per_type("deviation_gpus", "Deviation carried to the next round (ideal minus rounded, accumulated) after "
                  "the last good round.", deviation),
        Family(PREFIX + "pending_gpus", "gauge", "GPUs requested by the account's pending jobs that could start "
               "(its demand) at the last good round's observation.", ("account",),
               tuple(((a,), float(v)) for a, v in sorted(pending.items()) if _num(v) is not None)),
        Family(PREFIX + "not_demand_gpus", "gauge", "GPUs of the account's pending jobs that could not start at "
               "the last good round's observation and are not demand (reason: held, dependency, begin-time, "
               "reservation).", ("account", "reason"),
               tuple(((a, k), float(v)) for a, row in sorted(d.not_demand.items())
                     if a not in NEVER_MANAGED and isinstance(row, dict)
                     for k, v in sorted(row.items()) if _num(v) is not None)),
        Family(PREFIX + "capacity_gpus", "gauge", "Usable GPUs of the type at the last good round's observation.",
               ("gpu_type",), tuple(((g,), float(v)) for g, v in sorted(capacity.items()) if _num(v) is not None)),
    ]
    good_done = _num(inp.good.finished if inp.good else None)
    out.append(Family(PREFIX + "shares_round_timestamp_seconds", "gauge",
                      "Unix time the last good round (the one the per-account series come from) finished.",
                      (), (((), good_done),) if good_done is not None else ()))

    latest = inp.latest
    status = latest.status if latest else None
    out.append(Family(PREFIX + "round_status", "gauge",
                      "1 for the status of the newest finished round, 0 for the others (ok, dry-run, "
                      "unreachable, solver-failed, error).", ("status",),
                      tuple(((s,), 1.0 if s == status else 0.0) for s in FINISHED_STATUSES)))
    started, finished = (_num(latest.started), _num(latest.finished)) if latest else (None, None)
    solve = _num(latest.solve_seconds) if latest else None
    out += [
        Family(PREFIX + "round_seconds", "gauge", "Wall-clock seconds of the newest finished round.", (),
               (((), finished - started),) if started is not None and finished is not None else ()),
        Family(PREFIX + "solve_seconds", "gauge", "Seconds the policy's solve took in the newest finished round.",
               (), (((), solve),) if solve is not None else ()),
        Family(PREFIX + "last_round_timestamp_seconds", "gauge", "Unix time the newest finished round finished.",
               (), (((), finished),) if finished is not None else ()),
        Family(PREFIX + "rounds_total", "counter", "Finished rounds recorded in the database, by status.",
               ("status",), tuple(((s,), float(inp.round_counts.get(s, 0))) for s in FINISHED_STATUSES)),
    ]
    pre = sorted(inp.preemptions, key=lambda r: (r.account, r.gpu_type))
    out += [
        Family(PREFIX + "preemptions_total", "counter", "Preemptions started (checkpoint signals sent, or that "
               "failed) of the account's jobs, by the GPU type it was over its limit on.", ("account", "gpu_type"),
               tuple(((r.account, r.gpu_type), float(r.started or 0)) for r in pre)),
        Family(PREFIX + "preemption_requeues_total", "counter", "Preempted jobs requeued after their grace.",
               ("account", "gpu_type"), tuple(((r.account, r.gpu_type), float(r.requeued or 0)) for r in pre)),
        Family(PREFIX + "preemptions_open", "gauge", "Preempted jobs signalled and in their grace now (as of the "
               "newest round).", ("account", "gpu_type"),
               tuple(((r.account, r.gpu_type), float(r.open or 0)) for r in pre)),
    ]
    return out + realized_families(inp.realized, inp.realized_seconds)


REALIZED_EVERY_S = 600.0  # the realized series are computed again at most this often (one refresh a round)
WINDOW_HELP = f"over the last {METRICS_WINDOW_S / 3600:g} h (docs/realized-fairness.md)"


def realized_families(live: LiveRealized | None, seconds: float | None = None) -> list[Family]:
    """Realized fairness per account over the last :data:`METRICS_WINDOW_S` seconds (no samples when it could
    not be computed; an account's series without a value, e.g. no backlog episode, is left out)."""
    accounts = live.as_json()["accounts"] if live is not None else {}

    def per_account(name: str, help: str, pick: Any) -> Family:
        rows = [((a,), _num(pick(v))) for a, v in sorted(accounts.items())]
        return Family(PREFIX + name, "gauge", help + " " + WINDOW_HELP + ".", ("account",),
                      tuple((k, v) for k, v in rows if v is not None))

    envy = live.realized.envy_share if live is not None else None
    return [
        per_account("realized_share_ratio", "Realized share ratio: speed-weighted GPU-time the account received "
                    "while backlogged over its sharing-incentive bundle's, time-weighted over its backlog episodes,",
                    lambda v: v["ratio"]),
        per_account("realized_worst_episode_ratio", "Realized share ratio of the account's worst backlog episode",
                    lambda v: v["worst_episode_ratio"]),
        per_account("realized_backlogged_seconds", "Seconds the account was backlogged (a job that fits its share "
                    "pending)", lambda v: v["backlogged_s"]),
        per_account("realized_time_to_fair_share_seconds", "Longest time to fair share (to 95 % of its "
                    "bundle's rate) of the account's backlog episodes the window did not cut",
                    lambda v: v["time_to_fair_share"]["max"]),
        per_account("realized_envy_share", "Share of the account's pair-time (against each other account, both "
                    "with jobs in the system) in which it was backlogged and would rather hold the other's GPUs, "
                    "scaled by weights, by more than 5 %,", lambda v: v["envy_share"]),
        per_account("realized_throughput_share", "The account's share of the speed-weighted GPU-time all accounts "
                    "received", lambda v: v["throughput_share"]),
        per_account("realized_mean_jct_seconds", "Mean job completion time (last end - submit) of the account's "
                    "jobs that ended", lambda v: v["mean_jct"]),
        Family(PREFIX + "realized_envy_share_cluster", "gauge", "Envious pair-time over compared pair-time (both "
               "accounts with jobs in the system), every account, " + WINDOW_HELP + ".", (), (((), envy),) if envy is not None else ()),
        Family(PREFIX + "realized_compute_seconds", "gauge", "Seconds realized fairness took to compute when it "
               f"last was (after a round, at most every {REALIZED_EVERY_S / 60:g} min; never per scrape).", (),
               (((), seconds),) if seconds is not None else ()),
    ]


# ------------------------------------------------------------------------------------------------ I/O


class Exporter:
    """A prometheus_client collector holding the last snapshot of :func:`families`, and its HTTP server.

    ``update`` (the daemon's thread) replaces the snapshot; ``collect`` (a scrape's thread) reads it; both
    under one lock, so a scrape sees one round's values, never a mix."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry

        self._lock = threading.Lock()
        self._families: list[Any] = []  # prometheus_client metric families, built by update()
        self.registry = CollectorRegistry(auto_describe=False)  # private: no process/platform/GC collectors
        self.registry.register(self)
        self._httpd: Any = None
        self._thread: threading.Thread | None = None
        self._realized: tuple[float, LiveRealized | None, float | None] | None = None  # (when, value, seconds)

    def update(self, fams: Sequence[Family]) -> None:
        """Replace the snapshot; the prometheus_client objects are built here, once per round, not per scrape."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        built = []
        for f in fams:
            cls = CounterMetricFamily if f.kind == "counter" else GaugeMetricFamily
            m = cls(f.name, f.help, labels=list(f.labels))
            for labels, value in f.samples:
                m.add_metric(list(labels), value)
            built.append(m)
        with self._lock:
            self._families = built

    def refresh(self, store: Store, cfg: Config | None = None, now: float | None = None) -> None:
        """Read the store and replace the snapshot (raises what the store raises; the old snapshot stays);
        ``cfg``: the daemon's (realized fairness reads the profile values as its rounds do). Realized fairness is
        computed again only when :data:`REALIZED_EVERY_S` have passed since it last was (its sweep over a day of
        jobs is the one part of a refresh whose cost grows with the cluster); between, its last values stay."""
        now = time.time() if now is None else now
        last = self._realized
        if last is None or now - last[0] >= REALIZED_EVERY_S:
            inp = read_inputs(store, cfg, now)
            self._realized = (now, inp.realized, inp.realized_seconds)
        else:
            inp = dataclasses.replace(read_inputs(store, cfg, now, with_realized=False), realized=last[1],
                                      realized_seconds=last[2])
        self.update(families(inp))

    def describe(self) -> list:
        return []  # metric names are fixed by families(); nothing to check at registration

    def collect(self) -> Iterator[Any]:
        with self._lock:
            fams = self._families  # replaced whole by update(), never changed in place: safe to read unlocked
        yield from fams

    def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` on host:port in a daemon thread; returns the port bound (``port`` 0: a free one).
        Raises OSError when the address cannot be bound or resolved."""
        from prometheus_client import start_http_server

        self._httpd, self._thread = start_http_server(port, addr=host, registry=self.registry)
        return int(self._httpd.server_port)

    @property
    def port(self) -> int | None:
        """The port being served, None when not serving."""
        return None if self._httpd is None else int(self._httpd.server_port)

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
