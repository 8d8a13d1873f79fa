"""The histogram residual scheme (benchmarks/whole_rows_scheme.py's choice): a histogram first stage, then residual
releases with a floored preconditioner and the weights' posterior-variance radius, under one guarantee.

Stage 1 (:mod:`.histogram`, fraction ``f_1`` of the Gaussian-DP budget) releases the noised counts ``n~_c`` of the
rows in the cells of the public grid (centres ``x_c``, features ``phi_c``) and ``b~`` (noise stds ``sigma_n``,
``sigma_b``). Post-processing (docs/whole_rows.md#residual-releases):

* ``S^ = sum_c max(n~_c, 0) phi_c phi_c^T`` (PSD by construction, :func:`histogram_statistic`);
* ``u_1 = S^ (S^2 + lambda S^ + kappa I)^{-1} b~``, ``kappa = sigma_b^2 / sigma_f^2`` (the weights' posterior mean
  when ``b~``'s noise is modelled, :func:`aware_mean`);
* the preconditioner ``P``: ``S^`` with its eigenvalues raised to ``PRECONDITIONER_FLOOR tau_h``,
  ``tau_h = sigma_n sqrt(2 log(2 M) ||sum_c |phi_c|^2 phi_c phi_c^T||)`` (the matrix-Gaussian-series scale of the
  counts' noise in ``S^``, public: :func:`histogram_tau`);
* stage ``j = 2 .. J`` releases the clipped residual sums of :mod:`.residual` around ``u_{j-1}`` with radius
  ``R_j = min(z sqrt(sigma^2 + v), d)``, ``z = HISTOGRAM_Z``, ``v`` the count-weighted mean over the cell centres
  of ``phi_c^T C phi_c``, ``C = (I / sigma_f^2 + S^ (sigma^2 S^ + s^2 I)^{-1} S^)^{-1}`` with ``s`` the previous
  stage's noise std (the weights' posterior variance, shrinkage of a noisy first stage included:
  :func:`bayes_variance`), and ``u_j = (lambda I + P)^{-1} (b~_j + P u_{j-1})``.

Privacy assumption: as :mod:`.residual_release` (whole-row neighbours, public box, bounds, kernel, ``Z`` and
variances given); every stage's sensitivity is recomputed from public values before anything is reserved; the
radii, centres and estimates are post-processing of earlier stages.
"""

from __future__ import annotations

import math
from typing import Any, Callable, List, NamedTuple, Tuple

import numpy as np

from .posterior import regularised_statistic
from .residual import preconditioned_update, propagated_covariance
from .residual_bounds import residual_radius

__all__: list[str] = []  # internal: the package imports these names by name

#: The name of the scheme (``residual_fractions="histogram"``).
HISTOGRAM = "histogram"
#: The fractions of the Gaussian-DP budget: the histogram stage, then four residual releases (the design study's
#: choice on tuning problems, benchmarks/whole_rows_scheme.py, results/whole_rows_scheme.md).
HISTOGRAM_FRACTIONS = (0.3, 0.15, 0.15, 0.15, 0.25)
#: ``z`` of the radius rule (the design study's choice).
HISTOGRAM_Z = 1.5
#: The preconditioner's eigenvalue floor as a multiple of ``tau_h`` (the design study's choice).
PRECONDITIONER_FLOOR = 0.15


def histogram_statistic(counts: Any, phi: Any) -> np.ndarray:
    """``S^ = sum_c max(n~_c, 0) phi_c phi_c^T`` [M, M] from the released counts [C] and the cells' features
    ``phi`` [C, M]. Post-processing."""
    weights = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
    phi = np.asarray(phi, dtype=np.float64)
    S = (phi * weights[:, None]).T @ phi
    return 0.5 * (S + S.T)


def histogram_tau(phi: Any, counts_std: float) -> float:
    """``tau_h = sigma_n sqrt(2 log(2 M) v)``, ``v = ||sum_c |phi_c|^2 phi_c phi_c^T||_2``: a public scale of the
    spectral norm of the counts' noise ``sum_c e_c phi_c phi_c^T`` in ``S^``, the ``t`` at which the matrix Gaussian
    series tail bound ``P(||.|| >= t) <= 2 M exp(-t^2 / (2 sigma_n^2 v))`` (Tropp 2012) reaches 1: not a
    high-probability bound, only the scale the preconditioner's floor is a multiple of (:data:`PRECONDITIONER_FLOOR`,
    the design study's choice). Public: from the cells' features and the noise std."""
    phi = np.asarray(phi, dtype=np.float64)
    M = phi.shape[1]
    sq = np.sum(phi**2, axis=1)
    variance = np.linalg.eigvalsh((phi * sq[:, None]).T @ phi)[-1]
    return float(counts_std) * math.sqrt(2.0 * math.log(2.0 * M) * max(float(variance), 0.0))


def _eig(S: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    w, V = np.linalg.eigh(0.5 * (S + S.T))
    return np.maximum(w, 0.0), V


def aware_mean(S: Any, b: Any, lam: float, kappa: float, eigen: Any = None) -> np.ndarray:
    """``S (S^2 + lambda S + kappa I)^{-1} b`` [M] for PSD ``S`` (eigenvalues below 0 read as 0; ``eigen``: ``S``'s
    ``(w, V)`` as :func:`_eig` gives them, if already computed). Post-processing."""
    w, V = _eig(np.asarray(S, dtype=np.float64)) if eigen is None else eigen
    return V @ ((w / (w * w + lam * w + kappa)) * (V.T @ np.asarray(b, dtype=np.float64)))


def _cell_terms(V: np.ndarray, counts: Any, phi: Any) -> Tuple[np.ndarray, np.ndarray]:
    """``((phi_c^T V)^2 [C, M], the cells' weights [C])`` of :func:`bayes_variance`: the same for every stage."""
    squared = (np.asarray(phi, dtype=np.float64) @ V) ** 2  # [C, M]
    weights = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
    total = float(np.sum(weights))
    weights = weights / total if total > 0.0 else np.full(weights.shape, 1.0 / weights.size)
    return squared, weights


def bayes_variance(w: np.ndarray, squared: np.ndarray, weights: np.ndarray, *, kernel_variance: float,
                   noise_variance: float, b_std: float) -> float:
    """``v``: the mean over the cells, weighted by ``max(n~_c, 0)``, of ``phi_c^T C phi_c``,
    ``C = (I / sigma_f^2 + S (sigma^2 S + s^2 I)^{-1} S)^{-1}`` (``S`` the histogram's ``S^``, ``s = b_std``);
    uniform weights when no count is positive; from ``S``'s eigenvalues ``w`` and :func:`_cell_terms` (``squared``,
    ``weights``). Post-processing."""
    # in S's eigenbasis C is diagonal: 1 / (1 / sigma_f^2 + w^2 / (sigma^2 w + s^2))
    c = 1.0 / (1.0 / kernel_variance + w * w / (noise_variance * w + b_std**2))
    quad = np.sum(squared * c[None, :], axis=1)  # [C]
    return float(weights @ quad)


def aware_noise_covariance(S: Any, counts: Any, phi: Any, b: Any, *, lam: float, kappa: float, b_std: float,
                           counts_std: float, eigen: Any = None) -> np.ndarray:
    """The first-order covariance [M, M] of the DP noise of ``u_1 = g(S^) b~`` (:func:`aware_mean`,
    ``g(w) = w / (w^2 + lambda w + kappa)``): ``sigma_b^2 g(S^)^2`` from ``b~``'s noise, plus the counts' noise
    through ``S^`` (``dS = sum_c e_c 1{n~_c > 0} phi_c phi_c^T``): by the Daleckii-Krein formula
    ``d u = V (G o (V^T dS V)) V^T b~`` with ``G_ij`` the divided difference ``g[w_i, w_j]``, so cell ``c`` moves
    ``u_1`` by ``e_c V (psi_c o (G (psi_c o beta)))`` (``psi_c = V^T phi_c``, ``beta = V^T b~``; ``eigen``:
    ``S``'s ``(w, V)`` as :func:`_eig` gives them, if already computed). Post-processing."""
    w, V = _eig(np.asarray(S, dtype=np.float64)) if eigen is None else eigen
    den = w * w + lam * w + kappa
    g = w / den
    dw = w[:, None] - w[None, :]
    same = np.abs(dw) <= 1e-12 * max(1.0, float(np.max(w)))
    derivative = (kappa - w * w) / (den * den)
    G = np.where(same, 0.5 * (derivative[:, None] + derivative[None, :]),
                 (g[:, None] - g[None, :]) / np.where(same, 1.0, dw))
    psi = np.asarray(phi, dtype=np.float64) @ V  # [C, M]
    beta = V.T @ np.asarray(b, dtype=np.float64)  # [M]
    moved = psi * ((psi * beta[None, :]) @ G.T)  # [C, M]: row c, V^T d u per unit of e_c
    moved = moved * (np.asarray(counts, dtype=np.float64) > 0.0)[:, None]
    A = (V * g) @ V.T
    C = b_std**2 * A @ A + counts_std**2 * V @ (moved.T @ moved) @ V.T
    return 0.5 * (C + C.T)


def residual_noise_covariance(first: Any, chol: Any, P: Any, S: Any, variances: Any) -> np.ndarray:
    """``C_J`` from ``C_1 = first``: ``C_j = s_j^2 A A + B C_{j-1} B^T``, ``A = (lambda I + P)^{-1}`` (``chol``: the
    Cholesky factor of ``lambda I + P``), ``B = A (P - S)`` (:func:`~.residual.propagated_covariance`, ``S`` the
    histogram's ``S^``). Post-processing."""
    return propagated_covariance(chol, P, S, first, variances).numpy()


def _preconditioner(S: np.ndarray, floor: float, lam: float) -> Tuple[np.ndarray, np.ndarray]:
    """``(P, the lower Cholesky factor of lambda I + P)``: ``P = V max(w, floor) V^T``, ``S^`` with its eigenvalues
    raised to ``floor`` (:func:`~.posterior.regularised_statistic`, the rule's one place: one TensorFlow call per
    release). Post-processing."""
    P = regularised_statistic(S, floor).numpy()
    return P, np.linalg.cholesky(P + lam * np.eye(P.shape[0]))


class HistogramStart(NamedTuple):
    """What every later stage of the scheme reads from the histogram stage, computed once per release
    (:func:`histogram_start`; post-processing, all public)."""

    S: np.ndarray  #: [M, M] the histogram's ``S^``
    P: np.ndarray  #: [M, M] the preconditioner (``S^`` floored)
    chol: np.ndarray  #: [M, M] the lower Cholesky factor of ``lambda I + P``
    u: np.ndarray  #: [M] the first estimate ``u_1``
    eigen: Tuple[np.ndarray, np.ndarray]  #: ``S^``'s eigenvalues (negatives read as 0) and eigenvectors
    cells: Tuple[np.ndarray, np.ndarray]  #: the cells' terms of every radius (:func:`bayes_variance`)

    def radius(self, *, kernel_variance: float, noise_variance: float, b_std: float, width: float,
               z: float = HISTOGRAM_Z) -> float:
        """``R_j = min(z sqrt(sigma^2 + v), d)`` with ``v`` :func:`bayes_variance` at the previous stage's noise std
        ``b_std`` (:func:`~.residual_bounds.residual_radius`)."""
        v = bayes_variance(self.eigen[0], *self.cells, kernel_variance=kernel_variance,
                            noise_variance=noise_variance, b_std=b_std)
        return residual_radius(noise_variance, v, width, z)

    def update(self, b_j: Any, u: Any) -> np.ndarray:
        """``u_j = (lambda I + P)^{-1} (b~_j + P u_{j-1})`` (:func:`~.residual.preconditioned_update`)."""
        return preconditioned_update(self.chol, self.P, b_j, u)


def histogram_start(counts: Any, b: Any, phi: Any, *, counts_std: float, b_std: float, kernel_variance: float,
                    noise_variance: float, floor: float = PRECONDITIONER_FLOOR) -> HistogramStart:
    """``S^``, the floored preconditioner, its Cholesky factor and the noise-aware first estimate, once per release
    (module docstring), from the counts and ``b~`` (noise stds ``counts_std``, ``b_std``) and the cells' features
    ``phi``. Post-processing."""
    lam = float(noise_variance) / float(kernel_variance)
    S = histogram_statistic(counts, phi)
    eigen = _eig(S)
    P, chol = _preconditioner(S, floor * histogram_tau(phi, counts_std), lam)
    u = aware_mean(S, b, lam, float(b_std) ** 2 / float(kernel_variance), eigen)
    return HistogramStart(S, P, chol, u, eigen, _cell_terms(eigen[1], counts, phi))


class HistogramChain(NamedTuple):
    """The scheme's stages after the histogram (post-processing, all public)."""

    start: HistogramStart  #: what every stage reads from the histogram stage
    radii: List[float]  #: [R_2 .. R_J]
    estimates: List[np.ndarray]  #: [u_1 .. u_J]


def histogram_stages(start: HistogramStart, b_std: float, stage: Callable[[int, float, np.ndarray], Tuple[Any, float]],
                     count: int, *, kernel_variance: float, noise_variance: float, width: float,
                     z: float = HISTOGRAM_Z) -> HistogramChain:
    """The scheme's stages after the histogram, the one loop of a release and its replay: for ``j = 0 ..
    count - 1`` the radius from the previous stage's noise std (``b_std`` the histogram's ``b~``'s), then
    ``stage(j, radius, u_{j-1})`` gives the stage's released sum ``b~_j`` and its noise std (a release draws it, a
    replay reads it), then ``u_j``. Post-processing of what ``stage`` gives."""
    u, chain, last_std = start.u, HistogramChain(start, [], [start.u]), float(b_std)
    for j in range(count):
        radius = start.radius(kernel_variance=kernel_variance, noise_variance=noise_variance, b_std=last_std,
                              width=width, z=z)
        b_j, last_std = stage(j, radius, u)
        u = start.update(b_j, u)
        chain.radii.append(radius)
        chain.estimates.append(u)
    return chain


def histogram_chain(counts: Any, b: Any, residual_b: Any, stds: Any, phi: Any, *, counts_std: float, b_std: float,
                    kernel_variance: float, noise_variance: float, width: float, z: float = HISTOGRAM_Z,
                    floor: float = PRECONDITIONER_FLOOR) -> HistogramChain:
    """The scheme's post-processing of what its stages released (module docstring), from the counts and ``b~``
    (noise stds ``counts_std``, ``b_std``), the residual sums ``residual_b`` (rows ``b~_j``, noise stds ``stds``)
    and the cells' features ``phi``: :func:`histogram_start`, then :func:`histogram_stages` reading the released
    sums (a release runs the same two, drawing each sum). The released object of a file or built by hand and the
    audit replay them here."""
    start = histogram_start(counts, b, phi, counts_std=counts_std, b_std=b_std, kernel_variance=kernel_variance,
                            noise_variance=noise_variance, floor=floor)
    residual_b, stds = list(residual_b), [float(s) for s in stds]
    return histogram_stages(start, b_std, lambda j, radius, u: (residual_b[j], stds[j]), len(residual_b),
                            kernel_variance=kernel_variance, noise_variance=noise_variance, width=width, z=z)
