"""Trace-driven simulation of a Slurm cluster under slurm-fair (issue 12)."""
