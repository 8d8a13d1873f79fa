"""What an auditor runs on a published release: :func:`audit` recomputes the privacy it achieves.

From the release's published noise factor ``F`` (k x r) and the model's public cloaking map ``C``
(k x n), the neighbour that moves output i by ``d`` shifts the released vector by ``d P c_i``
(``P``: the projector onto the noised directions, ``span(F)``; a cloaking release projects its mean
there), a Gaussian mechanism with ``mu = d max_i ||F^+ c_i||``. Its exact ``epsilon`` at the release's ``delta`` follows from the analytic
Gaussian privacy profile (``docs/mechanisms.md#calibration``). Nothing here reads the private
outputs or trusts a number the release reports about itself except its noise factor and its
``(epsilon, delta)`` claim; the cloaking map is recomputed from the model (public).

Privacy assumption of the audit itself: the model holds the same public inputs and hyperparameters
as when the release was made (for :class:`~dpgp_gpflow.released.PrivateRelease`, pass the same
``Xnew``).
"""

from __future__ import annotations

import math
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from .calibration import analytic_gaussian_epsilon
from .contract import FactoredPrivateModel, PrivateModel, dense_map
from .released import PrivateFunction, PrivateRelease, Released

__all__ = ["AuditReport", "ReleaseAudit", "audit", "audit_release"]

#: Relative slack for floating point when comparing the achieved with the claimed epsilon.
AUDIT_RTOL = 1e-6


class ReleaseAudit(NamedTuple):
    """The audit of one Gaussian release."""

    mu: float  #: Gaussian-DP parameter achieved: ``d max_i ||F^+ c_i||``
    epsilon: float  #: exact epsilon at ``delta``
    delta: float
    claimed_epsilon: float
    #: largest relative part of a column of ``C`` outside ``span(F)``: projected away by the release
    #: (a bias of the published values, not a privacy loss: the shift is ``d P c_i``)
    projected_fraction: float
    passed: bool


class AuditReport(NamedTuple):
    """The audit of a released object: one :class:`ReleaseAudit` per release, and their total."""

    releases: Tuple[ReleaseAudit, ...]
    epsilon: float  #: total achieved epsilon (basic composition of the releases)
    delta: float  #: total delta
    passed: bool


def audit_release(release: PrivateRelease, C: Any) -> ReleaseAudit:
    """Audit one release against the public map ``C`` (k x n) it was computed with."""
    F = np.asarray(release.noise_factor, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    if C.shape[0] != F.shape[0]:
        raise ValueError(f"the map has {C.shape[0]} rows but the release has {F.shape[0]} values")
    U, s, _ = np.linalg.svd(F, full_matrices=False)
    keep = s > s[0] * 1e-14
    U, s = U[:, keep], s[keep]
    coords = U.T @ C  # [r, n]
    norms = np.linalg.norm(C, axis=0)
    outside = np.linalg.norm(C - U @ coords, axis=0)
    projected = float(np.max(np.where(norms > 0, outside / np.where(norms > 0, norms, 1.0), 0.0)))
    mu = float(release.data_sensitivity * np.max(np.linalg.norm(coords / s[:, None], axis=0)))
    epsilon = analytic_gaussian_epsilon(mu, release.delta)
    passed = epsilon <= release.epsilon * (1.0 + AUDIT_RTOL)
    return ReleaseAudit(mu, float(epsilon), float(release.delta), float(release.epsilon), projected, passed)


def _maps(released: Released, model: Any, Xnew: Any) -> List[np.ndarray]:
    """The public map of each release in ``released``, recomputed from ``model``."""
    if isinstance(released, PrivateRelease):
        if Xnew is None:
            raise ValueError("pass the inputs the release was made at (Xnew=...)")
        return [dense_map(model.release_terms(tf.constant(np.asarray(Xnew, dtype=np.float64))).map).numpy()]
    if hasattr(model, "release_maps"):  # releases whose later maps depend on earlier releases (Newton steps)
        return [np.asarray(C) for C in model.release_maps(released.releases)]
    if isinstance(released, PrivateFunction) and isinstance(model, FactoredPrivateModel):
        B = dense_map(model.latent_terms().map).numpy()
        R = released.coordinates
        return [B if R is None else R.numpy() @ B]
    raise TypeError(f"cannot recompute the maps of a {type(released).__name__} from a {type(model).__name__}")


def audit(released: Released, model: PrivateModel, Xnew: Optional[Any] = None) -> AuditReport:
    """Recompute the (epsilon, delta) that ``released`` achieves from its published noise and
    ``model``'s public cloaking maps, over all neighbours; ``passed`` when no release exceeds its
    claim. ``Xnew``: the inputs of a :class:`~dpgp_gpflow.released.PrivateRelease`."""
    if not isinstance(released, Released):
        raise TypeError(f"expected a released object, got {type(released).__name__}")
    maps: Sequence[np.ndarray] = _maps(released, model, Xnew)
    reports = tuple(audit_release(r, C) for r, C in zip(released.releases, maps))
    return AuditReport(reports, math.fsum(r.epsilon for r in reports), math.fsum(r.delta for r in reports),
                       all(r.passed for r in reports))
