"""The partition view of one snapshot, computed once (:class:`PartitionView`): what a partition pilot
(``cluster.partitions``) manages beside the whole cluster. The round (``daemon/round.py``) and each poll between
rounds (``daemon/service.py``) make it once per snapshot and hand it to :func:`.decide`, :func:`.type_map` and
the type map's writer (``daemon/type_map_file.py``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from ...cluster.base import Snapshot
from .demand import partition_view
from .typemap import PartitionTypes, partition_types


@dataclass(frozen=True)
class PartitionView:
    """``whole``: the snapshot as Slurm gave it; ``managed``: the nodes of the managed partitions and the jobs
    that may run there (:func:`.demand.partition_view`; the whole snapshot when no partition is named);
    ``partitions``: the names (``cluster.partitions``)."""

    whole: Snapshot
    managed: Snapshot
    partitions: tuple[str, ...] = ()

    @classmethod
    def of(cls, snapshot: Snapshot | PartitionView, partitions: Iterable[str] = ()) -> PartitionView:
        """The view of ``snapshot`` (a view already made is returned as it is)."""
        if isinstance(snapshot, PartitionView):
            return snapshot
        parts = tuple(partitions)
        return cls(snapshot, partition_view(snapshot, parts), parts)

    @property
    def types(self) -> tuple[PartitionTypes, ...]:
        """The GPU types of each managed partition (the type map's ``#@partition`` lines)."""
        return partition_types(self.managed)

    def with_managed(self, managed: Snapshot) -> PartitionView:
        """The same view with ``managed`` changed (e.g. pending jobs retyped: :func:`.typemap.with_retypes`)."""
        return replace(self, managed=managed)
