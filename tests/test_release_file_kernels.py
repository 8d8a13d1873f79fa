"""Every release whose file holds its kernel can write that file (issue 36): the kernels a release file holds
(``dpgp_gpflow.io.gpflow_specs``) cover every GPflow kernel a whole-row release accepts, and every release of a
function or classifier refuses a kernel its file could not hold BEFORE anything is reserved (before, the
release was drawn and charged, then ``save`` refused it).

Independent references: the kernel matrices of the original GPflow kernel (the rebuilt one must equal them
exactly), and the accountant's ledger (nothing held, nothing spent, no event) for every refusal."""

from __future__ import annotations

import inspect
import json

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import streaming
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.io import ReleaseFileError, gpflow_specs
from dpgp_gpflow.models import (DPGPRFITC, DPSGPR, DPLaplaceGPC, DPMulticlassLaplaceGPC, DPSparseLaplaceGPC,
                                DPSparseMulticlassLaplaceGPC)

K = gpflow.kernels
BOX = [(-2.0, 2.0), (0.0, 3.0)]
_rng = np.random.default_rng(3)
X = np.column_stack([_rng.uniform(-2.0, 2.0, 16), _rng.uniform(0.0, 3.0, 16)])
Y = np.clip(np.sin(X[:, :1]) + 0.1 * X[:, 1:], -1.0, 1.0)
LABELS = (X[:, 0] > 0).astype(int) + (X[:, 1] > 1.5)  # 0, 1, 2
SIGNS = np.where(X[:, :1] > 0.0, 1.0, -1.0)
Z = wr.inducing_grid(BOX, 2)  # M = 4


def _leaf_classes():
    """GPflow's kernel classes that build from their defaults, one kernel each (no combination)."""
    for name, cls in sorted(vars(K).items()):
        if not (inspect.isclass(cls) and issubclass(cls, K.Kernel)) or inspect.isabstract(cls) or name != cls.__name__:
            continue  # an abstract class, or an alias (RBF, Bias)
        try:
            kernel = cls()
            kernel(X[:2])  # a base class (Stationary, ...) builds but has no maths
        except (TypeError, ValueError, NotImplementedError):
            continue  # needs arguments (Periodic, Sum, ChangePoints, Coregion, ...): built below where it matters
        yield name, kernel


def _accepted_kernels():
    """Every GPflow kernel a whole-row release accepts (a bound on k(x, x) over BOX), leaves and Periodic of each
    isotropic stationary kernel."""
    out = {}
    for name, kernel in _leaf_classes():
        try:
            wr.kernel_bound(kernel, BOX)
        except NotImplementedError:
            continue
        out[name] = kernel
        if isinstance(kernel, K.IsotropicStationary):
            out[f"Periodic({name})"] = K.Periodic(type(kernel)(), period=[2.0, 3.0])
    return out


ACCEPTED = _accepted_kernels()


def test_the_whole_row_kernels_are_what_we_expect():
    """The list below is GPflow's (so a GPflow that adds a stationary kernel shows up here)."""
    assert {"SquaredExponential", "Matern12", "Matern32", "Matern52", "Exponential", "RationalQuadratic", "Cosine",
            "Constant", "Linear", "Polynomial", "Periodic(SquaredExponential)"} <= set(ACCEPTED)


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_every_kernel_a_whole_row_release_accepts_has_a_file_form(name):
    kernel = ACCEPTED[name]
    spec = gpflow_specs.kernel_spec(kernel)
    rebuilt = gpflow_specs.kernel_from_spec(json.loads(json.dumps(spec)), input_dim=2)
    assert type(rebuilt) is type(kernel) and gpflow_specs.kernel_spec(rebuilt) == spec
    assert not rebuilt.trainable_variables
    np.testing.assert_array_equal(rebuilt(X).numpy(), kernel(X).numpy())
    np.testing.assert_array_equal(rebuilt(X, full_cov=False).numpy(), kernel(X, full_cov=False).numpy())


def test_a_periodic_or_polynomial_file_form_that_does_not_fit_is_refused():
    periodic = gpflow_specs.kernel_spec(K.Periodic(K.Matern32(active_dims=[1]), period=2.0))
    bad_base = json.loads(json.dumps(periodic))
    bad_base["base_kernel"] = gpflow_specs.kernel_spec(K.Linear())
    with pytest.raises(ReleaseFileError, match="Periodic: needs"):
        gpflow_specs.kernel_from_spec(bad_base, input_dim=2)
    periods = json.loads(json.dumps(periodic))
    periods["parameters"]["period"] = [1.0, 2.0, 3.0]
    with pytest.raises(ReleaseFileError, match="3 period for 1 active input column"):
        gpflow_specs.kernel_from_spec(periods, input_dim=2)
    degree = gpflow_specs.kernel_spec(K.Polynomial(degree=2.0))
    degree["parameters"]["degree"] = [2.0, 3.0]
    with pytest.raises(ReleaseFileError, match="degree must be one number"):
        gpflow_specs.kernel_from_spec(degree, input_dim=2)


class _MySE(K.SquaredExponential):
    """A subclass: its maths may differ, so no file holds it (a whole-row release accepts it: it is stationary)."""


def _untouched(acc) -> None:
    assert acc.history() == [] and acc.held == (0.0, 0.0) and acc.spent == (0.0, 0.0)


PUBLIC = dict(hyperparameters_public=True)
RELEASES = {
    "DPSGPR.release_function": lambda k, acc: DPSGPR((X, Y), k, Z, noise_variance=0.1, y_bounds=(-1.0, 1.0),
                                                     **PUBLIC).release_function(epsilon=1.0, delta=1e-3,
                                                                                accountant=acc),
    "DPGPRFITC.release_function": lambda k, acc: DPGPRFITC((X, Y), k, Z, noise_variance=0.1, y_bounds=(-1.0, 1.0),
                                                           **PUBLIC).release_function(epsilon=1.0, delta=1e-3,
                                                                                      accountant=acc),
    "streaming.release_function": lambda k, acc: streaming.release_function(
        DPSGPR((X, Y), k, Z, noise_variance=0.1, y_bounds=(-1.0, 1.0), **PUBLIC), epsilon=1.0, delta=1e-3,
        accountant=acc, chunk_size=5),
    "DPLaplaceGPC.release": lambda k, acc: DPLaplaceGPC((X, SIGNS), k, **PUBLIC).release(
        epsilon=1.0, delta=1e-3, accountant=acc),
    "DPSparseLaplaceGPC.release": lambda k, acc: DPSparseLaplaceGPC((X, SIGNS), k, Z, **PUBLIC).release(
        epsilon=1.0, delta=1e-3, accountant=acc),
    "DPMulticlassLaplaceGPC.release": lambda k, acc: DPMulticlassLaplaceGPC(
        (X, LABELS), k, num_classes=3, **PUBLIC).release(epsilon=1.0, delta=1e-3, accountant=acc),
    "DPSparseMulticlassLaplaceGPC.release": lambda k, acc: DPSparseMulticlassLaplaceGPC(
        (X, LABELS), k, Z, num_classes=3, **PUBLIC).release(epsilon=1.0, delta=1e-3, accountant=acc),
    "DPSparseMulticlassLaplaceGPC.release_streamed": lambda k, acc: DPSparseMulticlassLaplaceGPC(
        (X, LABELS), k, Z, num_classes=3, **PUBLIC).release_streamed(epsilon=1.0, delta=1e-3, accountant=acc,
                                                                     chunk_size=5),
    "whole rows, regression": lambda k, acc: DPSGPR(
        (X, Y), k, Z, noise_variance=0.1, y_bounds=(-1.0, 1.0), x_bounds=BOX, private_inputs=True,
        **PUBLIC).release_function(epsilon=1.0, delta=1e-3, accountant=acc),
    "whole rows, residual releases": lambda k, acc: DPSGPR(
        (X, Y), k, Z, noise_variance=0.1, y_bounds=(-1.0, 1.0), x_bounds=BOX, private_inputs=True,
        **PUBLIC).release_function(epsilon=1.0, delta=1e-3, accountant=acc, residual_fractions="default"),
    "whole rows, lengthscale grid": lambda k, acc: DPSGPR(
        (X, Y), k, Z, noise_variance=0.1, y_bounds=(-1.0, 1.0), x_bounds=BOX, private_inputs=True,
        **PUBLIC).release_function(epsilon=1.0, delta=1e-3, accountant=acc, lengthscales=(0.5, 1.5)),
    "whole rows, classifier": lambda k, acc: DPSparseMulticlassLaplaceGPC(
        (X, LABELS), k, Z, num_classes=3, x_bounds=BOX, private_inputs=True, **PUBLIC).release(
        epsilon=1.0, delta=1e-3, accountant=acc),
}


@pytest.mark.parametrize("path", sorted(RELEASES))
def test_a_kernel_no_file_holds_is_refused_before_anything_is_reserved(path):
    kernel = _MySE(lengthscales=1.5) if path.startswith("whole rows") else K.ArcCosine()
    acc = dp.PrivacyAccountant(epsilon=5.0, delta=1e-2)
    with pytest.raises(NotImplementedError, match=r"cannot save a .*(ArcCosine|_MySE) kernel.*nothing was reserved"):
        RELEASES[path](kernel, acc)
    _untouched(acc)


def test_a_mean_function_no_file_holds_is_refused_before_anything_is_reserved():
    mean = gpflow.functions.Linear(A=[[0.1], [0.0]], b=0.2)
    model = DPSGPR((X, Y), K.SquaredExponential(), Z, noise_variance=0.1, y_bounds=(-1.0, 1.0), mean_function=mean,
                   **PUBLIC)
    acc = dp.PrivacyAccountant(epsilon=5.0, delta=1e-2)
    for release in (model.release_function, lambda **kw: streaming.release_function(model, **kw)):
        with pytest.raises(NotImplementedError, match=r"cannot save a .*Linear mean function.*nothing was reserved"):
            release(epsilon=1.0, delta=1e-3, accountant=acc)
    _untouched(acc)
