"""slurm-fair: heterogeneity-aware, provably fair GPU sharing for Slurm (OEF)."""

__version__ = "0.1.0"
