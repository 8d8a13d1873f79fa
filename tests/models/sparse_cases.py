"""Shared cases of the sparse regression models' tests (``test_sgpr_base.py``, ``test_fitc.py``,
``test_sgpr.py``): the two models as :class:`Variant` s, the problems, the independent NumPy
references, and the checks that recompute a release's privacy from its public noise factor.

The references use NumPy / SciPy only, never the package's Cholesky route, with GPflow's
``default_jitter`` (1e-6) added to ``K_MM`` as GPflow does:

* FITC (Snelson & Ghahramani 2006; JMLR section 3.2), with LU solves::

      mu_* = k_*M Q^{-1} K_MN (Lambda + s2 I)^{-1} (y - m) + m,   Q = K_MM + K_MN (Lambda + s2 I)^{-1} K_NM,
      Lambda = diag(K_NN - Q_NN),  Q_NN = K_NM K_MM^{-1} K_MN.

  The package publishes ``R B (y - m)`` with ``B = L_MM^T Q^{-1} K_MN (Lambda + s2 I)^{-1}`` and
  readout ``A(x) = k(x, Z) L_MM^{-T}``.
* SGPR (Titsias 2009, eq. (6)), with LU solves and one Cholesky factor of ``Q``::

      mu_* = s^{-2} k_*M Q^{-1} K_MN (y - m) + m,        Q = K_MM + s^{-2} K_MN K_NM.

  The package's latent values are GPflow's ``c = L_B^{-1} L^{-1} K_MN (y - m) / s^2`` with
  ``L = chol(K_MM)`` and ``L_B = chol(I + L^{-1} K_MN K_NM L^{-T} / s^2)``. Since ``L L_B`` is lower
  triangular with a positive diagonal and ``(L L_B)(L L_B)^T = Q``, it *is* ``chol(Q)`` (uniqueness
  of the Cholesky factor): so the reference latent map is ``B = chol(Q)^{-1} K_MN / s^2`` and its
  readout ``a(x) = k(x, Z) chol(Q)^{-T}``, from one NumPy Cholesky factor of ``Q`` alone.

Both have the predictive variance of f ``k** - k*M K_MM^{-1} kM* + k*M Q^{-1} kM*``. The released
coordinates' map ``R`` is checked (``R^T R = A^T A`` plus the documented ridge) rather than trusted.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace
from typing import Callable, Tuple

import gpflow
import numpy as np
from dpgp_gpflow.sampling import standard_normal
from reference import gaussian_delta_at_shift, k_se, mahalanobis_shifts, range_projector
from scipy.linalg import solve_triangular

from dpgp_gpflow import PrivateRelease
from dpgp_gpflow.models import DPGPRFITC, DPSGPR, PrivateFunction, SGPRReadout, kmeans_inducing_inputs
from dpgp_gpflow.models.fitc import FITCChunkTerms, FITCReadout
from dpgp_gpflow.models.sgpr import SGPRChunkTerms

LO, HI = -1.5, 2.5  # asymmetric, so the public prior mean (0.5) is not zero
D = HI - LO
MID = 0.5 * (LO + HI)
EPS, DELTA = 1.0, 0.01
VAR, NOISE = 1.3, 0.1
LENGTHSCALES = {1: 1.7, 2: [1.7, 2.3]}  # ARD in 2-D
N, M_INDUCING, K_TEST = 40, 6, 25
J = 3  # the output that neighbours change (set to LO so it may move by the full d)
JITTER = 1e-6


def kernel(dim: int) -> gpflow.kernels.SquaredExponential:
    return gpflow.kernels.SquaredExponential(variance=VAR, lengthscales=LENGTHSCALES[dim])


def kref(dim: int):
    return partial(k_se, variance=VAR, lengthscale=np.asarray(LENGTHSCALES[dim], dtype=float))


def make_data(n: int, dim: int, seed: int):
    """Inputs on [0, 10]^dim, outputs clipped to the bounds with output ``J`` on the lower bound, and
    ``K_TEST`` query inputs on [-1, 11]^dim."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 10.0, (n, dim))
    Y = np.clip(np.sin(X.sum(1, keepdims=True)) + MID + 0.3 * rng.standard_normal((n, 1)), LO, HI)
    Y[J, 0] = LO
    Xnew = rng.uniform(-1.0, 11.0, (K_TEST, dim))
    return X, Y, Xnew


def neighbour(Y):
    Y2 = Y.copy()
    Y2[J, 0] = HI  # LO -> HI: a move by the full d
    return Y2


# ---------------------------------------------------------------------------------------------
# Independent NumPy references


def fitc_reference(kern, X, Z, s2, jitter=JITTER, kdiag=VAR):
    """FITC pieces from the definition (LU solves). ``kdiag``: k(x, x) (the SE variance)."""
    m = Z.shape[0]
    Kmm = kern(Z, Z) + jitter * np.eye(m)
    Kmn = kern(Z, X)
    Lam = kdiag - np.sum(Kmn * np.linalg.solve(Kmm, Kmn), axis=0)  # diag(K_NN - Q_NN)
    Dn = Lam + s2
    Q = Kmm + (Kmn / Dn) @ Kmn.T
    W = np.linalg.solve(Q, Kmn / Dn)  # m x n: Q^{-1} K_MN (Lambda + s2 I)^{-1}
    Luu = np.linalg.cholesky(Kmm)
    return SimpleNamespace(Kmm=Kmm, Q=Q, W=W, Lam=Lam, Lread=Luu, B=Luu.T @ W, kern=kern, Z=Z, kdiag=kdiag)


def sgpr_reference(kern, X, Z, s2, jitter=JITTER, kdiag=VAR):
    """SGPR pieces from the definition. ``kdiag``: k(x, x) (the SE variance)."""
    m = Z.shape[0]
    Kmm = kern(Z, Z) + jitter * np.eye(m)
    Kmn = kern(Z, X)
    Lam = kdiag - np.sum(Kmn * np.linalg.solve(Kmm, Kmn), axis=0)  # diag(K_NN - Q_NN): what SGPR ignores
    Q = Kmm + Kmn @ Kmn.T / s2
    W = np.linalg.solve(Q, Kmn) / s2  # m x n: s^{-2} Q^{-1} K_MN
    Lq = np.linalg.cholesky(Q)
    B = solve_triangular(Lq, Kmn, lower=True) / s2  # chol(Q)^{-1} K_MN / s^2: GPflow's c = B (y - m)
    return SimpleNamespace(Kmm=Kmm, Q=Q, W=W, Lam=Lam, Lread=Lq, B=B, kern=kern, Z=Z, kdiag=kdiag)


def cloaking(ref, Xnew):
    """The cloaking matrix ``k_*M W`` (k x n): FITC's ``k_*M Q^{-1} K_MN (Lambda + s2 I)^{-1}``, SGPR's
    ``s^{-2} k_*M Q^{-1} K_MN``."""
    return ref.kern(Xnew, ref.Z) @ ref.W


def variance(ref, Xnew):
    """Predictive variance of f: ``k** - k*M K_MM^{-1} kM* + k*M Q^{-1} kM*``."""
    Ksm = ref.kern(Xnew, ref.Z)
    return (ref.kdiag - np.sum(Ksm * np.linalg.solve(ref.Kmm, Ksm.T).T, axis=1)
            + np.sum(Ksm * np.linalg.solve(ref.Q, Ksm.T).T, axis=1))


def readout(ref, Xnew):
    """The readout (k x m) of the latent values: FITC's ``k(x, Z) L_MM^{-T}``, SGPR's ``k(x, Z) chol(Q)^{-T}``."""
    return solve_triangular(ref.Lread, ref.kern(ref.Z, Xnew), lower=True).T


# ---------------------------------------------------------------------------------------------
# Checks of a release against the references


def checked_R(pf: PrivateFunction, ref, X_reference):
    """The package's map from latent values to released coordinates, checked independently:
    ``R`` is upper triangular and ``R^T R = A^T A + ridge I`` for the readout ``A`` at the reference
    inputs, with the documented ridge ``1e-8 tr(A^T A) / m`` that keeps R invertible."""
    R = pf.coordinates.numpy()
    A = readout(ref, X_reference)
    G = A.T @ A
    G = G + 1e-8 * np.trace(G) / G.shape[0] * np.eye(G.shape[0])
    assert np.allclose(np.tril(R, -1), 0.0)
    np.testing.assert_allclose(R.T @ R, G, rtol=1e-8, atol=1e-10 * np.abs(G).max())
    return R


def exact_mu(F, C, d, multiplier, epsilon, delta):
    """``mu = d sqrt(max_i c_i^T (F F^T)^+ c_i)`` over every column of ``C`` projected onto range(F),
    which must be <= 1 / multiplier; the analytic-Gaussian delta(eps) at mu <= delta."""
    P = range_projector(F)
    mu = d * float(mahalanobis_shifts(F, P @ C).max())
    assert mu <= (1.0 / multiplier) * (1 + 1e-6), (mu, 1.0 / multiplier)
    assert gaussian_delta_at_shift(epsilon, mu) <= delta * (1 + 1e-9)
    return mu


def seeded_noise(rel: PrivateRelease, seed: int) -> np.ndarray:
    """The noise a seeded release added, ``F xi`` with ``xi`` the seed's standard normal draw
    (the released vector is ``offset + basis (coords + s Delta factor xi)``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xi, _ = standard_normal(rel.rank, seed)
    return rel.noise_factor @ xi


# ---------------------------------------------------------------------------------------------
# The two models and their problems


@dataclass(frozen=True)
class Variant:
    """One sparse regression model and what its tests compare it with."""

    name: str
    cls: type  #: the private model
    gpflow_cls: type  #: GPflow's model it must predict as
    reference: Callable  #: its NumPy reference (``fitc_reference`` or ``sgpr_reference``)
    readout_cls: type  #: what ``public_readout()`` returns
    chunk_terms_cls: type  #: what ``chunk_terms()`` returns
    objectives: Tuple[str, ...]  #: the objectives that read the outputs (the leak guard)
    data_seed: int  #: the problems' data seed is this plus the input dimension
    rtol: float  #: tolerance of the package's maps against the reference (FITC's Lambda loses digits)
    atol: float  #: ... and its absolute part, relative to the largest entry

    def __repr__(self) -> str:
        return self.name


FITC = Variant("fitc", DPGPRFITC, gpflow.models.GPRFITC, fitc_reference, FITCReadout, FITCChunkTerms,
               ("fitc_log_marginal_likelihood", "training_loss"), 10, 1e-6, 1e-8)
SGPR = Variant("sgpr", DPSGPR, gpflow.models.SGPR, sgpr_reference, SGPRReadout, SGPRChunkTerms,
               ("elbo", "upper_bound", "training_loss"), 20, 1e-8, 1e-10)
VARIANTS = (FITC, SGPR)


def make_model(variant: Variant, X, Y, Z, dim, **kw):
    return variant.cls((X, Y), kernel(dim), Z, noise_variance=NOISE, y_bounds=(LO, HI), hyperparameters_public=True,
                       **kw)


def build_problem(variant: Variant, dim: int) -> SimpleNamespace:
    X, Y, Xnew = make_data(N, dim, seed=variant.data_seed + dim)
    Z = kmeans_inducing_inputs(X, M_INDUCING, seed=0)
    ref = variant.reference(kref(dim), X, Z, NOISE)
    return SimpleNamespace(variant=variant, dim=dim, X=X, Y=Y, Xnew=Xnew, Z=Z, ref=ref, C=cloaking(ref, Xnew),
                           model=make_model(variant, X, Y, Z, dim))


@functools.lru_cache(maxsize=None)
def shared_problem(variant: Variant, dim: int) -> SimpleNamespace:
    """:func:`build_problem`, built once per test session (tests must not change its model)."""
    return build_problem(variant, dim)
