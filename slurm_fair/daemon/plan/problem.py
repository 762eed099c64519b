"""The sharing problem of a round: profiles looked up per (account, class, type), tenants and weights. Pure.

* **Throughput** (:func:`lookup_throughput`), per GPU type: the account's own profile of the class, else the
  site-wide profile (empty account), else the shipped defaults; a type still unknown for a class that has
  some profile gets the class's *slowest* known throughput (``assumed``: never overstates a speedup); a
  class with no profile at all runs at 1.0 everywhere (``unprofiled``: homogeneous GPUs).
* **Problem** (:func:`build_problem`): tenant = the account (or ``tenants.map``), weight =
  ``tenants.weights`` or the sum of the tenant's accounts' fair-share Shares (0 counts as 1); one virtual
  user per (account, class) with demand (total GPUs and ``type_demand`` per GPU type, so no policy gives a
  class a share of a type beyond what its jobs request there; a type none of its jobs requests is then
  unusable for the class: no throughput there, not its slowest type); GPU types = usable GPUs per type on
  nodes in managed partitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ...config import Config
from ...cluster.base import Snapshot
from ...model import DEFAULT_REMAINING, ClassJob, JobClass, Problem, Tenant
from ...store import ProfileValue
from .demand import ClassDemand, usable_capacity

# sources of a throughput value, from most to least specific
SRC_ACCOUNT = "account"
SRC_SITE = "site"
SRC_SHIPPED = "shipped"
SRC_ASSUMED = "assumed"
SRC_UNPROFILED = "unprofiled"
# ------------------------------------------------------------------------------------------- profiles


class ProfileIndex:
    """Fast lookup over the store's profile values (the ones the round uses) and the shipped rows."""

    def __init__(self, profiles_rows: Iterable[ProfileValue], shipped_rows: Iterable[Mapping[str, Any]]):
        self.profiles = {(r.account or "", r.cls, r.gpu_type): float(r.throughput) for r in profiles_rows}
        self.shipped = {(r["class"], r["gpu_type"]): float(r["throughput"]) for r in shipped_rows}

    def class_speeds(self, gpu_types: Iterable[str]) -> dict[str, dict[str, float]]:
        """class -> type -> speed relative to the class's slowest of ``gpu_types``, from the site-wide and
        shipped profiles (site-wide first), for classes measured on at least two of the types."""
        types = list(gpu_types)
        rows: dict[str, dict[str, float]] = {}
        for (a, c, g), v in self.profiles.items():
            if not a and g in types and v > 0:
                rows.setdefault(c, {})[g] = v
        for (c, g), v in self.shipped.items():
            if g in types and v > 0:
                rows.setdefault(c, {}).setdefault(g, v)
        out = {}
        for c, row in rows.items():
            if len(row) >= 2:
                slow = min(row.values())
                out[c] = {g: v / slow for g, v in row.items()}
        return out

    def site_speed(self, gpu_types: Iterable[str]) -> dict[str, float]:
        """type -> the mean, over every profiled class (the store's and the shipped ones) measured on at least
        two of ``gpu_types``, of its speed there relative to its slowest of them: which types are fast here,
        for jobs nothing is known about."""
        types = list(gpu_types)
        groups: dict[tuple[str, str], dict[str, float]] = {}
        for (a, c, g), v in self.profiles.items():
            if g in types and v > 0:
                groups.setdefault((a, c), {})[g] = v
        for (c, g), v in self.shipped.items():
            if g in types and v > 0:
                groups.setdefault(("", c), {}).setdefault(g, v)
        tot = {g: 0.0 for g in types}
        cnt = {g: 0 for g in types}
        for row in groups.values():
            if len(row) < 2:
                continue
            slow = min(row.values())
            for g, v in row.items():
                tot[g] += v / slow
                cnt[g] += 1
        return {g: (tot[g] / cnt[g] if cnt[g] else 0.0) for g in types}

    def lookup(self, account: str, cls: str, gpu_types: Iterable[str]) -> tuple[dict[str, float], dict[str, str]]:
        thr: dict[str, float] = {}
        src: dict[str, str] = {}
        missing = []
        for g in gpu_types:
            if (account, cls, g) in self.profiles and account:
                thr[g], src[g] = self.profiles[(account, cls, g)], SRC_ACCOUNT
            elif ("", cls, g) in self.profiles:
                thr[g], src[g] = self.profiles[("", cls, g)], SRC_SITE
            elif (cls, g) in self.shipped:
                thr[g], src[g] = self.shipped[(cls, g)], SRC_SHIPPED
            else:
                missing.append(g)
        if missing:
            if thr:
                slowest = min(thr.values())
                for g in missing:
                    thr[g], src[g] = slowest, SRC_ASSUMED
            else:
                for g in missing:
                    thr[g], src[g] = 1.0, SRC_UNPROFILED
        return thr, src


def lookup_throughput(profiles_rows: Iterable[ProfileValue], shipped_rows: Iterable[Mapping[str, Any]],
                      account: str, cls: str, gpu_types: Iterable[str]) -> tuple[dict[str, float], dict[str, str]]:
    """(throughput per type, source per type) of ``cls`` for ``account`` (chain in the module docstring)."""
    return ProfileIndex(profiles_rows, shipped_rows).lookup(account, cls, list(gpu_types))


# ------------------------------------------------------------------------------------------- problem


@dataclass(frozen=True)
class Built:
    """A Problem plus the bookkeeping to map its virtual users back to (account, class)."""

    problem: Problem
    rows: dict[tuple[str, str], tuple[str, str]]  # (account, class) -> (tenant, class name in the problem)
    tenant_of: dict[str, str]  # account -> tenant
    weights: dict[str, float]  # tenant -> weight
    throughput: dict[str, dict[str, dict[str, float]]]  # account -> class -> type -> raw throughput used
    sources: dict[str, dict[str, dict[str, str]]]  # account -> class -> type -> source
    capacity: dict[str, int]
    site_speed: dict[str, float] = field(default_factory=dict)  # ProfileIndex.site_speed
    class_speed: dict[str, dict[str, float]] = field(default_factory=dict)  # ProfileIndex.class_speeds


def tree_weight(snapshot: Snapshot, account: str) -> float:
    """An account's weight, a fixed split of Shares down the account tree (Fair Tree's split of shares, without
    its usage ranking: usage plays no part here): a top-level account (parent ``root``, or none known) weighs
    its fair-share Shares; a child account weighs its parent's weight times its Shares over the Shares of its
    parent's children (itself included; the parent's own users count as one more child of 1 share when the
    parent has any). Shares of 0 (and ``fairshare=parent``, read as 0) count as 1."""
    seen: set[str] = set()

    def shares(acct: Any) -> float:
        return float(acct.shares) if acct is not None and acct.shares > 0 else 1.0

    def weight(name: str) -> float:
        acct = snapshot.account(name)
        if acct is None or not acct.parent or acct.parent == "root" or name in seen:
            return shares(acct)
        seen.add(name)
        parent = snapshot.account(acct.parent)
        siblings = [a for a in snapshot.accounts if a.parent == acct.parent]
        total = sum(shares(a) for a in siblings) + (1.0 if parent is not None and parent.users else 0.0)
        return weight(acct.parent) * shares(acct) / total

    return weight(account)


def tenant_weights(snapshot: Snapshot, accounts: Iterable[str], cfg: Config) -> tuple[dict[str, str], dict[str, float]]:
    """(account -> tenant, tenant -> weight) for ``accounts``: a tenant weighs the sum of its accounts'
    :func:`tree_weight` (their Shares in a flat tree), unless ``tenants.weights`` names it."""
    tmap = dict(cfg.tenants.map)
    tenant_of = {a: tmap.get(a, a) for a in accounts}
    weights: dict[str, float] = {}
    for a, t in sorted(tenant_of.items()):
        weights[t] = weights.get(t, 0.0) + tree_weight(snapshot, a)
    for t in weights:
        if t in cfg.tenants.weights:
            weights[t] = float(cfg.tenants.weights[t])
    return tenant_of, weights


def build_problem(snapshot: Snapshot, demand: Mapping[tuple[str, str], ClassDemand],
                  profiles_rows: Iterable[ProfileValue], shipped_rows: Iterable[Mapping[str, Any]],
                  cfg: Config) -> Built:
    """The sharing problem of this round (see the module docstring)."""
    capacity = usable_capacity(snapshot, cfg.cluster.partitions)
    types = list(capacity)
    index = ProfileIndex(profiles_rows, shipped_rows)
    accounts = sorted({a for (a, _c), d in demand.items() if d.gpus > 0})
    tenant_of, weights = tenant_weights(snapshot, accounts, cfg)
    accounts_of: dict[str, list[str]] = {}
    for a in accounts:
        accounts_of.setdefault(tenant_of[a], []).append(a)
    rows: dict[tuple[str, str], tuple[str, str]] = {}
    thr_all: dict[str, dict[str, dict[str, float]]] = {}
    src_all: dict[str, dict[str, dict[str, str]]] = {}
    tenants = []
    for t in sorted(accounts_of):
        classes = []
        for a in accounts_of[t]:
            for (acct, cls), d in demand.items():
                if acct != a or d.gpus <= 0:
                    continue
                thr, src = index.lookup(a, cls, types)
                # per-type caps: a type none of its jobs requests (all typed otherwise) gets cap 0, which
                # also makes it unusable for the class in the problem (no speed there)
                td = d.type_demand(types)
                if not any(thr.get(g, 0) > 0 and capacity[g] > 0 and td[g] > 0 for g in types):
                    # asks only for types with no usable GPUs: it cannot get a share this round
                    thr_all.setdefault(a, {})[cls] = thr
                    src_all.setdefault(a, {})[cls] = src
                    continue
                name = cls if len(accounts_of[t]) == 1 else f"{a}/{cls}"
                rows[(a, cls)] = (t, name)
                thr_all.setdefault(a, {})[cls] = thr
                src_all.setdefault(a, {})[cls] = src
                jobs = tuple(ClassJob(str(jid), g, DEFAULT_REMAINING if left is None else left)
                             for jid, g, left in d.jobs if g > 0)
                classes.append(JobClass(name=name, throughput=thr, demand=float(d.gpus), type_demand=td,
                                        jobs=jobs))
        if classes:
            tenants.append(Tenant(name=t, classes=tuple(classes), weight=weights[t]))
    problem = Problem(gpu_types=dict(capacity), tenants=tuple(tenants))
    return Built(problem=problem, rows=rows, tenant_of=tenant_of, weights=weights, throughput=thr_all,
                 sources=src_all, capacity=dict(capacity), site_speed=index.site_speed(types),
                 class_speed=index.class_speeds(types))




def type_order(built: Built, account: str) -> list[str]:
    """The GPU types of the cluster in the order the account's untyped jobs should try them: fastest first by
    the sum over its classes of their speed relative to each class's slowest type (a class that cannot use a
    type adds 0 there), then the site's speed (:meth:`ProfileIndex.site_speed`), then the most GPUs, then the
    name."""
    score = {g: 0.0 for g in built.capacity}
    for thr in built.throughput.get(account, {}).values():
        vals = [v for g, v in thr.items() if v > 0 and built.capacity.get(g, 0) > 0]
        if not vals:
            continue
        slow = min(vals)
        for g, v in thr.items():
            if g in score and v > 0:
                score[g] += v / slow
    return sorted(built.capacity, key=lambda g: (-score[g], -built.site_speed.get(g, 0.0), -built.capacity[g], g))
