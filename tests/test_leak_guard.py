"""The leak guard: every way of fitting hyperparameters on the private outputs is refused."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest
import tensorflow as tf

import dpgp_gpflow as dp
from dpgp_gpflow.models import DPGPR, DPGPRFITC, DPLaplaceGPC

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")

rng = np.random.default_rng(11)
X = rng.uniform(0.0, 6.0, (25, 1))
Y = np.sin(X) + 0.2 * rng.standard_normal((25, 1))
L = np.where(Y > 0, 1.0, -1.0)
XNEW = np.linspace(0.0, 6.0, 4)[:, None]
Z = np.linspace(0.5, 5.5, 4)[:, None]


def se():
    return gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=1.0)


def fit(loss, variables, steps=5):
    """A few plain gradient steps on ``loss`` (which reads the private outputs)."""
    for _ in range(steps):
        with tf.GradientTape() as tape:
            value = loss()
        for v, g in zip(variables, tape.gradient(value, variables)):
            if g is not None:
                v.assign(v - 0.05 * tf.clip_by_value(g, -1.0, 1.0))


def train_laplace_mode(m):  # -log marginal likelihood through mode(), not the objective method
    fit(lambda: -m.mode().log_marginal_likelihood, m.trainable_variables)


def train_predict_log_density(m):
    fit(lambda: -tf.reduce_sum(m.predict_log_density((X, Y))), m.trainable_variables)


def train_shared_kernel(m):
    plain = gpflow.models.GPR((X, Y), m.kernel, noise_variance=0.1)  # shares the kernel object
    gpflow.optimizers.Scipy().minimize(plain.training_loss, plain.trainable_variables, options=dict(maxiter=5))


def assign_trained_values(m):
    other = gpflow.models.GPR((X, Y), se(), noise_variance=0.1)
    gpflow.optimizers.Scipy().minimize(other.training_loss, other.trainable_variables, options=dict(maxiter=5))
    gpflow.utilities.multiple_assign(m, {".kernel.lengthscales": other.kernel.lengthscales.numpy(),
                                         ".kernel.variance": other.kernel.variance.numpy()})


def train_then_reset_flag(m):
    gpflow.optimizers.Scipy().minimize(m.training_loss, m.trainable_variables, options=dict(maxiter=5))
    object.__setattr__(m, "_private_objective_evaluated", False)


CASES = [
    ("laplace-mode", lambda: DPLaplaceGPC((X, L), se()), train_laplace_mode),
    ("fitc-log-density", lambda: DPGPRFITC((X, Y), se(), Z, noise_variance=0.1, y_bounds=(-2.0, 2.0)),
     train_predict_log_density),
    ("gpr-log-density", lambda: DPGPR((X, Y), se(), y_bounds=(-2.0, 2.0), noise_variance=0.1), train_predict_log_density),
    ("shared-kernel", lambda: DPGPR((X, Y), se(), y_bounds=(-2.0, 2.0), noise_variance=0.1), train_shared_kernel),
    ("multiple-assign", lambda: DPGPR((X, Y), se(), y_bounds=(-2.0, 2.0), noise_variance=0.1), assign_trained_values),
    ("reset-flag", lambda: DPGPR((X, Y), se(), y_bounds=(-2.0, 2.0), noise_variance=0.1), train_then_reset_flag),
]


def publish(m, **kw):
    if isinstance(m, DPLaplaceGPC):
        return m.release(epsilon=1.0, delta=1e-3, seed=0, **kw)
    return m.release(XNEW, epsilon=1.0, delta=1e-3, seed=0, **kw)


@pytest.mark.parametrize("name, make, train", CASES, ids=[c[0] for c in CASES])
def test_training_on_the_outputs_by_any_route_is_refused(name, make, train, draws):
    m = make()
    publish(m)  # untouched: releases
    train(m)
    assert m.changed_hyperparameters() or m.private_objective_evaluated
    n = len(draws)
    with pytest.raises(dp.PrivacyLeakError):
        publish(m)
    assert len(draws) == n  # refused before any noise
    publish(m, hyperparameters_public=True)  # a declaration overrides


def test_values_set_a_priori_after_construction_need_a_declaration():
    m = DPGPR((X, Y), se(), y_bounds=(-2.0, 2.0), noise_variance=0.1)
    m.kernel.lengthscales.assign(2.5)  # chosen without the outputs, but nothing can tell
    with pytest.raises(dp.PrivacyLeakError, match="lengthscales"):
        publish(m)
    m.declare_hyperparameters_public()
    publish(m)


def test_a_private_selection_applied_is_public():
    m = DPGPR((X, Y), se(), y_bounds=(-2.0, 2.0), noise_variance=0.1)
    grid = [{".kernel.lengthscales": v} for v in (0.5, 2.0)]
    sel = dp.selection.select_hyperparameters(m, grid, epsilon=1.0, folds=2, seed=0)
    sel.apply(m)
    assert m.changed_hyperparameters() == []
    publish(m)
