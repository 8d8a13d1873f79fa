"""What a private release hands back: one family of objects, every field safe to publish.

* :class:`PrivateRelease`: DP values at given inputs (the output of every Gaussian mechanism in
  :mod:`dpgp_gpflow.release`).
* :class:`PrivateFunction`: a release of m latent values plus a frozen :class:`~dpgp_gpflow.contract.PublicReadout`,
  queryable at any inputs at no further privacy cost (post-processing); :class:`PrivateClassifier`
  adds class probabilities. Each factors what it needs once, at construction.

All share :class:`Released`: the releases they are built from, their total ``(epsilon, delta)``
under basic composition, and a short repr (mechanism, epsilon, delta, k, r, bounds; no arrays).
Privacy assumption: none of them holds the private outputs or anything computed from them except
the released (noisy) values; every other piece is a copy of a public quantity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.base import MeanAndVariance

from .cloaking import OptimiserCertificate, row_norms
from .contract import PublicReadout
from .validation import as_inputs

__all__ = [
    "PrivateClassifier",
    "PrivateFunction",
    "PrivatePrediction",
    "PrivateRelease",
    "Released",
    "probit_approximation",
]


class Released:
    """What every released object shares: its releases, its total budget and a short repr."""

    @property
    def releases(self) -> Tuple["PrivateRelease", ...]:
        """Every release this object is built from, in order."""
        raise NotImplementedError

    # ``epsilon``, ``delta`` and ``reproducible``: fields of a PrivateRelease, totals of a PrivateFunction.

    def __repr__(self) -> str:
        last = self.releases[-1]
        steps = len(self.releases)
        return (f"{type(self).__name__}(mechanism={last.mechanism!r}, epsilon={self.epsilon:.6g}, "
                f"delta={self.delta:.6g}, k={last.mean.size}, r={last.rank}, bounds={last.y_bounds}"
                + (f", releases={steps}" if steps > 1 else "")
                + (", reproducible=True)" if self.reproducible else ")"))


@dataclass(frozen=True, repr=False)
class PrivateRelease(Released):
    """A differentially private release of GP predictions; every field is safe to publish.

    It never holds the non-private mean. ``noise_factor`` (k x r) gives the DP noise covariance
    ``noise_factor @ noise_factor.T`` (public), so users can add it to their uncertainty.
    """

    mean: np.ndarray  #: [k] released (noisy) predictive mean
    variance: np.ndarray  #: [k] public posterior variance of f (does not depend on y)
    noise_std: np.ndarray  #: [k] standard deviation of the DP noise at each point
    noise_factor: np.ndarray  #: [k, r] factor of the DP noise covariance
    epsilon: float
    delta: float
    data_sensitivity: float  #: d: how far one private output may move
    #: Sensitivity in the Mahalanobis norm of the noise covariance's shape, d included: for cloaking
    #: ``d sqrt(max_i c_i^T M^+ c_i)`` with the optimised M; for the standard mechanism the RKHS bound
    #: ``d max_j sqrt([K^-1 Kff K^-1]_jj)`` against the prior covariance. The noise std along a
    #: neighbour's shift is ``noise_multiplier * sensitivity`` in both cases.
    sensitivity: float
    noise_multiplier: float  #: unit-sensitivity Gaussian multiplier s for (epsilon, delta)
    calibration: str
    objective: Optional[str]  #: "mse" / "entropy" for cloaking, None for the standard mechanism
    certificate: Optional[OptimiserCertificate]
    mechanism: str = "cloaking"
    rank: int = 0  #: r: number of directions that receive noise
    rtol: Optional[float] = None  #: singular-value tolerance that chose r
    bias_bound: float = 0.0  #: largest worst-case |bias| of any value from projecting the mean onto r directions
    reproducible: bool = False  #: True when the noise came from an explicit seed (not private)
    y_bounds: Optional[Tuple[float, float]] = None  #: the public bounds of the private outputs

    @property
    def releases(self) -> Tuple["PrivateRelease", ...]:
        return (self,)

    def __repr__(self) -> str:
        return Released.__repr__(self)

    @property
    def total_variance(self) -> np.ndarray:
        """Posterior variance plus DP noise variance, per point."""
        return self.variance + self.noise_std**2

    @property
    def mu(self) -> float:
        """Gaussian-DP parameter of this release: sensitivity / noise std = 1 / noise_multiplier."""
        return 1.0 / self.noise_multiplier




class PrivatePrediction(NamedTuple):
    """DP predictions from a :class:`PrivateFunction` (all safe to publish), each of shape [k]."""

    mean: np.ndarray
    variance: np.ndarray
    noise_std: np.ndarray


class PrivateFunction(Released):
    """A released set of m latent values and the public readout that predicts from them anywhere.

    ``release`` is the DP release of ``R u`` (``R``: public upper-triangular reference coordinates,
    or None for ``u`` itself); predictions at ``Xnew`` are ``offset(Xnew) + A(Xnew) u~`` with
    ``u~ = R^{-1} v~`` and the DP noise ``A(Xnew) R^{-1} F`` (both mapped back once, here). Free
    to query: post-processing of the release and of public pieces only.
    """

    def __init__(self, release: PrivateRelease, readout: PublicReadout, coordinates: Optional[tf.Tensor] = None,
                 *, releases: Optional[Sequence[PrivateRelease]] = None) -> None:
        if not isinstance(readout, PublicReadout):
            raise TypeError(f"readout must be a PublicReadout, got {type(readout).__name__}")
        self.release = release
        self._releases = tuple(releases) if releases is not None else (release,)
        self._readout = readout
        #: ``R`` (upper triangular, public) with ``release`` of ``R u``; None when ``u`` itself was released
        self.coordinates = None if coordinates is None else tf.constant(coordinates)
        latent = tf.constant(release.mean[:, None])  # [M, 1]
        noise = tf.constant(release.noise_factor)  # [M, r]
        if coordinates is not None:  # u~ = R^{-1} v~: public post-processing
            latent = tf.linalg.triangular_solve(coordinates, latent, lower=False)
            noise = tf.linalg.triangular_solve(coordinates, noise, lower=False)
        self._latent = latent
        self._latent_noise = noise

    @property
    def releases(self) -> Tuple[PrivateRelease, ...]:
        return self._releases

    @property
    def epsilon(self) -> float:
        """Total epsilon of the releases (basic composition)."""
        return math.fsum(r.epsilon for r in self._releases)

    @property
    def delta(self) -> float:
        """Total delta of the releases (basic composition)."""
        return math.fsum(r.delta for r in self._releases)

    @property
    def reproducible(self) -> bool:
        """True if any release drew its noise from an explicit seed (not private against its holder)."""
        return any(r.reproducible for r in self._releases)

    @property
    def readout(self) -> PublicReadout:
        """The frozen public pieces that turn the released latents into predictions."""
        return self._readout

    def _inputs(self, Xnew: Any) -> tf.Tensor:
        return tf.constant(as_inputs("Xnew", Xnew, self._readout.input_dim))

    def _terms(self, Xnew: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """``(DP mean [k, 1], public variance [k, 1], DP noise std [k])``."""
        A = self._readout.readout(Xnew)  # [k, M]
        mean = self._readout.offset(Xnew)[:, None] + tf.linalg.matmul(A, self._latent)
        noise_std = row_norms(tf.linalg.matmul(A, self._latent_noise))  # [k]: no underflow far from the data
        return mean, self._readout.variance(Xnew)[:, None], noise_std

    def dp_noise_variance(self, Xnew: Any) -> tf.Tensor:
        """Variance [k, 1] of the DP noise propagated to the prediction at ``Xnew`` (public)."""
        return tf.square(self._terms(self._inputs(Xnew))[2])[:, None]

    def predict(self, Xnew: Any) -> PrivatePrediction:
        """DP mean, public posterior variance and DP noise std at ``Xnew``, each [k]."""
        mean, var, noise_std = self._terms(self._inputs(Xnew))
        return PrivatePrediction(mean=mean.numpy()[:, 0], variance=var.numpy()[:, 0], noise_std=noise_std.numpy())

    def predict_f(self, Xnew: Any) -> MeanAndVariance:
        """DP mean [k, 1] and variance [k, 1]: the public posterior variance plus the DP noise variance."""
        mean, var, noise_std = self._terms(self._inputs(Xnew))
        return mean, var + tf.square(noise_std)[:, None]


@check_shapes("mean: [M, 1]", "var: [M, 1]", "return: [M, 1]")
def probit_approximation(mean: tf.Tensor, var: tf.Tensor) -> tf.Tensor:
    """``E[sigmoid(f*)] ~= sigmoid(mean / sqrt(1 + pi var / 8))`` for ``f* ~ N(mean, var)``.

    MacKay's (1992) probit approximation of the logistic-Gaussian integral (GPML eq. 3.25
    discussion; Bishop PRML eq. 4.153): replace the sigmoid by ``Phi(sqrt(pi / 8) f)``, whose
    Gaussian integral is closed form. Error below about 0.02 in probability.
    """
    return tf.sigmoid(mean / tf.sqrt(1.0 + math.pi * var / 8.0))


class PrivateClassifier(PrivateFunction):
    """A released GP classifier (labels in {-1, +1}): :class:`PrivateFunction` on the latent ``f``.

    ``predict_f`` returns the latent mean and the latent variance *including* the DP noise variance;
    ``predict_y`` the probability of class +1 by the probit approximation on them and ``p (1 - p)``.
    """

    def predict_y(self, Xnew: Any) -> MeanAndVariance:
        """Probability of class +1 [k, 1] (probit approximation) and its Bernoulli variance ``p (1 - p)``."""
        mean, var = self.predict_f(Xnew)
        p = probit_approximation(mean, var)
        return p, p * (1.0 - p)

    def predict_class(self, Xnew: Any) -> np.ndarray:
        """Predicted labels in {-1, +1} [k, 1]: the sign of the latent mean (p >= 1/2 gives +1)."""
        mean, _ = self.predict_f(Xnew)
        return np.where(mean.numpy() >= 0.0, 1.0, -1.0)
