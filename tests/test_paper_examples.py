"""Every worked example with numbers in the OEF paper (000_…), reproduced to 2 decimals.

Speedup matrices are already normalized (slowest type = 1), so raw throughput = speedup here.
"""

from __future__ import annotations

import numpy as np
import pytest

from slurm_fair.policies import oef_noncoop

from ._instances import classes_problem, matrix_problem

# §2.4 eq. 1 and §3.1.1 eq. 5: three users, one GPU of each of two types.
W3 = [[1, 2], [1, 3], [1, 4]]
# §3.1.1 eq. 6: two users.
W2 = [[1, 2], [1, 5]]


def close(a, b, places=2):
    np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), atol=0.5 * 10**-places + 1e-9)


# --------------------------------------------------------------------------- non-cooperative OEF (eq. 9)


def test_noncoop_eq5_matrix_equalizes_throughput():
    """eq. 9 on the eq. 5 matrix: u1 keeps GPU1, GPU2 is split so all three reach 1.5/(1/2+1/3+1/4)."""
    a = oef_noncoop.solve(matrix_problem(W3))
    t = 1.5 / (1 / 2 + 1 / 3 + 1 / 4)  # = 1.3846: 1 + 2·b1 = 3·b2 = 4·b3, b1 + b2 + b3 = 1
    close(a.user_throughput(), [t, t, t], 6)
    close(a.x, [[1, (t - 1) / 2], [0, t / 3], [0, t / 4]], 6)
    close(a.total_throughput(), 3 * t, 6)


def test_weighted_noncoop_423():
    """§4.2.3: eq. 6 matrix with π2 = 2 → X = [[1, 1/3], [0, 1/3], [0, 1/3]] in replicated form."""
    a = oef_noncoop.solve(matrix_problem(W2, weights=[1, 2]))
    close(a.x, [[1, 1 / 3], [0, 2 / 3]])
    replicated = oef_noncoop.solve(matrix_problem([[1, 2], [1, 5], [1, 5]]))
    close(replicated.x, [[1, 1 / 3], [0, 1 / 3], [0, 1 / 3]])
    # weighted = replication (u2's replicas summed), to solver precision
    close(a.x, [replicated.x[0], replicated.x[1] + replicated.x[2]], 6)
    t = a.user_throughput()
    close(t[1] / t[0], 2.0, 6)


def test_two_job_types_424():
    """§4.2.4: u1 adds a ⟨1,3⟩ job type; its two virtual users get weight 1/2 each.

    Paper: X = [[1, 0.11], [0, 0.41], [0, 0.24], [0, 0.24]] (u2 shown as two replicas of weight 1/2).
    """
    p = classes_problem([("u1", 1, [[1, 2], [1, 3]]), ("u2", 1, [[1, 5]])])
    a = oef_noncoop.solve(p)
    close(a.x[0], [1, 0.11])
    close(a.x[1], [0, 0.41])
    close(a.x[2], [0, 2 * 0.24], 1)  # the paper's two rounded replicas 0.24 + 0.24
    close(a.x[2] / 2, [0, 0.24])
    rep = oef_noncoop.solve(matrix_problem([[1, 2], [1, 3], [1, 5], [1, 5]]))
    close(rep.x, [[1, 0.11], [0, 0.41], [0, 0.24], [0, 0.24]])
    close(a.x[2], rep.x[2] + rep.x[3], 6)
    # each job type of u1 gets half of u2's throughput (§6.2.3)
    u = a.user_throughput()
    close([u[0] / u[2], u[1] / u[2]], [0.5, 0.5], 6)
