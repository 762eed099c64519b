"""At most ``[profiling] max_classes_per_account`` job classes per account (issue 21, "bounded state"). Pure.

Every distinct class of an account is one virtual user of the sharing problem, so a user looping over random
job names would grow the solver's problem without bound. Each round, per account, the classes of its pending
and running jobs are ranked and the first ``cap`` kept; the jobs of the others count as the class
``default`` (:data:`DEFAULT_CLASS`, not counted in the cap). Ranking, so the kept set is stable from round to
round: classes the account already has stored profile values for (or site-wide/shipped classes) first, then
by the submit time of their oldest job, then by name. A report of an ended job (hook record) names a class
that is folded the same way when the account already has values for ``cap`` classes and this is not one of
them (:func:`report_class`): the cap is on stored classes, counted as the harvest stores them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from ...cluster.base import Job, Snapshot
from .demand import DEFAULT_CLASS, job_class


@dataclass(frozen=True)
class Folded:
    """The snapshot with folded jobs' class set, and per account the classes folded into ``default``."""

    snapshot: Snapshot
    folded: dict[str, tuple[str, ...]]  # account -> classes folded this round
    kept: dict[str, tuple[str, ...]]  # account -> classes kept


def fold(snapshot: Snapshot, order: Iterable[str], cap: int, known: set[tuple[str, str]],
         site_classes: set[str]) -> Folded:
    """Fold each account's classes beyond ``cap`` into ``default`` (module docstring). ``known``: (account,
    class) with stored values of the account; ``site_classes``: classes with site-wide or shipped values."""
    order = tuple(order)
    first: dict[str, dict[str, int]] = {}
    cls_of: list[str | None] = []  # per job of the snapshot, in order: its class (None: neither pending nor running)
    for j in snapshot.jobs:
        if j.state != "PENDING" and j.state != "RUNNING":
            cls_of.append(None)
            continue
        c = job_class(j, order)
        cls_of.append(c)
        if c != DEFAULT_CLASS:
            per = first.get(j.account)
            if per is None:
                per = first[j.account] = {}
            t = per.get(c)
            if t is None or j.submit_time < t:
                per[c] = j.submit_time
    kept: dict[str, tuple[str, ...]] = {}
    folded: dict[str, tuple[str, ...]] = {}
    for acct, classes in first.items():
        if len(classes) <= cap:
            kept[acct] = tuple(sorted(classes))
            continue
        ranked = sorted(classes, key=lambda c: (not ((acct, c) in known or c in site_classes), classes[c], c))
        kept[acct] = tuple(sorted(ranked[:cap]))
        folded[acct] = tuple(sorted(ranked[cap:]))
    if not folded:
        return Folded(snapshot, {}, kept)
    gone = {a: set(cs) for a, cs in folded.items()}  # sets: a flood folds thousands of names a round
    out = tuple(_with_class(j, DEFAULT_CLASS) if c is not None and j.account in gone and c in gone[j.account] else j
                for j, c in zip(snapshot.jobs, cls_of))
    return Folded(replace(snapshot, jobs=out), folded, kept)


def _with_class(j: Job, cls: str) -> Job:
    """``replace(j, cls=cls)`` without running the dataclass's ``__init__`` over every field again (``Job`` has no
    ``__post_init__``): a rename flood folds 10 000 jobs a round, and ``replace`` was two thirds of the fold's
    time (64 ms a round; issue 30's round-time goal); ``copy.copy`` still took 7 µs a job, a new instance given
    the fields' dict 1.8 µs (the frozen dataclass keeps its fields in ``__dict__``)."""
    out = object.__new__(Job)
    fields = out.__dict__
    fields.update(j.__dict__)
    fields["cls"] = cls
    return out


def report_class(account: str, cls: str, own: set[str], cap: int) -> str:
    """The class a report of an ended or running job counts for: ``cls`` when the account has stored values for
    it (``own``) or has fewer than ``cap`` classes of its own, else ``default``. The cap is on the classes an
    account has values for, whatever the round keeps (issue 41: a class the round kept but the account had no
    value for was admitted beyond the cap, harvest after harvest). The caller adds a class admitted and stored
    to ``own`` at once, so a harvest of 200 reports under 200 names stores at most ``cap``."""
    if cls == DEFAULT_CLASS or cls in own or len(own - {DEFAULT_CLASS}) < cap:
        return cls
    return DEFAULT_CLASS
