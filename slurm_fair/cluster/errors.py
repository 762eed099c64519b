"""Typed errors of the Cluster interface."""

from __future__ import annotations

from ..errors import SlurmFairError


class ClusterError(SlurmFairError):
    """Base of every error a Cluster backend raises."""


class ClusterUnreachable(ClusterError):
    """slurmctld/slurmdbd did not answer (connection refused, timeout)."""


class CommandFailed(ClusterError):
    """A Slurm command exited non-zero; carries the argument list, exit code and stderr."""

    def __init__(self, argv: list[str] | tuple[str, ...], returncode: int, stderr: str):
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"{' '.join(self.argv[:4])}… exited {returncode}: {stderr.strip()[:500]}")


class Unsupported(ClusterError):
    """The operation is not supported by this Slurm version or backend."""


class ParseError(ClusterError):
    """Slurm printed something this backend cannot parse."""
