"""The noise optimiser's Newton loop does no repeated work (issue 35 item 6): one eigen-decomposition of
``S`` per point it evaluates, and no Newton direction once the certificate is met. Run eagerly, where
``tf.while_loop`` and ``tf.cond`` are Python control flow, so every call can be counted; the
certificate is recomputed here in NumPy (the reference), never read from the code under test."""

import numpy as np
import pytest
import tensorflow as tf

from dpgp_gpflow.noise_planning import dual


def _numpy_relative_gap(vectors: np.ndarray, weights: np.ndarray, objective: str) -> float:
    """The certificate's relative gap written from its definition (docs/mechanisms.md#noise-optimiser)."""
    S = (vectors * weights) @ vectors.T
    w, U = np.linalg.eigh(S)
    inv = 1.0 / w if objective == "entropy" else 1.0 / np.sqrt(w)
    q = np.sum((U.T @ vectors) ** 2 * inv[:, None], axis=0)
    r = vectors.shape[0]
    if objective == "entropy":
        return np.log1p(q.max() * weights.sum() / r - 1.0)
    return q.max() * weights.sum() / np.sum(np.sqrt(w)) - 1.0


def _problem(r: int = 4, n: int = 30, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(r, n))


@pytest.mark.parametrize("objective", ["mse", "entropy"])
def test_a_start_that_meets_the_tolerance_takes_no_newton_direction(monkeypatch, objective):
    vectors = _problem()
    solved, _, met = dual.RESTRICTED_SOLVERS[objective](
        tf.constant(vectors), tf.fill([vectors.shape[1]], tf.constant(0.1, tf.float64)),
        tf.constant(1e-9, tf.float64), tf.constant(500), tf.constant(True))
    start = solved.numpy()
    tol = 1e-3
    assert bool(met) and _numpy_relative_gap(vectors, start, objective) <= tol  # the reference's verdict

    directions = []
    for name in ("_dual_hessian", "_mse_newton_direction"):
        original = getattr(dual, name)
        monkeypatch.setattr(dual, name, lambda *a, _f=original, **k: directions.append(1) or _f(*a, **k))
    weights, steps, met = dual.barrier_newton(tf.constant(vectors), tf.constant(start), tf.constant(tol, tf.float64),
                                              tf.constant(100), tf.constant(True), objective=objective)
    assert directions == []
    assert int(steps) == 1 and bool(met)
    np.testing.assert_array_equal(weights.numpy(), start)


@pytest.mark.parametrize("objective", ["mse", "entropy"])
@pytest.mark.parametrize("primal_dual", [True, False])
def test_one_eigen_decomposition_per_point_evaluated(monkeypatch, objective, primal_dual):
    vectors = _problem()
    decompositions, trials = [], []
    for name in ("eigh", "eigvalsh"):
        original = getattr(tf.linalg, name)
        monkeypatch.setattr(tf.linalg, name, lambda *a, _f=original, **k: decompositions.append(1) or _f(*a, **k))
    trial_terms = dual._trial_terms
    monkeypatch.setattr(dual, "_trial_terms", lambda *a, **k: trials.append(1) or trial_terms(*a, **k))
    tol = 1e-6
    weights, steps, met = dual.barrier_newton(
        tf.constant(vectors), tf.fill([vectors.shape[1]], tf.constant(0.1, tf.float64)), tf.constant(tol, tf.float64),
        tf.constant(500), tf.constant(primal_dual), objective=objective)
    assert bool(met) and _numpy_relative_gap(vectors, weights.numpy(), objective) <= tol
    assert int(steps) > 2 and len(trials) >= int(steps) - 1
    # the start, then one per line-search trial (the accepted trial's is the next step's)
    assert len(decompositions) == 1 + len(trials)
