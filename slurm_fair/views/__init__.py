"""The read side: what the commands that show slurm-fair's state compute, from the store, the public status
file and Slurm. One module per command: ``status`` (``slurm-fair status``), ``explain`` (``slurm-fair
explain``), ``report`` (``slurm-fair report``; job times in ``jobtimes``), ``why`` (``slurm-fair why JOBID``).
They return data; the CLI (:mod:`slurm_fair.cli`) only prints it."""
