"""How far a job's throughput report is trusted (issue 21, "reports earn trust"). Pure: no I/O.

Everything in a job's comment is the job owner's to write, so a report is a claim. The rules:

* **Profiling run or job report** (:func:`report_source`). A report counts as ``measured`` only from a
  profiling run: a job with ``fair:profile`` in its comment that holds exactly one GPU (what
  ``profile submit`` submits) and, when ``[profiling] trusted_users`` lists users, whose Slurm user (set by
  Slurm, not by the job) is one of them. Nothing else about a profiling job is unforgeable: the token, the job
  name and the fixed batch script can all be copied by any user, and ``profile run`` runs the user's own
  command, so with an empty ``trusted_users`` a "measured" value is still the tenant's word, bounded below.
  Every other report is ``harvested`` (the job's own report).
* **Reference** (:func:`reference`): the bounds a report must fall in, from the first sample on. A
  harvested report is bounded by the trusted values of the same class and GPU type: the account's (then the
  site-wide) ``measured`` value (a profiling run), else a ``shipped`` one (stored, or the built-in table); a
  measured report by a ``shipped`` one. Never by ``set``/``imported`` values: those are what a tenant
  *claims*, the very values lie detection checks the reports against (and they may count in another unit).
  Bounds: ``[ref / outlier_factor, ref * outlier_factor]``. With no value of that type, the class's trusted
  values on *other* types and the shipped prior (the range of speed ratios between the two types over the
  shipped classes, widened by ``outlier_factor``) bound it; with neither (a new class), the site's known classes do
  (:func:`new_class_bounds`: their range on that type widened ``new_class_range``, and the ratio to the class's
  own values on other types within their ratios widened ``new_class_ratio``).
* **A sample** (:func:`take_sample`) outside the bounds, or (once the value has ``outlier_after`` samples)
  more than ``outlier_factor`` away from the value itself, is rejected. An accepted one updates the moving
  average as :func:`slurm_fair.profiling.core.update` does, and the result is then held within
  ``max_change_factor`` of every value it held during the last ``change_window`` — a sliding window (issue 30:
  a window that restarted let 100 → 200 → 299.5 → 400 happen within 24 h and a minute): 29 reports at 2.99x
  each move a value at most 2x in any 24 h. The values that can still bound it (the window's extremes, each
  kept while no later value passes it) are stored with the value (``window_history``).
* **Class names are per account** (issue 30): a report of any class name is stored under the reporting
  account, apart from every other account's values of the same name, and bounded only by its own, the
  site-wide and the shipped values (:func:`reference`). Refusing a name another account had values for let any
  account block another's profiling for good by reporting its class name first (issue 21's rule, removed).
* **Conflicts act** (:func:`usable_values`), ``[profiling] on_conflict``: ``flag`` (only shown),
  ``ignore-tenant`` (the account's harvested values of that class are not used), ``fallback`` (the
  account's set, imported and harvested values of that class are not used: its profiling runs', then the
  site-wide and shipped values are).
* **Measured speeds** (:func:`measured_only`, ``[profiling] measured_speeds``, on by default): an account's
  class that has a measured value (``measured`` or ``harvested``) on some GPU type gets its speeds from
  measurements only: the account's ``set``/``imported`` values of that class are not used on any type, so
  each type takes its measured value, else the site-wide or shipped one (else none: the daemon's rule for
  unprofiled types, and ``explore`` steers the class there). Policies normalize speeds to each class's
  slowest type, so a reported value on the slowest type alone (one no job of the class ran on, so no
  conflict can show) would scale every other type's speedup down: sandbagging, which non-cooperative OEF
  rewards (``slurm_fair.fairness.probe``). Only a class with no measurement at all runs on reported values.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..store.profiles import ProfileValue
from .core import MEASURED, REPORTED, Rules, effective, find_conflicts

ON_CONFLICT = ("flag", "ignore-tenant", "fallback")
# sources that bound a report of each kind, most trusted first
# (not set/imported: those are the tenant's claims lie detection checks the reports against, maybe in another unit)
REFERENCE_SOURCES = {"harvested": ("measured", "shipped"), "measured": ("shipped",)}


@dataclass(frozen=True)
class TrustRules:
    """The ``[profiling]`` knobs of this module (``from_config``: the config's values)."""

    outlier_factor: float = 3.0
    outlier_after: int = 1
    max_change_factor: float = 2.0
    change_window: float = 86400.0
    trusted_users: tuple[str, ...] = ()
    on_conflict: str = "flag"
    new_class_range: float = 100.0
    new_class_ratio: float = 3.0

    @classmethod
    def from_config(cls, p: Any) -> "TrustRules":
        return cls(outlier_factor=float(p.outlier_factor), outlier_after=int(p.outlier_after),
                   max_change_factor=float(p.max_change_factor), change_window=float(p.change_window),
                   trusted_users=tuple(p.trusted_users),
                   on_conflict=str(p.on_conflict), new_class_range=float(p.new_class_range),
                   new_class_ratio=float(p.new_class_ratio))


@dataclass(frozen=True)
class Bounds:
    """A report must lie in ``[lo, hi]``; ``why`` says where the bounds come from."""

    lo: float
    hi: float
    why: str


@dataclass(frozen=True)
class Verdict:
    """What one sample did: the stored value after it, ``accepted`` or ``rejected``, a message, and whether the
    change window held the value back (``limited``)."""

    row: dict | None  # the value's new fields; None: nothing to store (the first sample of a value was rejected)
    status: str
    message: str = ""
    limited: bool = False


def report_source(has_profile_token: bool, user: str, gpu_count: int, rules: TrustRules) -> tuple[str, str]:
    """(``measured`` | ``harvested``, why a job with ``fair:profile`` is not a profiling run, or "")."""
    if not has_profile_token:
        return "harvested", ""
    if gpu_count != 1:
        return "harvested", f"fair:profile on a job with {gpu_count} GPUs (a profiling run has one): a job report"
    if rules.trusted_users and user not in rules.trusted_users:
        return "harvested", f"fair:profile from user {user!r}, not in [profiling] trusted_users: a job report"
    return "measured", ""


def _values_of(values: Iterable[ProfileValue], cls: str) -> dict[tuple[str, str, str], float]:
    return {(r.account or "", r.gpu_type, r.source): float(r.throughput)
            for r in values if r.cls == cls and float(r.throughput or 0) > 0}


def _trusted(vals: Mapping[tuple[str, str, str], float], shipped: Mapping[tuple[str, str], float], cls: str,
             account: str, gpu_type: str, sources: tuple[str, ...]) -> tuple[float, str] | None:
    for src in sources:
        for acct in (account, ""):
            if (acct, gpu_type, src) in vals:
                return vals[(acct, gpu_type, src)], f"{src} value of {('account ' + acct) if acct else 'the site'}"
    if "shipped" in sources and (cls, gpu_type) in shipped:
        return shipped[(cls, gpu_type)], "the shipped table"
    return None


def type_ratio_ranges(shipped: Mapping[tuple[str, str], float]) -> dict[tuple[str, str], tuple[float, float]]:
    """(g, h) -> (lowest, highest) ratio throughput(g) / throughput(h) over the shipped classes measured on
    both types: how much faster one type can be than another (the shipped prior)."""
    by_class: dict[str, dict[str, float]] = {}
    for (c, g), v in shipped.items():
        if v > 0:
            by_class.setdefault(c, {})[g] = v
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for row in by_class.values():
        for g, vg in row.items():
            for h, vh in row.items():
                if g != h:
                    r = vg / vh
                    lo, hi = out.get((g, h), (r, r))
                    out[(g, h)] = (min(lo, r), max(hi, r))
    return out


def reference(values: Iterable[ProfileValue], shipped: Mapping[tuple[str, str], float], account: str,
              cls: str, gpu_type: str, source: str, rules: TrustRules, known: Known | None = None) -> Bounds | None:
    """The bounds a ``source`` report of (account, class, type) must fall in (module docstring), or None.
    ``known``: :func:`site_known` of the same values, made once for many reports."""
    f = rules.outlier_factor
    values = values if isinstance(values, list) else list(values)  # read again for a new class
    vals = _values_of(values, cls)
    sources = REFERENCE_SOURCES[source]
    same = _trusted(vals, shipped, cls, account, gpu_type, sources)
    if same is not None:
        v, why = same
        return Bounds(v / f, v * f, f"within {f:g}x of the {why} ({v:.6g})")
    ranges = type_ratio_ranges(shipped)
    spans: list[tuple[float, float]] = []
    whys = []
    types = sorted({g for (_a, g, _s) in vals} | {g for (c, g) in shipped if c == cls})
    for h in types:
        if h == gpu_type or (gpu_type, h) not in ranges:
            continue
        other = _trusted(vals, shipped, cls, account, h, sources)
        if other is None:
            continue
        v, why = other
        rlo, rhi = ranges[(gpu_type, h)]
        spans.append((v * rlo / f, v * rhi * f))
        whys.append(f"the {why} on {h} ({v:.6g}) times the shipped {gpu_type}/{h} ratios "
                    f"[{rlo:.3g}, {rhi:.3g}] widened {f:g}x")
    if not whys:
        return new_class_bounds(values, shipped, account, cls, gpu_type, rules, known, vals)
    lo, hi = max(a for a, _ in spans), min(b for _, b in spans)  # every other type's bound at once
    if lo > hi:  # the other types' values disagree with each other: any of their bounds
        lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
    return Bounds(lo, hi, "; ".join(whys))


def known_classes(values: Iterable[ProfileValue], shipped: Mapping[tuple[str, str], float],
                  rules: TrustRules) -> dict[tuple[str, str], float]:
    """(row key, type) -> throughput of the site's *known* classes: the shipped table, the stored ``shipped``
    values, every site-wide (empty account) value, and, when ``trusted_users`` lists users, the ``measured``
    values (then only they run profiling runs). A tenant's own values never widen the bounds of a new class
    (a class accepted at the edge would move the edge for the next one). Row key: the class for site-wide and
    shipped values (a stored one over the table's), ``account/class`` for an account's measured ones."""
    out = {(c, g): float(v) for (c, g), v in shipped.items() if v > 0}
    for r in values:
        v = float(r.throughput or 0)
        if v <= 0 or not math.isfinite(v):
            continue
        if not r.account and r.source == "shipped":
            out[(r.cls, r.gpu_type)] = v
    for r in values:
        v = float(r.throughput or 0)
        if v <= 0 or not math.isfinite(v):
            continue
        if not r.account and r.source != "shipped":
            out[(r.cls, r.gpu_type)] = v
        elif r.account and r.source == "measured" and rules.trusted_users:
            out[(f"{r.account}/{r.cls}", r.gpu_type)] = v
    return out


@dataclass(frozen=True)
class Known:
    """The site's known classes (:func:`known_classes`) with their ranges per type and ratios between types,
    made once per harvest (:func:`site_known`) rather than once per report."""

    values: Mapping[tuple[str, str], float]
    on_type: Mapping[str, tuple[float, float]]  # type -> (lowest, highest) known value
    ratios: Mapping[tuple[str, str], tuple[float, float]]  # type_ratio_ranges of the known classes
    every_ratio: tuple[float, float] | None  # the lowest and highest ratio over every pair of types


def site_known(values: Iterable[ProfileValue], shipped: Mapping[tuple[str, str], float],
               rules: TrustRules) -> Known:
    known = known_classes(values, shipped, rules)
    on_type: dict[str, tuple[float, float]] = {}
    for (_c, g), v in known.items():
        lo, hi = on_type.get(g, (v, v))
        on_type[g] = (min(lo, v), max(hi, v))
    ratios = type_ratio_ranges(known)
    every = [r for pair in ratios.values() for r in pair]
    return Known(known, on_type, ratios, (min(every), max(every)) if every else None)


def new_class_bounds(values: Iterable[ProfileValue], shipped: Mapping[tuple[str, str], float], account: str,
                     cls: str, gpu_type: str, rules: TrustRules, known: Known | None = None,
                     of_class: Mapping[tuple[str, str, str], float] | None = None) -> Bounds | None:
    """The bounds of a report of a class with no trusted value of its own (issue 41: a new class's first
    reports were unbounded; V100 = 9e6 and K80 = 2e-6 were accepted and moved an oef-coop share from 2.67 to
    5.33). Two bounds, both met:

    * **range**: the lowest and highest value of the site's :func:`known_classes` on ``gpu_type``, widened by
      ``new_class_range`` (with no known class on that type: their values on every type);
    * **ratio**: for each other type where the account's class has a measured or harvested value of its own,
      that value times the range of ratios ``gpu_type``/other type over the known classes measured on both,
      widened by ``new_class_ratio`` (with no known class on both: the ratios over every pair of types). The
      shares follow the speed *ratios* between types, so this is the bound that counts for fairness.

    None only when the site knows no class at all. ``known``: :func:`site_known` of the same values and shipped
    table, made once for many reports; ``of_class``: ``_values_of(values, cls)``, when the caller has it."""
    values = values if isinstance(values, list) else list(values)
    k = known if known is not None else site_known(values, shipped, rules)
    if not k.values:
        return None
    fr, fq = rules.new_class_range, rules.new_class_ratio
    if gpu_type in k.on_type:
        (vlo, vhi), where = k.on_type[gpu_type], f"the known classes on {gpu_type}"
    else:
        vlo, vhi = min(a for a, _ in k.on_type.values()), max(b for _, b in k.on_type.values())
        where = f"the known classes on every type (none is known on {gpu_type})"
    lo, hi = vlo / fr, vhi * fr
    why = f"{where} ({vlo:.6g} to {vhi:.6g}) widened {fr:g}x"
    ratios, every = k.ratios, k.every_ratio
    own: dict[str, float] = {}
    for (a, h, src), v in (of_class if of_class is not None else _values_of(values, cls)).items():
        # its own measured, else harvested, values on the other types
        if a == account and h != gpu_type and src in MEASURED and math.isfinite(v) and (
                h not in own or src == "measured"):
            own[h] = v
    spans, whys = [], []
    for h, v in sorted(own.items()):
        if (gpu_type, h) in ratios:
            rlo, rhi = ratios[(gpu_type, h)]
            src = f"the known classes' {gpu_type}/{h} ratios"
        elif every is not None:
            rlo, rhi = every
            src = f"the known classes' ratios between any two types (none is known on {gpu_type} and {h})"
        else:
            continue
        spans.append((v * rlo / fq, v * rhi * fq))
        whys.append(f"its own value on {h} ({v:.6g}) times {src} [{rlo:.3g}, {rhi:.3g}] widened {fq:g}x")
    if spans:
        slo, shi = max(a for a, _ in spans), min(b for _, b in spans)
        if slo > shi:  # its own values on the other types disagree with each other: any of their bounds
            slo, shi = min(a for a, _ in spans), max(b for _, b in spans)
        if max(lo, slo) <= min(hi, shi):
            lo, hi = max(lo, slo), min(hi, shi)
            why += "; " + "; ".join(whys)
    return Bounds(lo, hi, f"a class with no trusted value: {why}")


def take_sample(old: ProfileValue | None, value: float, now: float, bounds: Bounds | None,
                rules: Rules, trust: TrustRules) -> Verdict:
    """One sample applied to the stored value ``old`` (None = none yet) under the module docstring's rules."""
    n = int(old.samples or 0) if old is not None else 0
    rejected = int(old.rejected or 0) if old is not None else 0
    kept = ({"throughput": old.throughput, "samples": n, "rejected": rejected + 1, "updated": old.updated,
             "window_start": old.window_start, "window_base": old.window_base, "window_history": old.window_history}
            if old is not None else None)
    if bounds is not None and not bounds.lo <= value <= bounds.hi:
        return Verdict(kept if n else None, "rejected",
                       f"{value:.6g} steps/s is outside [{bounds.lo:.6g}, {bounds.hi:.6g}]: {bounds.why}")
    f = rules.outlier_factor
    if old is not None and n >= rules.outlier_after and n > 0:
        avg = float(old.throughput)
        if value > avg * f or value < avg / f:
            return Verdict(kept, "rejected", f"{value:.6g} steps/s is more than {f:g}x away from "
                                             f"the value {avg:.6g}")
    if old is None or n == 0:
        return Verdict({"throughput": float(value), "samples": 1, "rejected": rejected, "updated": float(now),
                        "window_start": float(now), "window_base": float(value),
                        "window_history": "[]"}, "accepted")
    avg = float(old.throughput)
    w = max(rules.average_weight, 1.0 / (n + 1))
    new = avg + w * (value - avg)
    held_then = window_values(old, now, trust.change_window)  # every value held in the last window, avg included
    m = trust.max_change_factor
    lo, hi = max(held_then) / m, min(held_then) * m
    held = min(max(new, lo), hi)
    msg = "" if held == new else (f"{value:.6g} steps/s would move the value to {new:.6g}; held at {held:.6g} "
                                  f"({m:g}x of the values it held in the last {trust.change_window:g} s, "
                                  f"{min(held_then):.6g} to {max(held_then):.6g})")
    hist = _extremes(_history(old, now, trust.change_window) + [(float(now), avg)])  # avg was held until now
    return Verdict({"throughput": held, "samples": n + 1, "rejected": rejected, "updated": float(now),
                    "window_start": hist[0][0], "window_base": hist[0][1],
                    "window_history": json.dumps([[t, v] for t, v in hist])}, "accepted", msg, held != new)


def _history(old: ProfileValue, now: float, window: float) -> list[tuple[float, float]]:
    """(time until which it was held, value) of the earlier values of a stored row held after ``now - window``
    (``window_history``; a row from before it: its window's base, held until its last update at the latest)."""
    try:
        raw = json.loads(old.window_history or "null")
        pts = [(float(t), float(v)) for t, v in raw] if isinstance(raw, list) else None
    except (TypeError, ValueError):
        pts = None
    if pts is None:
        pts = ([(float(old.updated or now), float(old.window_base))]
               if old.window_base is not None else [])
    return [(t, v) for t, v in pts if t > now - window and math.isfinite(v) and v > 0]


def window_values(old: ProfileValue, now: float, window: float) -> list[float]:
    """Every value a stored row held at some time in ``(now - window, now]``: the earlier ones it keeps
    (:func:`_history`) and the current one."""
    return [v for _t, v in _history(old, now, window)] + [float(old.throughput)]


def _extremes(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Of (held until, value) points, oldest first, the ones that can still bound a later value: a point with a
    later-ending one at least as high and a later-ending one at least as low is never the window's maximum or
    minimum again (those stay in the window longer)."""
    out: list[tuple[float, float]] = []
    hi = lo = None
    for t, v in reversed(pts):
        if hi is None or v > hi or v < lo:
            out.append((t, v))
        hi = v if hi is None else max(hi, v)
        lo = v if lo is None else min(lo, v)
    return out[::-1]


def usable_values(values: Iterable[ProfileValue], margin: float,
                  on_conflict: str) -> tuple[list[ProfileValue], list[dict]]:
    """(the stored values the policies may use, the conflicts acted on) under ``on_conflict`` (module
    docstring); ``flag`` keeps every value."""
    rows = list(values)
    if on_conflict not in ON_CONFLICT:
        raise ValueError(f"on_conflict must be one of {', '.join(ON_CONFLICT)} (got {on_conflict!r})")
    conflicts = find_conflicts(rows, margin)
    if on_conflict == "flag" or not conflicts:
        return rows, []
    hit = {(c["account"], c["class"]) for c in conflicts}
    drop = ("harvested",) if on_conflict == "ignore-tenant" else ("harvested", "set", "imported")
    kept = [r for r in rows if not ((r.account or "", r.cls) in hit and r.source in drop)]
    return kept, conflicts


def measured_only(values: Iterable[ProfileValue]) -> tuple[list[ProfileValue], list[ProfileValue]]:
    """(the values kept, the reported ones dropped) under the measured-speeds rule (module docstring): every
    ``set``/``imported`` value of an (account, class) that has a ``measured`` or ``harvested`` value on any type
    is dropped. Site-wide values (empty account) are the site's, not a tenant's: kept."""
    rows = list(values)
    measured = {(r.account, r.cls) for r in rows if r.account and r.source in MEASURED}
    kept, dropped = [], []
    for r in rows:
        hit = bool(r.account) and (r.account, r.cls) in measured and r.source in REPORTED
        (dropped if hit else kept).append(r)
    return kept, dropped


def effective_values(values: Iterable[ProfileValue], margin: float, on_conflict: str,
                     prefer_measured: bool, measured_speeds: bool = False) -> tuple[list[ProfileValue], list[dict]]:
    """(one value per (account, class, type) as :func:`slurm_fair.profiling.core.effective` picks it among the
    usable values, the conflicts acted on); ``measured_speeds``: :func:`measured_only` first."""
    rows, acted = usable_values(values, margin, on_conflict)
    if measured_speeds:
        rows = measured_only(rows)[0]
    return effective(rows, prefer_measured), acted
