"""What a whole-row release hands back: :class:`WholeRowsRelease`, the released statistics and the sparse GP
they define, queryable anywhere.

It holds the noised statistics exactly as released (:attr:`WholeRowsRelease.statistics`) with the std of
each entry's noise (:attr:`WholeRowsRelease.statistics_noise_std`), so that anyone can recompute every
prediction from them, and the public pieces (the unit-scale kernel, ``Z``, the box, the bounds, the
variances given or fitted on the statistics). Predictions are post-processing
(:mod:`dpgp_gpflow.whole_rows.posterior`): free, anywhere.

Privacy assumption: nothing here holds the private rows or anything computed from them except the released
statistics; every other piece is public.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, Optional, Tuple

import numpy as np
import tensorflow as tf

from ..io.card import whole_rows_summary
from ..io.writing import register, whole_rows_content
from ..released import PrivatePrediction, Released
from ..validation import as_inputs, check_real
from .features import FeatureMap
from .mechanism import NoisedStatistics, relation
from .posterior import (
    WeightPosterior,
    predictive_terms,
    regularised_posterior,
    regularised_release,
    weight_posterior,
)
from .variances import fit_variances, sgpr_bound

__all__ = ["WholeRowsRelease"]

#: How a release sets the kernel variance and the noise variance: the values given, or fitted on the
#: released statistics (:func:`~dpgp_gpflow.whole_rows.variances.fit_variances`).
VARIANCES = ("given", "fit")


def checked_variances(kernel_variance: Any, noise_variance: Any) -> Tuple[float, float]:
    """Both variances as floats, each finite and > 0 (``ValueError`` / ``TypeError`` otherwise)."""
    kernel_variance = check_real("kernel_variance", kernel_variance)
    noise_variance = check_real("noise_variance", noise_variance)
    if not (kernel_variance > 0.0 and noise_variance > 0.0):
        raise ValueError(f"kernel_variance and noise_variance must be > 0, got {kernel_variance}, {noise_variance}")
    return kernel_variance, noise_variance


class StatisticsRelease:
    """Mixin: what every release of noised whole-row statistics holds (:class:`WholeRowsRelease`,
    :class:`~dpgp_gpflow.whole_rows.classification.WholeRowsClassifier`): the released statistics
    (``_statistics``), their noise std (``_noise_std``), the guarantee (``_epsilon``, ``_delta``) and whether the
    noise came from an explicit seed (``_reproducible``), set by the subclass; its ``statistics`` property says
    their shapes."""

    _statistics: Dict[str, np.ndarray]
    _noise_std: Dict[str, np.ndarray]
    _epsilon: float
    _delta: float
    _reproducible: bool

    @property
    def statistics_noise_std(self) -> Dict[str, np.ndarray]:
        """The std of the Gaussian noise of each entry of :attr:`statistics`, same keys and shapes (copies)."""
        return {k: v.copy() for k, v in self._noise_std.items()}

    @property
    def epsilon(self) -> float:
        """The release's epsilon."""
        return self._epsilon

    @property
    def delta(self) -> float:
        """The release's delta."""
        return self._delta

    @property
    def reproducible(self) -> bool:
        """True when the noise came from an explicit seed (not private against its holder)."""
        return self._reproducible

    @property
    def releases(self) -> Tuple[Any, ...]:
        """No :class:`~dpgp_gpflow.released.PrivateRelease` parts: one release of statistics (:meth:`privacy_card`)."""
        return ()


class RegressionPredictions:
    """Mixin: the predictions of a whole-row regression release (:class:`WholeRowsRelease`,
    :class:`~dpgp_gpflow.whole_rows.residual_release.ResidualRelease`) from its ``_terms(Xnew)``: the mean (clipped
    to ``y_bounds`` when ``clip_to_bounds``), the model's variance and the first-order variance the DP noise adds
    to the mean, each [k, 1] NumPy. Post-processing of what was released."""

    _clip_to_bounds: bool
    noise_variance: float
    y_bounds: Tuple[float, float]

    @property
    def clip_to_bounds(self) -> bool:
        """Predicted means are clipped to ``y_bounds`` (post-processing; :meth:`unclipped` for the raw ones)."""
        return self._clip_to_bounds

    @property
    def midpoint(self) -> float:
        """``c``: the outputs were centred at the bounds' midpoint (the prior mean)."""
        return 0.5 * (self.y_bounds[0] + self.y_bounds[1])

    def _terms(self, Xnew: Any) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    def clipped(self):
        """Predicted means clipped to ``y_bounds`` (post-processing, the default)."""
        other = copy.copy(self)
        other._clip_to_bounds = True
        return other

    def unclipped(self):
        """Raw predicted means (may lie outside ``y_bounds``; as private)."""
        other = copy.copy(self)
        other._clip_to_bounds = False
        return other

    def predict_f(self, Xnew: Any) -> Tuple[np.ndarray, np.ndarray]:
        """DP mean and variance of f at ``Xnew`` [k, D], each [k, 1] NumPy: the model's variance plus the DP
        noise's (first order)."""
        mean, model, noise = self._terms(Xnew)
        return mean, model + noise

    def predict_y(self, Xnew: Any) -> Tuple[np.ndarray, np.ndarray]:
        """As :meth:`predict_f` with the noise variance added (a new observation's variance)."""
        mean, variance = self.predict_f(Xnew)
        return mean, variance + self.noise_variance

    def predict(self, Xnew: Any) -> PrivatePrediction:
        """DP mean, the model's posterior variance and the DP noise std at ``Xnew``, each [k, 1] NumPy."""
        mean, model, noise = self._terms(Xnew)
        return PrivatePrediction(mean=mean, variance=model, noise_std=np.sqrt(noise))


class WholeRowsRelease(RegressionPredictions, StatisticsRelease, Released):
    """A DP release of the whole-row statistics ``(S, b, q)`` and the sparse GP they define.

    ``predict_f(Xnew)`` gives the mean and variance [k, 1] (NumPy) anywhere: the mean ``c + phi(x)^T u`` (clipped
    to ``y_bounds`` when :attr:`clip_to_bounds`), the variance SGPR's plus the first-order variance the DP noise
    adds to the mean (:func:`~dpgp_gpflow.whole_rows.posterior.predictive_terms`). ``statistics`` and
    ``statistics_noise_std`` are what was released (unit kernel scale, outputs centred at the bounds' midpoint;
    ``S`` symmetric, released through its upper triangle). Built by
    :func:`~dpgp_gpflow.whole_rows.release.release_rows` (or ``DPSGPR(..., private_inputs=True).release_function``).
    """

    posterior: WeightPosterior  #: the weights' posterior its predictions read (post-processing of the release)

    def __init__(self, noised: NoisedStatistics, features: FeatureMap, *, x_bounds: np.ndarray,
                 y_bounds: Tuple[float, float], epsilon: float, delta: float, calibration: str,
                 kernel_variance: Optional[float], noise_variance: Optional[float], variances: str = "given",
                 clip_to_bounds: bool = True) -> None:
        if variances not in VARIANCES:
            raise ValueError(f"variances must be one of {VARIANCES}, got {variances!r}")
        if not isinstance(clip_to_bounds, bool):
            raise TypeError(f"clip_to_bounds must be True or False, got {clip_to_bounds!r}")
        self._statistics = {k: np.array(v, dtype=np.float64, copy=True) for k, v in noised.statistics.items()}
        self._noise_std = {k: np.array(v, dtype=np.float64, copy=True) for k, v in noised.noise_std.items()}
        self.features = features
        self.num_data = int(noised.num_data)
        self._epsilon, self._delta, self.calibration = float(epsilon), float(delta), str(calibration)
        self.noise_multiplier = float(noised.multiplier)
        self.sensitivity = float(noised.sensitivity)
        self.shares = tuple(noised.shares)
        #: the most rows of one person the release protects together (1: one row; public)
        self.person_rows = int(noised.person_rows)
        #: the longest chunk's rows and the number of chunks summed (public; the sums' rounding depends on them)
        self.chunking = (int(noised.chunking[0]), int(noised.chunking[1]))
        self._reproducible = bool(noised.reproducible)
        self.x_bounds = np.array(x_bounds, dtype=np.float64, copy=True)
        self.y_bounds = (float(y_bounds[0]), float(y_bounds[1]))
        self._clip_to_bounds = clip_to_bounds
        self.variances = variances
        #: the lengthscale choice when this release was chosen from a grid (:meth:`with_selection`), else None
        self.selection: Optional[Dict[str, Any]] = None
        self.candidates: Tuple["WholeRowsRelease", ...] = ()
        # offdiag_std: the std of an off-diagonal entry's noise of ``S`` (the diagonal's is sqrt(2) times it);
        # spectral_bound: the bound tau of that noise; floor: the eigenvalue floor ``FLOOR_SCALE * tau`` (public)
        if variances == "fit":
            self.offdiag_std, self.spectral_bound, self.floor, self._S_hat = regularised_release(
                self._statistics["S"], self._noise_std["S"])
            self._set_variances(*self._fitted())
        else:  # the same, with the posterior at the variances given, in one call
            self.kernel_variance, self.noise_variance = checked_variances(kernel_variance, noise_variance)
            regularised, self.posterior = regularised_posterior(
                self._statistics["S"], self._noise_std["S"], self._statistics["b"],
                kernel_variance=self.kernel_variance, noise_variance=self.noise_variance, b_std=self._b_std)
            self.offdiag_std, self.spectral_bound, self.floor, self._S_hat = regularised

    # -- what was released ----------------------------------------------------------------------------
    @property
    def statistics(self) -> Dict[str, np.ndarray]:
        """The released (noised) statistics at unit kernel scale: ``S`` [M, M] (symmetric), ``b`` [M], ``q`` []
        (copies)."""
        return {k: v.copy() for k, v in self._statistics.items()}

    @property
    def regularised_S(self) -> tf.Tensor:
        """``S^`` [M, M]: the released ``S~`` regularised at :attr:`floor`, as the posterior reads it
        (:func:`~dpgp_gpflow.whole_rows.posterior.regularised_release`; post-processing)."""
        return self._S_hat

    @property
    def neighbours(self) -> str:
        """The relation protected: ``"row (inputs and outputs)"``, or ``"person (groups, up to G rows) (inputs and
        outputs)"`` with persons."""
        return relation(self.person_rows)

    @property
    def lengthscales(self) -> Any:
        """The lengthscales of the released features' kernel (a list, or a number; None for a kernel without)."""
        values = getattr(self.features.kernel, "lengthscales", None)
        return None if values is None else np.asarray(values.numpy(), dtype=np.float64).tolist()

    # -- the variances (post-processing) --------------------------------------------------------------
    def _fitted(self) -> Tuple[float, float]:
        return fit_variances(self._S_hat, self._statistics["b"], float(self._statistics["q"]),
                             float(np.trace(self._statistics["S"])), self.num_data, self._b_std,
                             self.y_bounds[1] - self.y_bounds[0], q_std=float(self._noise_std["q"]),
                             offdiag_std=self.offdiag_std)

    @property
    def _b_std(self) -> float:
        return float(self._noise_std["b"][0])

    def _set_variances(self, kernel_variance: Any, noise_variance: Any) -> None:
        kernel_variance, noise_variance = checked_variances(kernel_variance, noise_variance)
        self.kernel_variance, self.noise_variance = kernel_variance, noise_variance
        self.posterior = weight_posterior(
            self._S_hat, tf.constant(self._statistics["b"]), kernel_variance=kernel_variance,
            noise_variance=noise_variance, b_std=self._b_std, offdiag_std=self.offdiag_std)

    def bound(self) -> float:
        """SGPR's collapsed bound of the clipped, centred outputs at this release's variances, evaluated on the
        released statistics (:func:`~dpgp_gpflow.whole_rows.variances.sgpr_bound`; post-processing)."""
        return float(sgpr_bound(self._S_hat, self._statistics["b"], float(self._statistics["q"]),
                                float(np.trace(self._statistics["S"])), self.num_data, self._b_std,
                                self.kernel_variance, self.noise_variance, q_std=float(self._noise_std["q"]),
                                offdiag_std=self.offdiag_std))

    def with_selection(self, candidates: Tuple["WholeRowsRelease", ...], lengthscales: Any, bounds: Any,
                       chosen: int) -> "WholeRowsRelease":
        """This release (candidate ``chosen`` of a grid released together) recording the grid: ``candidates``
        (every candidate's release, its statistics as released), their ``lengthscales`` and fitted ``bounds``."""
        other = copy.copy(self)
        other.candidates = tuple(candidates)
        other.selection = {"lengthscales": [np.asarray(v, dtype=np.float64).tolist() for v in lengthscales],
                           "bounds": [float(v) for v in bounds], "chosen": int(chosen)}
        return other

    def with_variances(self, kernel_variance: Optional[float] = None,
                       noise_variance: Optional[float] = None) -> "WholeRowsRelease":
        """This release with another kernel variance and / or noise variance (public values; post-processing)."""
        other = copy.copy(self)
        other.variances = "given"
        other._set_variances(self.kernel_variance if kernel_variance is None else kernel_variance,
                             self.noise_variance if noise_variance is None else noise_variance)
        return other

    def fitted(self) -> "WholeRowsRelease":
        """This release with both variances fitted on the released statistics (SGPR's bound; post-processing)."""
        other = copy.copy(self)
        other.variances = "fit"
        other._set_variances(*self._fitted())
        return other

    # -- predictions ---------------------------------------------------------------------------------
    def _terms(self, Xnew: Any) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        X = tf.constant(as_inputs("Xnew", Xnew, self.features.input_dim))
        mean, model, noise = predictive_terms(self.posterior, self.features(X), self.features.unit_variance(X))
        mean = mean.numpy() + self.midpoint
        if self.clip_to_bounds:
            mean = np.clip(mean, *self.y_bounds)
        return mean[:, None], model.numpy()[:, None], noise.numpy()[:, None]

    # -- card, repr, files ---------------------------------------------------------------------------
    def privacy_card(self) -> Dict[str, Any]:
        """The guarantee and what was released, as plain values: relation ``"row (inputs and outputs)"``,
        epsilon, delta, the box, the bounds, n, M, the sensitivity, multiplier and shares."""
        return {"epsilon": self.epsilon, "delta": self.delta, "reproducible": self.reproducible,
                "clip_to_bounds": self.clip_to_bounds, "neighbours": self.neighbours,
                "mechanism": "gaussian (whole-row statistics)", "calibration": self.calibration,
                "noise_multiplier": self.noise_multiplier, "sensitivity": self.sensitivity,
                "shares": list(self.shares), "x_bounds": self.x_bounds.tolist(), "y_bounds": list(self.y_bounds),
                "num_data": self.num_data, "num_inducing": self.features.m, "person_rows": self.person_rows,
                "chunking": list(self.chunking),
                "variances": self.variances, "kernel_variance": self.kernel_variance,
                "noise_variance": self.noise_variance, "lengthscales": self.lengthscales,
                "lengthscale_candidates": None if self.selection is None else self.selection["lengthscales"]}

    def __repr__(self) -> str:
        return whole_rows_summary(self.privacy_card())  # as ``dpgp show`` prints it from the file's card


register(WholeRowsRelease, whole_rows_content)  # its file: dpgp_gpflow.io.writing
