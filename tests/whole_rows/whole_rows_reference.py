"""NumPy references for the whole-row tests, written apart from the package (no dpgp_gpflow imports)."""

from __future__ import annotations

import numpy as np


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
