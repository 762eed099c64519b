"""slurm-fair admin commands."""

import click


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
