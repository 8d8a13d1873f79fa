"""NumPy references for the whole-row tests, written apart from the package (no dpgp_gpflow imports)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def se_kernel(A: np.ndarray, B: np.ndarray, lengthscale: float, variance: float = 1.0) -> np.ndarray:
    """The squared-exponential kernel matrix k(A, B) [len(A), len(B)]."""
    sq = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    return variance * np.exp(-0.5 * sq / lengthscale**2)


def features(X: np.ndarray, Z: np.ndarray, lengthscale: float, jitter: float = 1e-6) -> np.ndarray:
    """Unit-scale whitened features [N, M]: L^{-1} k1(Z, x) with L L^T = K1_ZZ + jitter I (k1: unit variance)."""
    L = np.linalg.cholesky(se_kernel(Z, Z, lengthscale) + jitter * np.eye(len(Z)))
    return np.linalg.solve(L, se_kernel(Z, X, lengthscale)).T


def statistics(X, Y, Z, lengthscale, box, bounds):
    """(S, b, q) of the rows clipped to the box and bounds, outputs centred at the bounds' midpoint."""
    box = np.asarray(box, dtype=float)
    Xc = np.clip(X, box[:, 0], box[:, 1])
    lo, hi = bounds
    yc = np.clip(np.ravel(Y), lo, hi) - (lo + hi) / 2
    P = features(Xc, Z, lengthscale)
    return P.T @ P, P.T @ yc, float(yc @ yc)


def shift_in_noise_units(a, b) -> float:
    """The L2 norm of two releases' statistics' difference in units of each entry's noise std: S once per entry of
    its upper triangle (as released), then b and q; over every candidate when the releases hold several."""
    parts = []
    for ca, cb in zip(getattr(a, "candidates", None) or (a,), getattr(b, "candidates", None) or (b,)):
        std = ca.statistics_noise_std
        rows, cols = np.triu_indices(ca.statistics["S"].shape[0])
        parts += [(ca.statistics["S"] - cb.statistics["S"])[rows, cols] / std["S"][rows, cols],
                  (ca.statistics["b"] - cb.statistics["b"]) / std["b"],
                  np.atleast_1d((ca.statistics["q"] - cb.statistics["q"]) / std["q"])]
    return float(np.linalg.norm(np.concatenate(parts)))


def widest_point(lo: float, hi: float, Z: np.ndarray, lengthscale: float, num: int = 2001) -> float:
    """The point of the 1-D box [lo, hi] (on a grid of ``num``) where the whitened features' norm is largest."""
    grid = np.linspace(lo, hi, num)[:, None]
    return float(grid[np.argmax(np.linalg.norm(features(grid, Z, lengthscale), axis=1)), 0])


def extreme_neighbours(X: np.ndarray, Y: np.ndarray, points, bounds):
    """Every neighbour of the rows (X [n, 1], Y [n, 1]) that replaces one row's input by one of ``points`` and its
    output by the bound opposite to it: the brute force of the whole-row tests."""
    lo, hi = bounds
    for i in range(X.shape[0]):
        for x in points:
            X2, Y2 = X.copy(), Y.copy()
            X2[i] = x
            Y2[i] = lo if Y[i, 0] >= (lo + hi) / 2 else hi
            yield X2, Y2


def sgpr_bound(S, b, q, trace, n, b_std, q_std, so, kf, nv):
    """The bound of docs/whole_rows.md#variances-as-post-processing, in NumPy and scipy."""
    m = S.shape[0]
    A = nv * np.eye(m) + kf * S
    Ainv = np.linalg.inv(A)  # a reference: an explicit inverse is fine here
    r = q - kf * (b @ Ainv @ b - b_std**2 * np.trace(Ainv))
    u = kf * Ainv @ b
    s_r = math.sqrt(q_std**2 + 4 * b_std**2 * u @ u + 2 * so**2 * (u @ u) ** 2
                    + 2 * b_std**4 * kf**2 * np.trace(Ainv @ Ainv))
    s_t = math.sqrt(2 * m) * so

    def mean(x, s):  # E[x | released x, x >= 0]: max(x, 0) without noise
        return stats.truncnorm(-x / s, np.inf, loc=x, scale=s).mean() if s > 0 else max(x, 0.0)

    r_bar, t_bar = mean(r, s_r), mean(n - trace, s_t)
    return (-n / 2 * math.log(2 * math.pi) - (n - m) / 2 * math.log(nv) - 0.5 * np.linalg.slogdet(A)[1]
            - r_bar / (2 * nv) - kf * t_bar / (2 * nv))
