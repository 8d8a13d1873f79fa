"""The cross-validated utility and its sensitivity: pure NumPy functions of public fold matrices
and (for the utility only) the private outputs.

A fold of a linear smoother predicts ``offset + C y[train]`` at its test points; the utility is
minus the sum of a loss of the residuals, with the release's DP noise included by its closed-form
expectation. Two losses (:data:`UTILITIES`):

* ``"absolute"`` (default): ``E|r + Z|``, 1-Lipschitz in the residual ``r``, no clipping;
* ``"squared"``: ``E[clip(r + Z, -4d, 4d)^2]`` (the JMLR paper's), ``8d``-Lipschitz.

Either way a neighbour moves the utility by at most ``d * L * influence_j`` (``L`` the loss's
Lipschitz constant, :func:`point_influence`); with persons (public ``groups``: a neighbour moves all
of one person's outputs, each by at most ``d``) by at most ``d * L * sum_{i in G} influence_i``
(:func:`person_influence`, the triangle inequality). The proofs, and why the published bound is not
valid, are in ``docs/selection.md``.

**Several columns** (several outputs per row, or one-vs-rest classes; :mod:`~dpgp_gpflow.selection.columns`):
the utility is the sum over columns q of each column's utility in units of its own ``d_q``, times the
same power of ``d = max_q d_q`` (:func:`output_weight`: ``d / d_q`` for the absolute loss, ``(d / d_q)^2``
for the squared loss, clipped at ``4 d_q``), so that a wide output does not dominate
(:func:`cv_column_utility`). Moving column q by at most ``d_q`` then moves its term by at most
``d L(d) influence``, the same for every column; a neighbour moving ``m`` columns moves the utility by at
most ``m d L(d) max_G sum_{i in G} influence_i`` (:func:`cv_sensitivity` with ``columns=m``;
docs/selection.md#several-outputs).
"""

from __future__ import annotations

import math
from typing import Any, List, NamedTuple, Optional, Sequence

import numpy as np
from scipy import special

__all__ = ["UTILITIES"]

#: Residuals are clipped to ``[-CLIP_FACTOR * d, CLIP_FACTOR * d]`` by the squared loss (the JMLR paper's 4d).
CLIP_FACTOR = 4.0
#: The losses of the CV utility: ``"absolute"`` (default, sensitivity ``d`` per unit of influence) and
#: ``"squared"`` (clipped at ``4d``, the JMLR paper's; sensitivity ``8 d^2`` per unit of influence).
UTILITIES = ("absolute", "squared")


def validate_utility(utility: Any) -> str:
    """``"absolute"`` or ``"squared"``; anything else raises ``ValueError``."""
    if not isinstance(utility, str) or utility not in UTILITIES:
        raise ValueError(f"utility must be one of {UTILITIES}, got {utility!r}")
    return utility


class Fold(NamedTuple):
    """One CV fold of a linear smoother: ``pred = offset + C y[train]`` at the test points. Public."""

    train: np.ndarray  #: [m] indices of the training points
    test: np.ndarray  #: [k] indices of the test points
    C: np.ndarray  #: [k, m] cloaking matrix of the fold
    offset: Optional[np.ndarray] = None  #: [k] public part of the prediction (None: zeros)


def as_folds(folds: Sequence[Fold]) -> List[Fold]:
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
            with np.errstate(over="ignore"):  # a tiny sigma: al**2 = inf, and the density exp(-inf) = 0 is right
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


def expected_absolute(a: Any, sigma: Any) -> np.ndarray:
    """``E|a + Z|`` for ``Z ~ N(0, sigma^2)``, elementwise, in closed form (the folded normal's mean)::

        sigma sqrt(2 / pi) exp(-a^2 / (2 sigma^2)) + a erf(a / (sigma sqrt 2))

    ``sigma = 0`` gives ``|a|``, ``sigma = inf`` gives ``inf``. Written with ``erf`` (not
    ``1 - 2 Phi(-a / sigma)``) so neither tail cancels. 1-Lipschitz in ``a`` for every ``sigma``
    (an average of the 1-Lipschitz ``|a + z|``): the basis of the absolute utility's sensitivity.
    """
    a = np.asarray(a, dtype=np.float64)
    shape = a.shape
    a = a.reshape(-1)
    sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float64), shape).reshape(-1)
    if np.any(sigma < 0.0) or np.any(np.isnan(sigma)):
        raise ValueError("sigma must be >= 0 (inf: a release that would be refused)")
    if not np.all(np.isfinite(a)):
        raise ValueError("a must be finite")
    out = np.abs(a)
    out[np.isinf(sigma)] = np.inf
    pos = (sigma > 0.0) & np.isfinite(sigma)
    if np.any(pos):
        ap, s = a[pos], sigma[pos]
        z = ap / s
        with np.errstate(over="ignore", under="ignore"):  # z^2 = inf where sigma << |a|: exp(-inf) = 0 is right
            out[pos] = s * math.sqrt(2.0 / math.pi) * np.exp(-0.5 * z * z) + ap * special.erf(z / math.sqrt(2.0))
    return out.reshape(shape)


def loss_lipschitz(utility: str, d: float) -> float:
    """The Lipschitz constant in the residual of the expected loss of ``utility``: 1 for
    ``"absolute"``, ``2 * CLIP_FACTOR * d`` for ``"squared"``. Public."""
    return 1.0 if validate_utility(utility) == "absolute" else 2.0 * CLIP_FACTOR * float(d)


def expected_loss(utility: str, a: Any, sigma: Any, d: float) -> np.ndarray:
    """The expected loss per residual ``a`` under release noise of std ``sigma``:
    :func:`expected_absolute` or :func:`expected_clipped_square` at ``c = 4d``."""
    if validate_utility(utility) == "absolute":
        return expected_absolute(a, sigma)
    return expected_clipped_square(a, sigma, CLIP_FACTOR * float(d))


def cv_predictions(folds: Sequence[Fold], y: Any) -> List[np.ndarray]:
    """Each fold's predictions ``offset + C y[train]`` at its test points."""
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    return [f.offset + f.C @ y[f.train] for f in as_folds(folds)]


def cv_utility(folds: Sequence[Fold], y: Any, d: float, noise_std: Optional[Sequence[Any]] = None, *,
               utility: str = "absolute") -> float:
    """``-sum_f sum_k E[loss(pred_k - y_k + Z_k)]`` (:func:`expected_loss`; ``noise_std[f]``: the std
    of ``Z`` per test point of fold f; None for no noise). Reads the private ``y``: the result is private."""
    folds = as_folds(folds)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    total = 0.0
    for i, f in enumerate(folds):
        residual = f.offset + f.C @ y[f.train] - y[f.test]
        sigma = 0.0 if noise_std is None else np.asarray(noise_std[i], dtype=np.float64)
        total += float(np.sum(expected_loss(utility, residual, sigma, d)))
    return -total


def output_weight(utility: str, d: float, d_q: float) -> float:
    """The weight of column q's loss in the utility of several columns: ``(d / d_q)^a`` with ``a = 1`` for
    ``"absolute"`` and ``a = 2`` for ``"squared"`` (its clip at ``4 d_q``), ``d = max_q d_q``. The weighted
    loss is ``d^a`` times the loss of the residual measured in units of ``d_q`` (the same for an output and
    its rescaling by a public factor, with its bounds), and it is ``L(d) d / d_q``-Lipschitz in the
    residual. Exactly 1 for a column of sensitivity ``d``. Public."""
    ratio = float(d) / float(d_q)
    return ratio if validate_utility(utility) == "absolute" else ratio * ratio


def cv_column_utility(folds: Sequence[Fold], Y: Any, sensitivities: Sequence[float],
                      noise_std: Optional[Sequence[Any]] = None, *, utility: str = "absolute") -> float:
    """``sum_q output_weight(utility, d, d_q) cv_utility(folds, Y[:, q], d_q, noise_std[:, q])`` over the Q
    columns of ``Y`` ([n, Q], or [n] for one column) that share the fold maps, ``d = max_q d_q``
    (``noise_std[f]``: [k_f, Q], or [k_f] for one column; None for no noise). One column of sensitivity
    ``d``: :func:`cv_utility` itself, bit for bit. Reads the private ``Y``: the result is private."""
    Y = np.asarray(Y, dtype=np.float64)
    Y = Y[:, None] if Y.ndim == 1 else Y
    d_cols = [float(v) for v in sensitivities]
    if Y.ndim != 2 or Y.shape[1] != len(d_cols):
        raise ValueError(f"Y must have one column per sensitivity ({len(d_cols)}), got shape {list(Y.shape)}")
    d = max(d_cols)
    total = 0.0
    for q, d_q in enumerate(d_cols):
        sig = None if noise_std is None else [np.asarray(s, dtype=np.float64) for s in noise_std]
        if sig is not None and len(d_cols) > 1:
            sig = [s if s.ndim == 0 else s[:, q] for s in sig]
        total += output_weight(utility, d, d_q) * cv_utility(folds, Y[:, q], d_q, sig, utility=utility)
    return total


def point_influence(folds: Sequence[Fold], n: int) -> np.ndarray:
    """Per point j: ``sum_f ([j in train_f] ||C_f[:, j]||_1 + [j in test_f])``, the total change of
    the CV residuals, per unit change of ``y_j`` (docs/selection.md#sensitivity). Public."""
    folds = as_folds(folds)
    total = np.zeros(int(n))
    for f in folds:
        np.add.at(total, f.train, np.sum(np.abs(f.C), axis=0))
        np.add.at(total, f.test, 1.0)
    return total


def person_influence(folds: Sequence[Fold], n: int, groups: Any = None) -> np.ndarray:
    """Per person G (public ``groups``, [n] integers; rows with the same value are one person):
    ``sum_{i in G} point_influence_i``, a bound on the total change of the CV residuals per unit change
    of each of the person's outputs (the triangle inequality; docs/selection.md#groups). In the order of
    ``np.unique(groups)``; ``groups=None`` (one row per person) is :func:`point_influence` itself. Public."""
    influence = point_influence(folds, n)
    if groups is None:
        return influence
    ids = np.asarray(groups).reshape(-1)
    if ids.shape != (int(n),):
        raise ValueError(f"groups must have one identifier per point ({int(n)}), got shape {list(np.shape(groups))}")
    _, person = np.unique(ids, return_inverse=True)
    return np.bincount(person.reshape(-1), weights=influence)


def point_sensitivities(folds: Sequence[Fold], n: int, d: float, *, utility: str = "absolute") -> np.ndarray:
    """Per point j: ``d * loss_lipschitz(utility, d) * point_influence_j``, i.e.
    ``d * influence_j`` (absolute) or ``8 d^2 * influence_j`` (squared).

    The bound on how much the CV utility moves when ``y_j`` moves by at most ``d``. Public.
    """
    return float(d) * loss_lipschitz(utility, d) * point_influence(folds, n)


def cv_sensitivity(folds: Sequence[Fold], n: int, d: float, *, utility: str = "absolute", groups: Any = None,
                   columns: int = 1) -> float:
    """The sensitivity of the CV utility: ``max_j`` of :func:`point_sensitivities`; with public ``groups``
    (a neighbour moves all of one person's outputs) ``d * L * max_G`` of :func:`person_influence`. With
    ``columns = m > 1``, of :func:`cv_column_utility` when one neighbour moves m of its columns (each by at
    most its own ``d_q``; ``d = max_q d_q``): m times that (docs/selection.md#several-outputs)."""
    one = float(d) * loss_lipschitz(utility, d) * float(np.max(person_influence(folds, n, groups)))
    return one if int(columns) == 1 else int(columns) * one


def published_sensitivity(folds: Sequence[Fold], d: float) -> float:
    """JMLR 2021 equations (13): ``9 d^2 + d^2 * (sum of the kappa - 1 largest max_j ||C_f[:, j]||_2^2)``.

    **NOT a valid DP bound** (it drops the ``2 a.v`` term of a change in squared distance); kept
    only to reproduce and compare with the published numbers (toy example: 116, interleaved: 53).
    Take the max over configurations for equation (14).
    """
    folds = as_folds(folds)
    d = float(d)
    alphas = sorted((float(np.max(np.sum(f.C**2, axis=0))) if f.C.size else 0.0 for f in folds), reverse=True)
    return 9.0 * d * d + d * d * math.fsum(alphas[: max(len(folds) - 1, 0)])
