"""Profiling: measuring each job class's throughput on each GPU type (agent, harvesting, lie detection).

Light on purpose: ``slurm_fair.report()`` and ``slurm-fair profile report`` run inside users' jobs, so this
package and :mod:`.client` import only the standard library. :mod:`.core` is the pure logic (validation,
moving averages, outliers, staleness, which value the policies use, conflicts); :mod:`.agent` is the job
side (``profile submit`` / ``profile run``); :mod:`slurm_fair.daemon.harvest` reads the reports each round.
"""
