"""DPSGPR (Titsias' variational sparse GP): what only SGPR has. Its latent values are GPflow's own
cached ``c`` (the same numbers, not merely the same predictions), and the reference latent map is
``B = chol(Q)^{-1} K_MN / s^2`` (``sparse_cases.py`` explains why). The contract it shares with
DPGPRFITC (the cloaking map against GPflow's ``SGPR`` and the NumPy reference, release once / query
anywhere, exact audits, the leak guard, selection, clipping) is tested in ``test_sgpr_base.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gpflow
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sparse_cases import HI, LO, MID, NOISE, SGPR, J, kernel, shared_problem  # noqa: E402


@pytest.fixture(scope="module", params=[1, 2], ids=["1d", "2d"])
def problem(request):
    return shared_problem(SGPR, request.param)


def test_latent_values_are_gpflows_cached_c(problem):
    p = problem
    drawn = np.delete(p.Y, J)  # output J was set to LO on purpose
    assert LO < drawn.min() and drawn.max() < HI  # inside the bounds: nothing clipped
    np.testing.assert_array_equal(p.model.data[1].numpy(), p.Y)
    plain = gpflow.models.SGPR((p.X, p.Y), kernel(p.dim), p.Z, mean_function=gpflow.functions.Constant(np.array([MID])),
                               noise_variance=NOISE)
    B = p.model.latent_terms().map.numpy()
    yc = p.model.centred_outputs().numpy()
    _, _, c = (v.value for v in plain.posterior(gpflow.posteriors.PrecomputeCacheType.NOCACHE)._precompute())
    np.testing.assert_allclose(B @ yc, c.numpy()[:, 0], rtol=1e-8, atol=1e-12)
    # ... and the reference's B = chol(Q)^{-1} K_MN / s^2 gives the same c
    np.testing.assert_allclose(p.ref.B @ yc, c.numpy()[:, 0], rtol=1e-8, atol=1e-12)
