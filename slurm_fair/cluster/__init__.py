"""Cluster interface and backends."""

from .base import ANY_GPU, CLEAR, Account, Cluster, GpuTypeUsage, Job, Node, Snapshot  # noqa: F401
from .connect import connect  # noqa: F401
from .errors import ClusterError, ClusterUnreachable, CommandFailed, ParseError, Unsupported  # noqa: F401
