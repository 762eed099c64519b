"""Writing a round's decisions into Slurm: GPU limits in as few calls as possible, SiteFactors, each retried
piece by piece so that one bad account or job leaves the rest applied (``ClusterUnreachable`` is raised at once)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..cluster.base import Cluster
from ..cluster.errors import ClusterUnreachable
from . import plan as P

# A failed SiteFactor value group of at most this many jobs is retried job by job (larger ones are reported).
MAX_FACTOR_RETRIES = 50


@dataclass
class Applied:
    """What applying the limit changes did: per account the keys written, the failures with their cause."""

    ok: dict[str, dict[str, int]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    batch_errors: list[str] = field(default_factory=list)  # batches that failed whole, then retried per account


def apply_limits(cluster: Cluster, changes: Mapping[str, Mapping[str, int]]) -> Applied:
    """Write the limit changes in as few calls as possible (:func:`plan.limit_batches`); a batch that fails is
    retried account by account, so one bad account (a name the backend refuses, a Slurm error on it) leaves
    the others applied. ClusterUnreachable is raised at once (the round is then ``unreachable``)."""
    out = Applied()

    def merge(batch: Mapping[str, Mapping[str, int]]) -> None:
        for a, ch in batch.items():
            out.ok.setdefault(a, {}).update(ch)

    for batch in P.limit_batches(changes):
        try:
            cluster.set_accounts_gpu_limits(batch)
            merge(batch)
            continue
        except ClusterUnreachable:
            raise
        except Exception as e:  # noqa: BLE001 - isolate the bad account(s) below
            if len(batch) == 1:
                a = next(iter(batch))
                out.failed[a] = (out.failed[a] + "; " if a in out.failed else "") + str(e)
                continue
            out.batch_errors.append(f"{', '.join(sorted(batch))}: {e}")
        for a in sorted(batch):
            try:
                cluster.set_accounts_gpu_limits({a: batch[a]})
                merge({a: batch[a]})
            except ClusterUnreachable:
                raise
            except Exception as e:  # noqa: BLE001 - recorded on the round
                out.failed[a] = (out.failed[a] + "; " if a in out.failed else "") + str(e)
    for a in out.failed:  # an account is applied whole or counted as failed
        out.ok.pop(a, None)
    return out


def apply_factors(cluster: Cluster, factors: Mapping[int, int]) -> tuple[dict[int, int], dict[str, str]]:
    """Set SiteFactors; when the call fails, each value group is retried alone, and a failing group of at most
    MAX_FACTOR_RETRIES jobs job by job. Returns (factors set, failures {job id or 'value=N': cause})."""
    if not factors:
        return {}, {}
    try:
        cluster.set_site_factors(factors)
        return dict(factors), {}
    except ClusterUnreachable:
        raise
    except Exception:  # noqa: BLE001 - narrowed down below
        pass
    done: dict[int, int] = {}
    failed: dict[str, str] = {}
    groups: dict[int, dict[int, int]] = {}
    for j, v in factors.items():
        groups.setdefault(v, {})[j] = v
    for v, group in sorted(groups.items()):
        try:
            cluster.set_site_factors(group)
            done.update(group)
            continue
        except ClusterUnreachable:
            raise
        except Exception as e:  # noqa: BLE001
            if len(group) > MAX_FACTOR_RETRIES:
                failed[f"value={v}"] = f"{len(group)} jobs: {e}"
                continue
        for j in sorted(group):
            try:
                cluster.set_site_factors({j: v})
                done[j] = v
            except ClusterUnreachable:
                raise
            except Exception as e:  # noqa: BLE001
                failed[str(j)] = str(e)
    return done, failed
