"""slurm-fair solve commands."""

import click


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
