"""The leak guard: every way of fitting hyperparameters on the private outputs is refused."""

from __future__ import annotations

import warnings

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


def gpr():
    """A DPGPR whose noise variance 0.1 (not GPflow's default) is declared public: chosen a priori."""
    return DPGPR((X, Y), se(), y_bounds=(-2.0, 2.0), noise_variance=0.1, hyperparameters_public=True)


CASES = [
    ("laplace-mode", lambda: DPLaplaceGPC((X, L), se()), train_laplace_mode),
    ("fitc-log-density", lambda: DPGPRFITC((X, Y), se(), Z, noise_variance=0.1, y_bounds=(-2.0, 2.0),
                                           hyperparameters_public=True),
     train_predict_log_density),
    ("gpr-log-density", gpr, train_predict_log_density),
    ("shared-kernel", gpr, train_shared_kernel),
    ("multiple-assign", gpr, assign_trained_values),
    ("reset-flag", gpr, train_then_reset_flag),
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
    m = gpr()
    m.kernel.lengthscales.assign(2.5)  # chosen without the outputs, but nothing can tell
    with pytest.raises(dp.PrivacyLeakError, match="lengthscales"):
        publish(m)
    m.declare_hyperparameters_public()
    publish(m)


def test_a_private_selection_applied_is_public():
    m = gpr()
    grid = [{".kernel.lengthscales": v} for v in (0.5, 2.0)]
    sel = dp.selection.select_hyperparameters(m, grid, epsilon=1.0, folds=2, seed=0)
    sel.apply(m)
    assert m.changed_hyperparameters() == []
    publish(m)


# ---------------------------------------------------------------------------------------------
# GPflow's regression tutorial (issue 34 item 2): values fitted before the model was built refuse by default


def tutorial_kernel():
    """GPflow's tutorial on the private outputs: a GPR trained with gpflow.optimizers.Scipy."""
    m = gpflow.models.GPR((X, Y), kernel=gpflow.kernels.SquaredExponential())
    gpflow.optimizers.Scipy().minimize(m.training_loss, m.trainable_variables, options=dict(maxiter=50))
    return m


def fitted_away_from_defaults(m):
    """The tutorial's parameters that moved off GPflow's defaults (1.0 each), by direct comparison."""
    values = {".kernel.lengthscales": m.kernel.lengthscales.numpy(), ".kernel.variance": m.kernel.variance.numpy(),
              ".likelihood.variance": m.likelihood.variance.numpy()}
    return sorted(path for path, v in values.items() if not np.isclose(v, 1.0))


def test_the_tutorial_path_is_refused_naming_the_parameters_with_nothing_reserved(draws):
    m = tutorial_kernel()
    moved = fitted_away_from_defaults(m)
    assert moved == [".kernel.lengthscales", ".kernel.variance", ".likelihood.variance"]
    private = DPGPR((X, Y), m.kernel, y_bounds=(-2.0, 2.0), noise_variance=float(m.likelihood.variance.numpy()))
    accountant = dp.PrivacyAccountant(epsilon=10.0, delta=1e-2)
    with pytest.raises(dp.PrivacyLeakError) as refused:
        private.release(XNEW, epsilon=1.0, delta=1e-3, accountant=accountant)
    message = str(refused.value)
    for part in moved + ["select_hyperparameters", "hyperparameters_public=True", "declare_hyperparameters_public()"]:
        assert part in message, part
    assert "\n" not in message
    assert draws == [] and accountant.history() == [] and accountant.held == (0.0, 0.0)


def test_the_tutorial_path_declared_public_releases_and_is_charged():
    m = tutorial_kernel()
    private = DPGPR((X, Y), m.kernel, y_bounds=(-2.0, 2.0), noise_variance=float(m.likelihood.variance.numpy()),
                    hyperparameters_public=True)  # the user's claim: chosen without Y
    accountant = dp.PrivacyAccountant(epsilon=10.0, delta=1e-2)
    released = private.release(XNEW, epsilon=1.0, delta=1e-3, accountant=accountant)
    assert np.all(np.isfinite(released.mean))
    assert accountant.spent == (1.0, 1e-3)


def test_only_gpflow_defaults_release_without_refusal_or_warning():
    m = DPGPR((X, Y), gpflow.kernels.SquaredExponential(), y_bounds=(-2.0, 2.0))  # every value GPflow's default
    accountant = dp.PrivacyAccountant(epsilon=10.0, delta=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dp.HyperparameterWarning)
        m.release(XNEW, epsilon=1.0, delta=1e-3, accountant=accountant)
    assert accountant.spent == (1.0, 1e-3)


def test_the_warning_is_opt_in_and_scoped_to_its_block(draws):
    m = DPGPR((X, Y), gpflow.kernels.SquaredExponential(lengthscales=2.5), y_bounds=(-2.0, 2.0))
    with dp.allow_undeclared_hyperparameters():
        with pytest.warns(dp.HyperparameterWarning, match=r"\['\.kernel\.lengthscales'\]") as caught:
            m.release(XNEW, epsilon=1.0, delta=1e-3)
    assert len(caught) == 1 and "\n" not in str(caught[0].message) and caught[0].filename == __file__
    assert len(draws) > 0
    n = len(draws)
    with pytest.raises(dp.PrivacyLeakError, match=r"\['\.kernel\.lengthscales'\]"):  # the block ended
        m.release(XNEW, epsilon=1.0, delta=1e-3)
    assert len(draws) == n
