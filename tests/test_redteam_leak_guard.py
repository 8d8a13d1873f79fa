"""Red-team cases of the leak guard (issue 34 item 2): hyperparameters fitted on the private outputs
*before* the private model was built (GPflow's tutorial: train a ``GPR`` with ``gpflow.optimizers.Scipy``,
reuse its kernel) must be refused by every model kind and every release path, with nothing reserved,
held or drawn; the opt-in warning must not weaken the guard's other signals, nor leak out of its block.

Each case is an attack a user could make by accident (the tutorial, a sample-mean prior, the residual
variance as the noise) or on purpose (a truthy string as the declaration, a kernel class whose defaults
are the fitted values, a thread started inside the opt-in block)."""

from __future__ import annotations

import threading

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import streaming
from dpgp_gpflow.models import (
    DPGPR,
    DPGPRFITC,
    DPSGPR,
    DPLaplaceGPC,
    DPMulticlassLaplaceGPC,
    DPSparseLaplaceGPC,
    DPSparseMulticlassLaplaceGPC,
)

rng = np.random.default_rng(34)
X = rng.uniform(0.0, 6.0, (30, 1))
Y = np.sin(X) + 0.2 * rng.standard_normal((30, 1))
LABELS = np.where(Y > 0, 1.0, -1.0)
CLASSES = np.digitize(Y[:, 0], [-0.5, 0.5])  # 0, 1, 2
XNEW = np.linspace(0.0, 6.0, 5)[:, None]
Z = np.linspace(0.5, 5.5, 5)[:, None]
BOUNDS = (-2.0, 2.0)


@pytest.fixture(scope="module")
def tutorial():
    """GPflow's regression tutorial on the private outputs: the fitted kernel and noise variance."""
    m = gpflow.models.GPR((X, Y), kernel=gpflow.kernels.SquaredExponential())
    gpflow.optimizers.Scipy().minimize(m.training_loss, m.trainable_variables, options=dict(maxiter=100))
    lengthscale, variance = float(m.kernel.lengthscales.numpy()), float(m.kernel.variance.numpy())
    noise = float(m.likelihood.variance.numpy())
    assert not np.isclose([lengthscale, variance, noise], 1.0).any()  # all moved off GPflow's defaults
    return lengthscale, variance, noise


def fitted_kernel(tutorial):
    lengthscale, variance, _ = tutorial
    return gpflow.kernels.SquaredExponential(lengthscales=lengthscale, variance=variance)


#: every release path of every model kind, each ``(build(kernel, noise), release(model, accountant))``
PATHS = {
    "DPGPR.release": (lambda k, s: DPGPR((X, Y), k, y_bounds=BOUNDS, noise_variance=s),
                      lambda m, acc: m.release(XNEW, epsilon=1.0, delta=1e-3, accountant=acc)),
    "DPGPR.release-standard": (lambda k, s: DPGPR((X, Y), k, y_bounds=BOUNDS, noise_variance=s),
                               lambda m, acc: m.release(XNEW, epsilon=1.0, delta=1e-3, accountant=acc,
                                                        mechanism="standard")),
    "DPGPRFITC.release_function": (lambda k, s: DPGPRFITC((X, Y), k, Z, noise_variance=s, y_bounds=BOUNDS),
                                   lambda m, acc: m.release_function(epsilon=1.0, delta=1e-3, accountant=acc)),
    "DPSGPR.release": (lambda k, s: DPSGPR((X, Y), k, Z, noise_variance=s, y_bounds=BOUNDS),
                       lambda m, acc: m.release(XNEW, epsilon=1.0, delta=1e-3, accountant=acc)),
    "streaming.release_function": (lambda k, s: DPSGPR((X, Y), k, Z, noise_variance=s, y_bounds=BOUNDS),
                                   lambda m, acc: streaming.release_function(m, epsilon=1.0, delta=1e-3,
                                                                             accountant=acc, chunk_size=7)),
    "DPLaplaceGPC.release-2-steps": (lambda k, s: DPLaplaceGPC((X, LABELS), k),
                                     lambda m, acc: m.release(epsilon=1.0, delta=1e-3, steps=2, accountant=acc)),
    "DPSparseLaplaceGPC.release_function": (lambda k, s: DPSparseLaplaceGPC((X, LABELS), k, Z),
                                            lambda m, acc: m.release_function(epsilon=1.0, delta=1e-3,
                                                                              accountant=acc)),
    "DPMulticlassLaplaceGPC.release": (lambda k, s: DPMulticlassLaplaceGPC((X, CLASSES), k, num_classes=3),
                                       lambda m, acc: m.release(epsilon=1.0, delta=1e-3, accountant=acc)),
    "DPSparseMulticlassLaplaceGPC.release": (
        lambda k, s: DPSparseMulticlassLaplaceGPC((X, CLASSES), k, Z, num_classes=3),
        lambda m, acc: m.release(epsilon=1.0, delta=1e-3, accountant=acc)),
    "DPSparseMulticlassLaplaceGPC.release_streamed": (
        lambda k, s: DPSparseMulticlassLaplaceGPC((X, CLASSES), k, Z, num_classes=3),
        lambda m, acc: m.release_streamed(epsilon=1.0, delta=1e-3, accountant=acc, chunk_size=7)),
}


def untouched(accountant, draws):
    """Nothing reserved, held, committed or drawn."""
    return accountant.history() == [] and accountant.held == (0.0, 0.0) and draws == []


@pytest.mark.parametrize("path", sorted(PATHS))
def test_the_tutorials_kernel_is_refused_by_every_release_path_with_nothing_reserved(path, tutorial, draws):
    build, release = PATHS[path]
    model = build(fitted_kernel(tutorial), tutorial[2])
    accountant = dp.PrivacyAccountant(epsilon=10.0, delta=1e-2)
    with pytest.raises(dp.PrivacyLeakError) as refused:
        release(model, accountant)
    assert ".kernel.lengthscales" in str(refused.value) and ".kernel.variance" in str(refused.value)
    assert untouched(accountant, draws)


@pytest.mark.parametrize("path", ["DPGPR.release", "DPLaplaceGPC.release-2-steps",
                                  "DPSparseMulticlassLaplaceGPC.release_streamed", "streaming.release_function"])
def test_the_same_paths_release_once_the_values_are_declared(path, tutorial):
    build, release = PATHS[path]
    model = build(fitted_kernel(tutorial), tutorial[2])
    targets = model.problems if hasattr(model, "problems") else (model,)
    for target in targets:  # the user's claim: chosen without the outputs (here it is false; the claim is theirs)
        target.declare_hyperparameters_public()
    accountant = dp.PrivacyAccountant(epsilon=10.0, delta=1e-2)
    release(model, accountant)
    assert accountant.spent == pytest.approx((1.0, 1e-3))


def test_a_sample_mean_prior_and_the_residual_variance_as_noise_are_refused(draws):
    sample_mean = gpflow.functions.Constant(float(np.mean(Y)))  # centring by the sample mean: a leak
    model = DPGPR((X, Y), gpflow.kernels.SquaredExponential(), y_bounds=BOUNDS, mean_function=sample_mean,
                  noise_variance=float(np.var(Y)))
    accountant = dp.PrivacyAccountant(epsilon=10.0, delta=1e-2)
    with pytest.raises(dp.PrivacyLeakError) as refused:
        model.release(XNEW, epsilon=1.0, delta=1e-3, accountant=accountant)
    assert "['.mean_function.c', '.likelihood.variance']" in str(refused.value)  # the kernel holds GPflow's defaults
    assert untouched(accountant, draws)


def test_a_kernel_class_whose_defaults_are_the_fitted_values_is_refused(tutorial, draws):
    lengthscale, variance, _ = tutorial

    class Fitted(gpflow.kernels.SquaredExponential):  # "defaults" that are the fitted values
        def __init__(self, lengthscales=lengthscale, variance=variance):
            super().__init__(lengthscales=lengthscales, variance=variance)

    class Plain(gpflow.kernels.SquaredExponential):  # GPflow's own constructor: its defaults are GPflow's
        pass

    assert DPGPR((X, Y), Plain(), y_bounds=BOUNDS).undeclared_hyperparameters == []
    model = DPGPR((X, Y), Fitted(), y_bounds=BOUNDS)
    assert sorted(model.undeclared_hyperparameters) == [".kernel.lengthscales", ".kernel.variance"]
    accountant = dp.PrivacyAccountant(epsilon=10.0, delta=1e-2)
    with pytest.raises(dp.PrivacyLeakError):
        model.release(XNEW, epsilon=1.0, delta=1e-3, accountant=accountant)
    assert untouched(accountant, draws)


@pytest.mark.parametrize("declaration", ["no", "False", 1, None, [True]])
def test_a_declaration_that_is_not_a_bool_is_refused_not_read_as_true(declaration, tutorial, draws):
    model = DPGPR((X, Y), fitted_kernel(tutorial), y_bounds=BOUNDS)
    accountant = dp.PrivacyAccountant(epsilon=10.0, delta=1e-2)
    with pytest.raises(TypeError, match="hyperparameters_public must be True or False"):
        model.release(XNEW, epsilon=1.0, delta=1e-3, accountant=accountant, hyperparameters_public=declaration)
    with pytest.raises(TypeError, match="hyperparameters_public must be True or False"):
        dp.selection.select_hyperparameters(model, [{".kernel.lengthscales": 1.0}], epsilon=1.0, folds=2,
                                            accountant=accountant, hyperparameters_public=declaration)
    assert untouched(accountant, draws)


def test_a_selection_refuses_fitted_values_its_grid_leaves_and_accepts_those_it_replaces(tutorial, draws):
    lengthscale, variance, noise = tutorial
    model = DPGPR((X, Y), fitted_kernel(tutorial), y_bounds=BOUNDS, noise_variance=noise)
    accountant = dp.PrivacyAccountant(epsilon=10.0, delta=1e-2)
    lengthscales_only = [{".kernel.lengthscales": v} for v in (0.5, 2.0)]
    with pytest.raises(dp.PrivacyLeakError) as refused:
        dp.selection.select_hyperparameters(model, lengthscales_only, epsilon=1.0, folds=2, accountant=accountant)
    message = str(refused.value)
    assert ".kernel.variance" in message and ".likelihood.variance" in message
    assert ".kernel.lengthscales" not in message  # the grid replaces it
    assert untouched(accountant, draws)
    # a grid that sets every fitted value replaces them all: the selection runs and declares its choice
    everything = [{".kernel.lengthscales": ell, ".kernel.variance": 1.0, ".likelihood.variance": s}
                  for ell in (0.5, 2.0) for s in (0.05, 0.2)]
    selection = dp.selection.select_hyperparameters(model, everything, epsilon=1.0, folds=2, accountant=accountant)
    selection.apply(model)
    assert model.undeclared_hyperparameters == [] and model.changed_hyperparameters() == []
    model.release(XNEW, epsilon=1.0, delta=1e-3, accountant=accountant)
    assert accountant.spent == pytest.approx((2.0, 1e-3))


def test_a_multiclass_selection_refuses_the_fitted_kernel_variance(tutorial, draws):
    model = DPMulticlassLaplaceGPC((X, CLASSES), fitted_kernel(tutorial), num_classes=3)
    accountant = dp.PrivacyAccountant(epsilon=10.0, delta=1e-2)
    with pytest.raises(dp.PrivacyLeakError, match=r"\['\.kernel\.variance'\]"):
        dp.selection.select_hyperparameters(model, [{".kernel.lengthscales": v} for v in (0.5, 2.0)], epsilon=1.0,
                                            folds=2, accountant=accountant)
    assert untouched(accountant, draws)


def test_the_opt_in_does_not_lift_the_other_two_signals(draws):
    trained = DPGPR((X, Y), gpflow.kernels.SquaredExponential(), y_bounds=BOUNDS)
    gpflow.optimizers.Scipy().minimize(trained.training_loss, trained.trainable_variables, options=dict(maxiter=5))
    changed = DPGPR((X, Y), gpflow.kernels.SquaredExponential(), y_bounds=BOUNDS)
    changed.kernel.lengthscales = gpflow.Parameter(1.7, transform=gpflow.utilities.positive())  # swapped wholesale
    accountant = dp.PrivacyAccountant(epsilon=10.0, delta=1e-2)
    with dp.allow_undeclared_hyperparameters():
        with pytest.raises(dp.PrivacyLeakError, match="training objective"):
            trained.release(XNEW, epsilon=1.0, delta=1e-3, accountant=accountant)
        with pytest.raises(dp.PrivacyLeakError, match="changed since"):
            changed.release(XNEW, epsilon=1.0, delta=1e-3, accountant=accountant)
    assert untouched(accountant, draws)


def test_the_opt_in_ends_with_its_block_even_on_an_error_and_stays_in_its_thread(tutorial):
    model = DPGPR((X, Y), fitted_kernel(tutorial), y_bounds=BOUNDS)
    with pytest.raises(KeyError):
        with dp.allow_undeclared_hyperparameters():
            raise KeyError("inside")
    with pytest.raises(dp.PrivacyLeakError):
        model.release(XNEW, epsilon=1.0, delta=1e-3)
    outcome = []

    def in_a_thread():
        try:
            model.release(XNEW, epsilon=1.0, delta=1e-3)
            outcome.append("released")
        except dp.PrivacyLeakError:
            outcome.append("refused")

    with dp.allow_undeclared_hyperparameters():
        worker = threading.Thread(target=in_a_thread)
        worker.start()
        worker.join()
    assert outcome == ["refused"]  # a thread does not inherit the caller's opt-in
