"""Differentially private hyperparameter selection: the exponential mechanism over a CV utility.

JMLR 2021, section 5 (Algorithm 1), with the sensitivity corrected (DESIGN 5.5). For every
configuration ``theta`` of a public grid and every fold ``f`` of a public cross-validation split,
the fold's predictions at its test inputs are linear in the private training outputs,

    pred_f = offset_f + C_f y[train_f]            (C_f: k_f x m_f, public; offset_f public),

and the utility is minus the cross-validated sum of clipped squared residuals, with the DP noise of
the eventual release included by its closed-form expectation:

    u(theta) = - sum_f sum_{k in test_f} E[ clip(pred_k - y_k + Z_k, -4d, 4d)^2 ],   Z_k ~ N(0, s_k^2),

``s_k`` being the std of the DP noise a cloaking release of ``pred_f`` at ``(epsilon_release,
delta_release)`` would add at test point k (a function of the public ``C_f`` only; no noise is drawn).
One configuration is drawn with probability proportional to ``exp(epsilon u / (2 Delta_u))``
(Gumbel-max), which is epsilon-DP when ``Delta_u`` bounds the change of every utility between
neighbouring datasets.

**The sensitivity.** Neighbours differ in one output: ``|y_j - y'_j| <= d``. Write
``h(a) = clip(a, -c, c)^2`` with ``c = 4d``; ``h`` is ``2c = 8d``-Lipschitz (its derivative is
``2a`` on ``(-c, c)`` and 0 outside), and so is ``a -> E h(a + Z)`` for any noise ``Z`` (an
average of 8d-Lipschitz functions), so including the expected noise changes nothing below.

* In a fold where ``j`` trains, changing ``y_j`` by ``gamma`` moves each prediction by
  ``gamma C_f[k, j]``, so each test residual by at most ``d |C_f[k, j]|`` and the fold's sum by at
  most ``8 d^2 ||C_f[:, j]||_1``.
* In a fold where ``j`` is tested, its own residual moves by at most ``d``: at most ``8 d^2``.
  (If a user-given split puts ``j`` in a fold's training and test sets at once, the residual moves
  by ``|C_f[j, j] - 1| d <= (|C_f[j, j]| + 1) d``, which the two terms above already cover.)

Summing over folds (the same ``y_j`` changes in every fold) and taking the worst point,

    Delta(theta) = 8 d^2 max_j sum_f ( [j in train_f] ||C_f[:, j]||_1 + [j in test_f] ),

and ``Delta_u = max_theta Delta(theta)`` over the configurations kept after the optional public
threshold (a configuration's ``Delta(theta)`` depends on public inputs only, so dropping those
above a threshold fixed in advance is free). For ordinary kappa-fold CV every point is tested
once, giving DESIGN 5.5's ``8 d^2 (sum over folds where j trains of ||c_j||_1) + 8 d^2``.

**The published bound is not valid.** JMLR equation (13) bounds the change of a fold's SSE by
``d^2 max_j ||c_j||_2^2``: the change of a squared distance ``||a + v||^2 - ||a||^2`` is
``2 a.v + ||v||^2``, and the ``2 a.v`` term is missing. :func:`published_sensitivity` computes it,
for comparison only; the tests exhibit neighbours whose utilities differ by more.

**What may be published.** Only the choice (``Selection.chosen`` / ``index``) is epsilon-DP; the
grid, the splits, the thresholds and all sensitivities are public. ``Selection.utilities`` and
``Selection.probabilities`` are computed from the private outputs: diagnostics for the data owner,
never to be published.

Randomness: the Gumbel noise comes from the operating system's CSPRNG (``secrets.SystemRandom``)
unless an explicit ``seed`` is given, which warns (:class:`~dpgp_gpflow.ReproducibleNoiseWarning`).
Floating-point sampling of the exponential mechanism is not exact (Ilvento 2020); this is the
usual caveat, not a known attack on this implementation.
"""

from __future__ import annotations

import math
import secrets
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf
from gpflow.utilities import deepcopy, multiple_assign, parameter_dict
from scipy import special

from .accounting import PrivacyAccountant, current_accountant
from .calibration import (
    CALIBRATIONS,
    exponential_mechanism_log_weights,
    gaussian_multiplier,
    validate_delta,
    validate_epsilon,
)
from .cloaking import DEFAULT_TOL, OBJECTIVES
from .exceptions import ReproducibleNoiseWarning
from .release import NoisePlan
from .validation import validate_data_sensitivity

__all__ = [
    "CLIP_FACTOR",
    "CrossValidation",
    "Fold",
    "Selection",
    "cross_validate",
    "cv_folds",
    "cv_predictions",
    "cv_sensitivity",
    "cv_utility",
    "expected_clipped_square",
    "exponential_mechanism",
    "point_sensitivities",
    "published_sensitivity",
    "release_noise_std",
    "select_hyperparameters",
    "selection_probabilities",
]

#: Residuals are clipped to ``[-CLIP_FACTOR * d, CLIP_FACTOR * d]`` (the JMLR paper's 4d).
CLIP_FACTOR = 4.0

Config = Mapping[str, Any]
Split = Tuple[np.ndarray, np.ndarray]


# ---------------------------------------------------------------------------------------------
# Generic pieces: arbitrary per-fold cloaking matrices (numpy), no GPflow


class Fold(NamedTuple):
    """One CV fold of a linear smoother: ``pred = offset + C y[train]`` at the test points. Public."""

    train: np.ndarray  #: [m] indices of the training points
    test: np.ndarray  #: [k] indices of the test points
    C: np.ndarray  #: [k, m] cloaking matrix of the fold
    offset: Optional[np.ndarray] = None  #: [k] public part of the prediction (None: zeros)


def _as_folds(folds: Sequence[Fold]) -> List[Fold]:
    out = []
    for f in folds:
        train = np.asarray(f.train, dtype=np.int64).reshape(-1)
        test = np.asarray(f.test, dtype=np.int64).reshape(-1)
        C = np.asarray(f.C, dtype=np.float64)
        if C.shape != (test.size, train.size):
            raise ValueError(f"a fold's C must have shape (len(test), len(train)) = {(test.size, train.size)}, "
                             f"got {C.shape}")
        offset = np.zeros(test.size) if f.offset is None else np.asarray(f.offset, dtype=np.float64).reshape(-1)
        if offset.shape != (test.size,):
            raise ValueError(f"a fold's offset must have shape ({test.size},), got {offset.shape}")
        out.append(Fold(train, test, C, offset))
    return out


def _normal_interval(alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """``Phi(beta) - Phi(alpha)`` for ``alpha <= beta`` without cancellation in either tail."""
    upper = alpha >= 0.0  # both in the upper tail: Phi(-alpha) - Phi(-beta)
    lower = beta <= 0.0  # both in the lower tail
    mid = ~(upper | lower)  # straddles 0: erf difference of two moderate numbers
    out = np.empty_like(alpha)
    out[upper] = special.ndtr(-alpha[upper]) - special.ndtr(-beta[upper])
    out[lower] = special.ndtr(beta[lower]) - special.ndtr(alpha[lower])
    out[mid] = 0.5 * (special.erf(beta[mid] / math.sqrt(2.0)) - special.erf(alpha[mid] / math.sqrt(2.0)))
    return np.clip(out, 0.0, 1.0)


_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(64)


def expected_clipped_square(a: Any, sigma: Any, c: float) -> np.ndarray:
    """``E[clip(a + Z, -c, c)^2]`` for ``Z ~ N(0, sigma^2)``, elementwise, in closed form.

    With ``alpha = (-c - a) / sigma`` and ``beta = (c - a) / sigma`` (``phi``, ``Phi`` the standard
    normal pdf and cdf)::

        c^2 (Phi(alpha) + Phi(-beta))                                   (the clipped tails)
            + (a^2 + sigma^2) (Phi(beta) - Phi(alpha))
            + sigma ((a - c) phi(alpha) - (a + c) phi(beta))            (int over [-c, c] of x^2 N(x; a, sigma^2))

    For ``sigma > c`` the last two terms nearly cancel (each is about ``c sigma``, their sum about
    ``c^3 / sigma``), so there the inner integral is computed by 64-point Gauss-Legendre quadrature
    on ``[-c, c]`` instead, where the integrand is smooth (exact to rounding). ``sigma = 0`` gives
    ``clip(a, -c, c)^2`` and ``sigma = inf`` gives ``c^2``. As a function of ``a`` it is ``2c``-Lipschitz for every ``sigma``.
    """
    a = np.asarray(a, dtype=np.float64)
    sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float64), a.shape)
    c = float(c)
    if not c > 0.0:
        raise ValueError(f"c must be > 0, got {c}")
    if np.any(sigma < 0.0) or np.any(np.isnan(sigma)):
        raise ValueError("sigma must be >= 0 (inf: the point is always clipped)")
    if not np.all(np.isfinite(a)):
        raise ValueError("a must be finite")
    out = np.array(np.clip(a, -c, c) ** 2, dtype=np.float64, copy=True)
    out[np.isinf(sigma)] = c * c
    pos = (sigma > 0.0) & np.isfinite(sigma)
    if np.any(pos):
        ap, s = a[pos], sigma[pos]
        alpha = (-c - ap) / s
        beta = (c - ap) / s
        tails = special.ndtr(alpha) + special.ndtr(-beta)
        inner = np.empty_like(ap)
        narrow = s <= c
        if np.any(narrow):
            an, sn, al, be = ap[narrow], s[narrow], alpha[narrow], beta[narrow]
            pa = np.exp(-0.5 * al**2) / math.sqrt(2.0 * math.pi)
            pb = np.exp(-0.5 * be**2) / math.sqrt(2.0 * math.pi)
            inner[narrow] = (an * an + sn * sn) * _normal_interval(al, be) + sn * ((an - c) * pa - (an + c) * pb)
        wide = ~narrow
        if np.any(wide):
            x = c * _GL_NODES  # [q] nodes on [-c, c]
            aw, sw = ap[wide][:, None], s[wide][:, None]
            density = np.exp(-0.5 * ((x[None, :] - aw) / sw) ** 2) / (sw * math.sqrt(2.0 * math.pi))
            inner[wide] = c * np.sum(_GL_WEIGHTS[None, :] * x[None, :] ** 2 * density, axis=1)
        out[pos] = np.clip(c * c * tails + inner, 0.0, c * c)
    return out


def cv_predictions(folds: Sequence[Fold], y: Any) -> List[np.ndarray]:
    """Each fold's predictions ``offset + C y[train]`` at its test points."""
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    return [f.offset + f.C @ y[f.train] for f in _as_folds(folds)]


def cv_utility(folds: Sequence[Fold], y: Any, d: float, noise_std: Optional[Sequence[Any]] = None) -> float:
    """``-sum_f sum_k E[clip(pred_k - y_k + Z_k, -4d, 4d)^2]`` (``noise_std[f]``: the std of ``Z`` per
    test point of fold f; None for no noise). Reads the private ``y``: the result is private."""
    folds = _as_folds(folds)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    c = CLIP_FACTOR * float(d)
    total = 0.0
    for i, f in enumerate(folds):
        residual = f.offset + f.C @ y[f.train] - y[f.test]
        sigma = 0.0 if noise_std is None else np.asarray(noise_std[i], dtype=np.float64)
        total += float(np.sum(expected_clipped_square(residual, sigma, c)))
    return -total


def point_sensitivities(folds: Sequence[Fold], n: int, d: float) -> np.ndarray:
    """Per point j: ``8 d^2 sum_f ([j in train_f] ||C_f[:, j]||_1 + [j in test_f])`` (module docstring).

    The bound on how much the CV utility moves when ``y_j`` moves by at most ``d``. Public.
    """
    folds = _as_folds(folds)
    d = float(d)
    total = np.zeros(int(n))
    for f in folds:
        np.add.at(total, f.train, np.sum(np.abs(f.C), axis=0))
        np.add.at(total, f.test, 1.0)
    return 2.0 * CLIP_FACTOR * d * d * total


def cv_sensitivity(folds: Sequence[Fold], n: int, d: float) -> float:
    """The corrected sensitivity of the CV utility: ``max_j`` of :func:`point_sensitivities`."""
    return float(np.max(point_sensitivities(folds, n, d)))


def published_sensitivity(folds: Sequence[Fold], d: float) -> float:
    """JMLR 2021 equations (13): ``9 d^2 + d^2 * (sum of the kappa - 1 largest max_j ||C_f[:, j]||_2^2)``.

    **NOT a valid DP bound** (it drops the ``2 a.v`` term of a change in squared distance); kept
    only to reproduce and compare with the published numbers (toy example: 116, interleaved: 53).
    Take the max over configurations for equation (14).
    """
    folds = _as_folds(folds)
    d = float(d)
    alphas = sorted((float(np.max(np.sum(f.C**2, axis=0))) if f.C.size else 0.0 for f in folds), reverse=True)
    return 9.0 * d * d + d * d * math.fsum(alphas[: max(len(folds) - 1, 0)])


# ---------------------------------------------------------------------------------------------
# The exponential mechanism


def selection_probabilities(utilities: Any, epsilon: float, sensitivity: float) -> np.ndarray:
    """``softmax(epsilon u / (2 sensitivity))``: the exponential mechanism's selection probabilities."""
    w = exponential_mechanism_log_weights(utilities, epsilon, sensitivity)
    w = w - np.max(w)
    p = np.exp(w)
    return p / np.sum(p)


def _gumbel(size: int, rng: Union[secrets.SystemRandom, np.random.Generator]) -> np.ndarray:
    if isinstance(rng, np.random.Generator):
        return rng.gumbel(size=size)
    out = np.empty(size)
    for i in range(size):
        e = 0.0
        while not e > 0.0:  # Exp(1) = 0 has probability 2^-53; redraw rather than return +inf
            e = rng.expovariate(1.0)
        out[i] = -math.log(e)
    return out


def _gumbel_max(log_weights: np.ndarray, rng) -> int:
    return int(np.argmax(np.asarray(log_weights, dtype=np.float64) + _gumbel(len(log_weights), rng)))


def _rng(seed: Optional[int], stacklevel: int = 3):
    if seed is None:
        return secrets.SystemRandom(), False
    warnings.warn(
        f"the exponential mechanism's noise was drawn from an explicit seed ({seed!r}): the selection is "
        "reproducible and NOT private against anyone who knows the seed; use seed=None",
        ReproducibleNoiseWarning,
        stacklevel=stacklevel,
    )
    return np.random.default_rng(seed), True


def exponential_mechanism(utilities: Any, epsilon: float, sensitivity: float, *,
                          seed: Optional[int] = None) -> Tuple[int, np.ndarray]:
    """One epsilon-DP draw ``argmax(epsilon u / (2 sensitivity) + Gumbel)``; returns ``(index, probabilities)``.

    The probabilities are private (functions of the utilities); only the index may be published.
    Charges nothing: :func:`select_hyperparameters` does the accounting.
    """
    log_w = exponential_mechanism_log_weights(utilities, epsilon, sensitivity)
    rng, _ = _rng(seed)
    return _gumbel_max(log_w, rng), selection_probabilities(utilities, epsilon, sensitivity)


# ---------------------------------------------------------------------------------------------
# DP noise of the eventual release, without drawing it


class _NoiseProfile:
    """The noise std per point of ``release.cloaking_release(C, ...)`` as a function of the noise
    multiplier, without drawing noise: :class:`~dpgp_gpflow.release.NoisePlan` (the release's own
    rank rule, cached across multipliers). Public: depends on ``C`` and the public output bound only.

    If the release would be refused (``FloatingPointError``: an ill-conditioned noise covariance),
    the std is ``inf``: that configuration could not be released, and its utility is the worst one.
    """

    def __init__(self, C, *, data_sensitivity: float, output_bound: float, objective: str,
                 rtol: Optional[float] = None, tol: float = DEFAULT_TOL, max_iter: int = 500) -> None:
        self._plan = NoisePlan(C, data_sensitivity=data_sensitivity, output_bound=output_bound,
                               objective=objective, rtol=rtol, tol=tol, max_iter=max_iter)

    def std(self, multiplier: float) -> np.ndarray:
        try:
            return self._plan.noise_std(multiplier)
        except FloatingPointError:
            return np.full(self._plan.k, np.inf)


def release_noise_std(C, *, data_sensitivity: float, output_bound: float, epsilon: float, delta: float,
                      objective: str = "mse", calibration: str = "analytic", rtol: Optional[float] = None,
                      tol: float = DEFAULT_TOL, max_iter: int = 500) -> np.ndarray:
    """The DP noise std per point of ``cloaking_release(C, ...)`` at ``(epsilon, delta)``, drawing nothing.

    ``C`` is k x n or a pair ``(A, B)``; the arguments mean what they mean for
    :func:`dpgp_gpflow.release.cloaking_release`, which would report the same ``noise_std``. Public:
    depends on ``C`` and the public bound only; charges nothing.
    """
    if calibration not in CALIBRATIONS:
        raise ValueError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
    multiplier = gaussian_multiplier(validate_epsilon(epsilon), validate_delta(delta), calibration)
    profile = _NoiseProfile(C, data_sensitivity=data_sensitivity, output_bound=output_bound, objective=objective,
                            rtol=rtol, tol=tol, max_iter=max_iter)
    return profile.std(multiplier)


# ---------------------------------------------------------------------------------------------
# GPflow plumbing: fold matrices of a DPGPR / DPGPRFITC for every configuration


def cv_folds(n: int, folds: int = 5, seed: int = 0) -> List[Split]:
    """Seeded kappa-fold split of ``range(n)``: ``(train, test)`` index arrays, each point tested once.

    A ``default_rng(seed)`` permutation cut into ``folds`` near-equal blocks. Public: it depends on
    ``n`` and the seed only (the same rule as :func:`dpgp_gpflow.datasets.kung_folds`).
    """
    n, folds = int(n), int(folds)
    if not 2 <= folds <= n:
        raise ValueError(f"folds must be an integer in [2, n={n}], got {folds}")
    perm = np.random.default_rng(seed).permutation(n)
    return [(np.setdiff1d(perm, test), np.sort(test)) for test in np.array_split(perm, folds)]


def _validate_splits(splits: Any, n: int) -> List[Split]:
    out = []
    try:
        items = list(splits)
    except TypeError as exc:
        raise TypeError("folds must be an int or a list of (train, test) index arrays") from exc
    if not items:
        raise ValueError("folds is empty")
    for item in items:
        try:
            train, test = item
        except (TypeError, ValueError) as exc:
            raise TypeError("each fold must be a pair (train, test) of index arrays") from exc
        pair = []
        for name, idx in (("train", train), ("test", test)):
            arr = np.asarray(idx)
            if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
                raise ValueError(f"a fold's {name} indices must be a non-empty 1-D integer array")
            if arr.min() < 0 or arr.max() >= n or np.unique(arr).size != arr.size:
                raise ValueError(f"a fold's {name} indices must be distinct and in [0, {n})")
            pair.append(arr.astype(np.int64))
        out.append((pair[0], pair[1]))
    return out


def _validate_grid(model, grid: Any) -> Tuple[Dict[str, Any], ...]:
    if isinstance(grid, Mapping) or not hasattr(grid, "__iter__"):
        raise TypeError("grid must be a list of dicts mapping parameter paths to values")
    grid = tuple(dict(c) for c in grid)
    if not grid:
        raise ValueError("grid is empty")
    known = parameter_dict(model)
    for config in grid:
        unknown = [k for k in config if k not in known]
        if unknown:
            raise KeyError(f"unknown parameter path(s) {unknown}; the model has {sorted(known)}")
    return grid


def _same_grid(a, b) -> bool:
    return len(a) == len(b) and all(
        x.keys() == z.keys() and all(np.array_equal(np.asarray(x[k]), np.asarray(z[k])) for k in x)
        for x, z in zip(a, b))


class _Progress:
    """tqdm if importable, else a one-line counter on stderr; silent when disabled."""

    def __init__(self, total: int, enabled: bool, desc: str) -> None:
        self._bar = None
        self._enabled = bool(enabled)
        self._total, self._count, self._desc = total, 0, desc
        if self._enabled:
            try:
                from tqdm.auto import tqdm

                self._bar = tqdm(total=total, desc=desc)
            except ImportError:
                self._bar = None

    def update(self) -> None:
        self._count += 1
        if not self._enabled:
            return
        if self._bar is not None:
            self._bar.update(1)
        else:
            sys.stderr.write(f"\r{self._desc}: {self._count}/{self._total}")
            if self._count == self._total:
                sys.stderr.write("\n")
            sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _model_kind(model) -> str:
    from .models import DPGPR, DPGPRFITC, DPLaplaceGPC

    if isinstance(model, DPGPRFITC):
        return "fitc"
    if isinstance(model, DPGPR):
        return "gpr"
    if isinstance(model, DPLaplaceGPC):
        return "laplace"
    raise TypeError(f"model must be a dpgp_gpflow.models.DPGPR, DPGPRFITC or DPLaplaceGPC, got {type(model).__name__}")


def _output_bounds(model, kind: str) -> Tuple[float, float]:
    """Public bounds of the outputs: ``y_bounds``, or the labels' {-1, +1} for a classifier."""
    if kind == "laplace":
        from .models.dp_laplace import _LABEL_BOUND

        return (-_LABEL_BOUND, _LABEL_BOUND)
    return tuple(model.y_bounds)


def _fold_matrices(work, kind: str, X: np.ndarray, splits: Sequence[Split]):
    """Per fold: (Fold, release matrix C or (A, B), output bound). Public: no outputs are read."""
    from .models import gpr_cloaking_matrix
    from .models.laplace import first_step_predictive_cloaking
    from .models.sgpr import fitc_readout, fitc_terms

    lo, hi = _output_bounds(work, kind)
    out = []
    for train, test in splits:
        Xtr, Xte = tf.constant(X[train]), tf.constant(X[test])
        if kind == "laplace":  # latent mean at the test inputs after one Newton step: linear in the labels
            C = first_step_predictive_cloaking(work.kernel, Xtr, Xte)
            release_matrix = C.numpy()
        elif kind == "gpr":
            C = gpr_cloaking_matrix(work.kernel, Xtr, work.likelihood.variance, Xte)
            release_matrix = C.numpy()
        else:
            Z = work.inducing_variable.Z
            terms = fitc_terms(work.kernel, Z, Xtr, work.likelihood.variance)
            A = fitc_readout(work.kernel, Z, terms.Luu, Xte)
            C = tf.linalg.matmul(A, terms.B)
            release_matrix = (A.numpy(), terms.B.numpy())
        m_tr = work.mean_function(Xtr).numpy()[:, 0]
        m_te = work.mean_function(Xte).numpy()[:, 0]
        C = C.numpy()
        offset = m_te - C @ m_tr
        bound = float(np.max(np.maximum(hi - m_tr, m_tr - lo)))
        out.append((Fold(train, test, C, offset), release_matrix, bound))
    return out


class CrossValidation:
    """The public part of a CV over a grid (fold matrices, sensitivities) and, for the data owner,
    the private utilities. Build it with :func:`cross_validate`.

    Public: ``grid``, ``splits``, ``folds[i]`` (the :class:`Fold` list of configuration i),
    ``sensitivities`` (corrected, per configuration), ``published_sensitivities`` (JMLR eq. 13, NOT
    valid), ``noise_std(...)``. Private: :meth:`utilities` reads the model's outputs; publish a
    selection made from them only through the exponential mechanism.
    """

    def __init__(self, grid, splits, folds, release_matrices, output_bounds, y, d, n) -> None:
        self.grid: Tuple[Dict[str, Any], ...] = grid
        self.splits: Tuple[Split, ...] = tuple(splits)
        self.folds: List[List[Fold]] = folds
        self.data_sensitivity = float(d)
        self.n = int(n)
        self._release_matrices = release_matrices
        self._output_bounds = output_bounds
        self._y = y  # private outputs (clipped), [n]
        self._profiles: Dict[Tuple[str, int, int], _NoiseProfile] = {}
        self.sensitivities = np.array([cv_sensitivity(f, n, d) for f in folds])
        self.published_sensitivities = np.array([published_sensitivity(f, d) for f in folds])

    def __len__(self) -> int:
        return len(self.grid)

    def noise_std(self, index: int, epsilon_release: Optional[float], delta_release: Optional[float], *,
                  objective: str = "mse", calibration: str = "analytic") -> List[np.ndarray]:
        """Per fold of configuration ``index``: the noise std a release of its test predictions at
        ``(epsilon_release, delta_release)`` would add (zeros when no release budget is given)."""
        if epsilon_release is None and delta_release is None:
            return [np.zeros(f.test.size) for f in self.folds[index]]
        multiplier = gaussian_multiplier(validate_epsilon(epsilon_release), validate_delta(delta_release), calibration)
        out = []
        for i, f in enumerate(self.folds[index]):
            key = (objective, index, i)
            if key not in self._profiles:
                self._profiles[key] = _NoiseProfile(
                    self._release_matrices[index][i], data_sensitivity=self.data_sensitivity,
                    output_bound=self._output_bounds[index][i], objective=objective)
            out.append(self._profiles[key].std(multiplier))
        return out

    def utilities(self, epsilon_release: Optional[float] = None, delta_release: Optional[float] = None, *,
                  objective: str = "mse", calibration: str = "analytic", indices: Optional[Sequence[int]] = None,
                  progress: bool = False) -> np.ndarray:
        """PRIVATE: the expected clipped CV utilities (``nan`` for configurations not in ``indices``).

        Noise-std computations are cached, so calling again at other release budgets is cheap.
        """
        if (epsilon_release is None) != (delta_release is None):
            raise ValueError("give both epsilon_release and delta_release, or neither")
        indices = range(len(self.grid)) if indices is None else list(indices)
        u = np.full(len(self.grid), np.nan)
        bar = _Progress(len(indices), progress, "CV utilities")
        try:
            for i in indices:
                sig = self.noise_std(i, epsilon_release, delta_release, objective=objective, calibration=calibration)
                u[i] = cv_utility(self.folds[i], self._y, self.data_sensitivity, sig)
                bar.update()
        finally:
            bar.close()
        return u


def cross_validate(model, grid: Sequence[Config], *, folds: Union[int, Sequence[Split]] = 5, split_seed: int = 0,
                   d: Optional[float] = None, progress: bool = False) -> CrossValidation:
    """Fold cloaking matrices of ``model`` (a DPGPR, DPGPRFITC or DPLaplaceGPC) for every configuration of ``grid``.

    Each configuration (a dict of GPflow parameter paths to values, e.g.
    ``{".kernel.lengthscales": 25.0, ".likelihood.variance": 1.0}``) is assigned to a copy of the
    model; nothing is trained and the model itself is not changed. ``folds``: the number of folds of
    a :func:`cv_folds` split seeded by ``split_seed``, or a list of ``(train, test)`` index arrays.
    For a DPGPRFITC the fold matrix is ``A(X_test) B(X_train)`` with the model's (public) inducing inputs.
    For a DPLaplaceGPC (labels in {-1, +1}, ``d = 2``) it maps the training labels to the latent mean at
    the test inputs after one Newton step from zero (:func:`~dpgp_gpflow.models.laplace.first_step_predictive_cloaking`,
    what a one-step release predicts), and the utility is the clipped squared error of that latent
    against the held-out labels (a least-squares classification loss, linear in the labels, so the
    sensitivity of DESIGN 5.5 applies unchanged).
    """
    kind = _model_kind(model)
    grid = _validate_grid(model, grid)
    X, Y = model.data
    X = X.numpy() if hasattr(X, "numpy") else np.asarray(X)
    y = (Y.numpy() if hasattr(Y, "numpy") else np.asarray(Y))[:, 0].astype(np.float64)
    n = X.shape[0]
    if d is None:
        from .models.dp_laplace import LABEL_SENSITIVITY

        d = LABEL_SENSITIVITY if kind == "laplace" else model.data_sensitivity
    else:
        d = validate_data_sensitivity(d, _output_bounds(model, kind))
    if isinstance(folds, (int, np.integer)) and not isinstance(folds, bool):
        splits = cv_folds(n, int(folds), split_seed)
    else:
        splits = _validate_splits(folds, n)
    work = deepcopy(model)
    all_folds, matrices, bounds = [], [], []
    bar = _Progress(len(grid), progress, "fold matrices")
    try:
        for config in grid:
            multiple_assign(work, config)
            per = _fold_matrices(work, kind, X, splits)
            all_folds.append([p[0] for p in per])
            matrices.append([p[1] for p in per])
            bounds.append([p[2] for p in per])
            bar.update()
    finally:
        bar.close()
    return CrossValidation(grid, splits, all_folds, matrices, bounds, y, d, n)


# ---------------------------------------------------------------------------------------------
# The selection


@dataclass(frozen=True, eq=False)
class Selection:
    """The result of :func:`select_hyperparameters`.

    Public (safe to publish): ``chosen`` / ``index`` (the epsilon-DP choice), ``grid``, ``kept``,
    ``config_sensitivities``, ``sensitivity``, ``epsilon``, the splits and the release budget the
    utility assumed. Private (data owner only): ``utilities`` and ``probabilities``.
    """

    chosen: Dict[str, Any]  #: the selected configuration
    index: int  #: its position in ``grid``
    utilities: np.ndarray = field(repr=False)  #: [K] PRIVATE expected clipped CV utilities (nan if dropped)
    probabilities: np.ndarray = field(repr=False)  #: [K] PRIVATE selection probabilities (0 if dropped)
    sensitivity: float  #: Delta_u: max of the corrected sensitivity over the kept configurations
    epsilon: float
    grid: Tuple[Dict[str, Any], ...] = field(repr=False)
    kept: np.ndarray = field(repr=False)  #: [K] bool: configurations under the threshold
    config_sensitivities: np.ndarray = field(repr=False)  #: [K] corrected sensitivity per configuration
    published_sensitivity: float = field(repr=False, default=math.nan)  #: JMLR eq. (13)-(14), NOT valid
    splits: Tuple[Split, ...] = field(repr=False, default=())
    data_sensitivity: float = math.nan
    epsilon_release: Optional[float] = None
    delta_release: Optional[float] = None
    reproducible: bool = False  #: True when the Gumbel noise came from an explicit seed (not private)

    def apply(self, model) -> None:
        """Assign the chosen configuration to ``model`` (``gpflow.utilities.multiple_assign``)."""
        multiple_assign(model, self.chosen)


def select_hyperparameters(
    model,
    grid: Sequence[Config],
    *,
    epsilon: float,
    folds: Union[int, Sequence[Split]] = 5,
    d: Optional[float] = None,
    threshold: Optional[float] = None,
    seed: Optional[int] = None,
    delta_release: Optional[float] = None,
    epsilon_release: Optional[float] = None,
    objective: str = "mse",
    calibration: str = "analytic",
    accountant: Optional[PrivacyAccountant] = None,
    progress: bool = False,
    split_seed: int = 0,
    cross_validation: Optional[CrossValidation] = None,
) -> Selection:
    """Select one configuration of ``grid`` for ``model`` with the epsilon-DP exponential mechanism.

    ``model``: a :class:`~dpgp_gpflow.models.DPGPR`, :class:`~dpgp_gpflow.models.DPGPRFITC` or
    :class:`~dpgp_gpflow.models.DPLaplaceGPC` (see :func:`cross_validate` for its loss) holding
    the private outputs (its own hyperparameters are not used and not changed; see
    :meth:`Selection.apply`). ``grid``: a list of dicts of GPflow parameter paths to values.
    ``folds``: the number of folds (a public split seeded by ``split_seed``) or a list of
    ``(train, test)`` index arrays. ``d``: how far one output may move (default the model's
    ``data_sensitivity``); residuals are clipped to ``[-4d, 4d]``.

    The utility includes the expected effect of the DP noise of a cloaking release of each fold's
    test predictions at ``(epsilon_release, delta_release)`` (``objective``/``calibration`` as for
    ``release``); with no release budget the noise is taken as zero (the utility then ignores the
    privacy cost of the release, and tends to favour configurations that need a lot of noise).

    ``threshold``: public bound fixed in advance; configurations whose own sensitivity exceeds it
    are dropped before anything private is computed. ``Delta_u`` is the max over the kept ones.

    The budget (``accountant`` or the innermost ``with PrivacyAccountant(...)``) is checked before
    anything is computed and charged once with a pure ``(epsilon, 0)`` event after the draw.
    ``seed=None`` draws the Gumbel noise from the OS CSPRNG; an explicit seed warns.

    ``cross_validation``: a :class:`CrossValidation` from :func:`cross_validate` on the same model,
    grid and folds, to reuse its fold matrices and cached noise computations (then ``folds``,
    ``split_seed`` and ``d`` are taken from it).
    """
    epsilon = validate_epsilon(epsilon)
    if (epsilon_release is None) != (delta_release is None):
        raise ValueError("give both epsilon_release and delta_release, or neither")
    if epsilon_release is not None:
        epsilon_release = validate_epsilon(epsilon_release)
        delta_release = validate_delta(delta_release)
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if calibration not in CALIBRATIONS:
        raise ValueError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
    if threshold is not None:
        threshold = float(threshold)
        if not threshold > 0.0:
            raise ValueError(f"threshold must be > 0, got {threshold}")
    _model_kind(model)
    if accountant is None:
        accountant = current_accountant()
    if accountant is not None:
        if not isinstance(accountant, PrivacyAccountant):
            raise TypeError(f"accountant must be a PrivacyAccountant, got {type(accountant).__name__}")
        accountant.check(epsilon, 0.0)

    if cross_validation is None:
        cv = cross_validate(model, grid, folds=folds, split_seed=split_seed, d=d, progress=progress)
    else:
        cv = cross_validation
        if not isinstance(cv, CrossValidation):
            raise TypeError(f"cross_validation must be a CrossValidation, got {type(cv).__name__}")
        _, Y = model.data
        y = (Y.numpy() if hasattr(Y, "numpy") else np.asarray(Y))[:, 0]
        if not _same_grid(cv.grid, _validate_grid(model, grid)) or cv.n != y.size or not np.array_equal(cv._y, y):
            raise ValueError("cross_validation was computed for another model, data set or grid")
    sens = cv.sensitivities
    kept = np.ones(len(cv), dtype=bool) if threshold is None else sens <= threshold
    if not np.any(kept):
        raise ValueError(f"no configuration has a sensitivity below the threshold {threshold} "
                         f"(smallest: {float(np.min(sens)):.6g})")
    idx = np.flatnonzero(kept)
    delta_u = float(np.max(sens[idx]))
    utilities = cv.utilities(epsilon_release, delta_release, objective=objective, calibration=calibration,
                             indices=idx, progress=progress)
    log_w = exponential_mechanism_log_weights(utilities[idx], epsilon, delta_u)
    rng, reproducible = _rng(seed, stacklevel=3)
    choice = int(idx[_gumbel_max(log_w, rng)])
    probabilities = np.zeros(len(cv))
    probabilities[idx] = selection_probabilities(utilities[idx], epsilon, delta_u)
    if accountant is not None:
        accountant.spend(epsilon, 0.0, kind="pure",
                         description=f"exponential mechanism: hyperparameter selection among {idx.size} "
                                     f"configurations ({len(cv.splits)}-fold CV)")
    return Selection(
        chosen=dict(cv.grid[choice]),
        index=choice,
        utilities=utilities,
        probabilities=probabilities,
        sensitivity=delta_u,
        epsilon=epsilon,
        grid=cv.grid,
        kept=kept,
        config_sensitivities=sens,
        published_sensitivity=float(np.max(cv.published_sensitivities[idx])),
        splits=cv.splits,
        data_sensitivity=cv.data_sensitivity,
        epsilon_release=epsilon_release,
        delta_release=delta_release,
        reproducible=reproducible,
    )
