"""The leak guard's GPflow workflow (models/base.py): the public-hyperparameter declaration, the
refusal of values given at construction and never declared (GPflow's regression tutorial: train a
``GPR``, reuse its kernel; a warning only inside ``dp.allow_undeclared_hyperparameters()``), GPflow
defaults, selections, and the refusal messages."""

from __future__ import annotations

import warnings

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import HyperparameterWarning, PrivacyLeakError
from dpgp_gpflow.models import DPGPR, DPGPRFITC, DPSGPR, DPLaplaceGPC, DPSparseLaplaceGPC

rng = np.random.default_rng(5)
X = rng.uniform(0.0, 6.0, (24, 1))
Y = np.sin(X) + 0.2 * rng.standard_normal((24, 1))
LABELS = np.where(Y > 0, 1.0, -1.0)
XNEW = np.linspace(0.0, 6.0, 4)[:, None]
Z = np.linspace(0.5, 5.5, 4)[:, None]
BOUNDS = (-2.0, 2.0)


def kernel(**values):
    return gpflow.kernels.SquaredExponential(**values)


#: every private model, built with the given kernel and (for regression) noise variance
MAKERS = {
    "DPGPR": lambda k, noise, **kw: DPGPR((X, Y), k, y_bounds=BOUNDS, noise_variance=noise, **kw),
    "DPGPRFITC": lambda k, noise, **kw: DPGPRFITC((X, Y), k, Z, noise_variance=noise, y_bounds=BOUNDS, **kw),
    "DPSGPR": lambda k, noise, **kw: DPSGPR((X, Y), k, Z, noise_variance=noise, y_bounds=BOUNDS, **kw),
    "DPLaplaceGPC": lambda k, noise, **kw: DPLaplaceGPC((X, LABELS), k, **kw),
    "DPSparseLaplaceGPC": lambda k, noise, **kw: DPSparseLaplaceGPC((X, LABELS), k, Z, **kw),
}


def publish(m, **kw):
    """One release of ``m`` by its own method (OS noise: no seed warning)."""
    if isinstance(m, (DPLaplaceGPC, DPSparseLaplaceGPC)):
        return m.release(epsilon=1.0, delta=1e-3, **kw)
    if isinstance(m, (DPGPRFITC, DPSGPR)):
        return m.release_function(epsilon=1.0, delta=1e-3, **kw)
    return m.release(XNEW, epsilon=1.0, delta=1e-3, **kw)


def publish_without_hyperparameter_warning(m, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", HyperparameterWarning)
        return publish(m, **kw)


def train(m, maxiter=5):
    gpflow.optimizers.Scipy().minimize(m.training_loss, m.trainable_variables, options=dict(maxiter=maxiter))


# ---------------------------------------------------------------------------------------------
# One declaration, everywhere the docs say


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_values_given_at_construction_refuse_unless_declared_by_the_constructor_flag(name, draws):
    make = MAKERS[name]
    given = make(kernel(lengthscales=2.5, variance=1.7), 0.1)
    with pytest.raises(PrivacyLeakError, match=r"\.kernel\.lengthscales") as refused:
        publish(given)
    assert ".kernel.variance" in str(refused.value) and draws == []
    with dp.allow_undeclared_hyperparameters():  # opt-in: a warning instead
        with pytest.warns(HyperparameterWarning, match=r"\.kernel\.lengthscales") as caught:
            publish(given)
    assert ".kernel.variance" in str(caught[0].message)
    assert caught[0].filename == __file__  # points at the caller, not at dpgp_gpflow
    declared = make(kernel(lengthscales=2.5, variance=1.7), 0.1, hyperparameters_public=True)
    assert declared.undeclared_hyperparameters == []
    publish_without_hyperparameter_warning(declared)


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_the_constructor_flag_must_be_a_bool(name):
    with pytest.raises(TypeError, match="hyperparameters_public"):
        MAKERS[name](kernel(), None, hyperparameters_public="yes")


def test_declaring_after_construction_or_at_release_lifts_the_refusal():
    m = MAKERS["DPGPR"](kernel(lengthscales=2.5), 0.1)
    assert m.undeclared_hyperparameters == [".kernel.lengthscales", ".likelihood.variance"]
    publish_without_hyperparameter_warning(m, hyperparameters_public=True)  # this release only
    with pytest.raises(PrivacyLeakError):
        publish(m)
    m.declare_hyperparameters_public()
    assert m.undeclared_hyperparameters == []
    publish_without_hyperparameter_warning(m)


def test_declare_after_training_is_accepted_and_training_again_is_refused(draws):
    m = MAKERS["DPGPR"](kernel(), None)
    train(m)
    assert m.private_objective_evaluated and m.changed_hyperparameters()
    with pytest.raises(PrivacyLeakError):
        publish(m)
    assert draws == []
    m.declare_hyperparameters_public()  # the user takes responsibility for the claim
    assert not m.private_objective_evaluated and m.changed_hyperparameters() == []
    publish_without_hyperparameter_warning(m)
    train(m, maxiter=2)  # the objective read the outputs again
    with pytest.raises(PrivacyLeakError, match="training objective"):
        publish(m)


@pytest.mark.parametrize("name", ["DPGPRFITC", "DPSGPR", "DPLaplaceGPC", "DPSparseLaplaceGPC"])
def test_declare_after_training_works_for_every_model(name):
    m = MAKERS[name](kernel(), None)
    train(m, maxiter=3)
    with pytest.raises(PrivacyLeakError):
        publish(m)
    m.declare_hyperparameters_public()
    publish_without_hyperparameter_warning(m)


# ---------------------------------------------------------------------------------------------
# GPflow's regression tutorial: fit gpflow.models.GPR, reuse its kernel


def tutorial_gpr():
    gpr = gpflow.models.GPR((X, Y), kernel=gpflow.kernels.SquaredExponential())
    gpflow.optimizers.Scipy().minimize(gpr.training_loss, gpr.trainable_variables)
    return gpr


def test_the_tutorial_kernel_reused_is_refused_with_the_routes_out():
    gpr = tutorial_gpr()
    m = DPGPR((X, Y), gpr.kernel, y_bounds=BOUNDS, noise_variance=float(gpr.likelihood.variance.numpy()))
    assert not m.private_objective_evaluated and m.changed_hyperparameters() == []  # invisible to both signals
    with pytest.raises(PrivacyLeakError) as refused:
        publish(m)
    message = str(refused.value)
    assert "\n" not in message  # one line
    for part in (".kernel.lengthscales", ".kernel.variance", ".likelihood.variance", "hyperparameters_public=True",
                 "declare_hyperparameters_public()", "select_hyperparameters(model, grid, epsilon=",
                 '[{".kernel.lengthscales": 10.0, ".likelihood.variance": 1.0}, ...]'):
        assert part in message, part


def test_the_tutorial_kernel_trained_again_after_reuse_is_refused():
    gpr = gpflow.models.GPR((X, Y), kernel=gpflow.kernels.SquaredExponential())
    m = DPGPR((X, Y), gpr.kernel, y_bounds=BOUNDS, noise_variance=0.1, hyperparameters_public=True)
    gpflow.optimizers.Scipy().minimize(gpr.training_loss, gpr.trainable_variables, options=dict(maxiter=5))
    with pytest.raises(PrivacyLeakError, match="lengthscales"):
        publish(m)


# ---------------------------------------------------------------------------------------------
# What does not warn: GPflow's defaults, public pieces the model makes, selections


@pytest.mark.parametrize("make_kernel", [
    lambda: gpflow.kernels.SquaredExponential(),
    lambda: gpflow.kernels.SquaredExponential(lengthscales=np.ones(1)),  # ARD, default values
    lambda: gpflow.kernels.Matern52(variance=1.0, lengthscales=1.0),
    lambda: gpflow.kernels.RationalQuadratic() + gpflow.kernels.Periodic(gpflow.kernels.Matern32()),
], ids=["se", "se-ard", "matern52-explicit", "sum-with-periodic"])
def test_gpflow_defaults_do_not_warn(make_kernel):
    m = DPGPR((X, Y), make_kernel(), y_bounds=BOUNDS)  # noise_variance None: GPflow's 1.0
    assert m.undeclared_hyperparameters == []
    publish_without_hyperparameter_warning(m)
    explicit = DPGPR((X, Y), make_kernel(), y_bounds=BOUNDS, noise_variance=1.0)
    assert explicit.undeclared_hyperparameters == []


def test_a_non_default_periodic_period_and_a_given_mean_function_are_noticed():
    k = gpflow.kernels.Periodic(gpflow.kernels.SquaredExponential(), period=2.0)
    m = DPGPR((X, Y), k, y_bounds=BOUNDS, mean_function=gpflow.functions.Constant(0.3))
    assert sorted(m.undeclared_hyperparameters) == [".kernel.period", ".mean_function.c"]


def test_the_default_mean_and_the_inducing_inputs_are_not_warned_about():
    m = DPSGPR((X, Y), kernel(), Z, y_bounds=(-2.0, 3.0))  # mean: the bounds' midpoint 0.5, not a default
    assert float(m.mean_function.c.numpy()[0]) == 0.5
    assert m.undeclared_hyperparameters == []


def test_a_selection_applied_is_public_and_selecting_does_not_warn():
    m = MAKERS["DPGPR"](kernel(lengthscales=3.0), 0.1)  # initial values, about to be replaced
    grid = [{".kernel.lengthscales": ell, ".likelihood.variance": noise} for ell in (0.5, 2.0) for noise in (0.05, 0.2)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", HyperparameterWarning)
        sel = dp.selection.select_hyperparameters(m, grid, epsilon=1.0, folds=2)
    sel.apply(m)
    assert m.undeclared_hyperparameters == [] and m.changed_hyperparameters() == []
    publish_without_hyperparameter_warning(m)


def test_a_selection_refuses_undeclared_values_outside_its_grid_and_declares_only_what_it_chose():
    m = MAKERS["DPGPR"](kernel(lengthscales=3.0, variance=2.0), None)
    grid = [{".kernel.lengthscales": v} for v in (0.5, 2.0)]
    accountant = dp.PrivacyAccountant(epsilon=10.0, delta=1e-2)
    with pytest.raises(PrivacyLeakError, match=r"\['\.kernel\.variance'\]"):  # used as given: must be public
        dp.selection.select_hyperparameters(m, grid, epsilon=1.0, folds=2, accountant=accountant)
    assert accountant.history() == []
    with dp.allow_undeclared_hyperparameters():  # opt-in: the selection and the release warn about it
        with pytest.warns(HyperparameterWarning, match=r"\['\.kernel\.variance'\]"):
            sel = dp.selection.select_hyperparameters(m, grid, epsilon=1.0, folds=2, accountant=accountant)
    sel.apply(m)
    assert m.undeclared_hyperparameters == [".kernel.variance"]  # the lengthscale chosen is public now
    with pytest.raises(PrivacyLeakError, match=r"\['\.kernel\.variance'\]"):
        publish(m)
    m.declare_hyperparameters_public(paths=[".kernel.variance"])
    publish_without_hyperparameter_warning(m)


def test_applying_a_selection_to_a_trained_model_does_not_launder_it():
    source = MAKERS["DPGPR"](kernel(), None)
    sel = dp.selection.select_hyperparameters(source, [{".kernel.lengthscales": v} for v in (0.5, 2.0)],
                                              epsilon=1.0, folds=2)
    trained = MAKERS["DPGPR"](kernel(), None)
    train(trained)  # kernel variance and noise fitted on the outputs; the grid replaces the lengthscale only
    sel.apply(trained)
    with pytest.raises(PrivacyLeakError, match="training objective"):
        publish(trained)


def test_declaring_unknown_paths_is_refused():
    m = MAKERS["DPGPR"](kernel(), None)
    with pytest.raises(ValueError, match="kernel.lengthscale"):
        m.declare_hyperparameters_public(paths=[".kernel.lengthscale"])


# ---------------------------------------------------------------------------------------------
# The refusals say how to select privately, with the grid format


def test_refusal_messages_show_how_to_select_and_the_grid_format():
    trained = MAKERS["DPGPR"](kernel(), None)
    train(trained)
    changed = MAKERS["DPGPR"](kernel(), None)
    changed.kernel.lengthscales.assign(2.0)
    for m, reason in ((trained, "training objective"), (changed, "changed since")):
        with pytest.raises(PrivacyLeakError) as err:
            publish(m)
        message = str(err.value)
        assert reason in message
        assert "dpgp_gpflow.selection.select_hyperparameters(model, grid, epsilon=...)" in message
        assert '[{".kernel.lengthscales": 10.0, ".likelihood.variance": 1.0}, ...]' in message
        assert "declare_hyperparameters_public()" in message and "hyperparameters_public=True" in message
