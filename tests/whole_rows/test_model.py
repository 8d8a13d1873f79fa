"""DPSGPR(..., private_inputs=True): the model entry of whole-row releases, its refusals (nothing reserved), and
the paths that treat inputs as public refusing it."""

from __future__ import annotations

import warnings

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.models import DPSGPR, kmeans_inducing_inputs
from dpgp_gpflow.streaming import LocalChunks, minibatch_kmeans_inducing_inputs

BOX = [(0.0, 10.0)]
BOUNDS = (-3.0, 3.0)


def _data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (n, 1))
    return X, np.clip(2 * np.sin(X) + 0.3 * rng.normal(size=(n, 1)), *BOUNDS)


def _kernel():
    return gpflow.kernels.SquaredExponential(variance=3.0, lengthscales=2.0)


def _model(X=None, Y=None, **options):
    if X is None:
        X, Y = _data()
    options = {"noise_variance": 0.2, "y_bounds": BOUNDS, "x_bounds": BOX, "private_inputs": True,
               "hyperparameters_public": True, **options}
    return DPSGPR((X, Y), _kernel(), wr.inducing_grid(BOX, 6), **options)


def _seeded(function, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        return function(*args, **kwargs)


def test_the_model_release_is_the_whole_row_release_of_its_rows():
    X, Y = _data()
    model = _model(X, Y)
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    released = _seeded(model.release_function, epsilon=1.0, delta=1e-3, seed=4, accountant=acc)
    direct = _seeded(wr.release_rows, LocalChunks(X, Y), _kernel(), wr.inducing_grid(BOX, 6), x_bounds=BOX,
                     y_bounds=BOUNDS, epsilon=1.0, delta=1e-3, seed=4, noise_variance=0.2)
    for key in ("S", "b", "q"):
        np.testing.assert_array_equal(released.statistics[key], direct.statistics[key])
    assert isinstance(released, wr.WholeRowsRelease)
    assert (released.kernel_variance, released.noise_variance, released.variances) == (3.0, 0.2, "given")
    assert len(acc.history()) == 1 and acc.history()[0]["status"] == "committed"
    mean, var = released.predict_f(np.array([[-4.0], [5.0], [30.0]]))  # anywhere, NumPy [k, 1]
    assert isinstance(mean, np.ndarray) and mean.shape == var.shape == (3, 1) and np.all(var > 0)
    assert released.privacy_card()["neighbours"] == "row (inputs and outputs)"


def test_without_a_noise_variance_the_variances_are_fitted_on_the_release():
    X, Y = _data()
    model = DPSGPR((X, Y), gpflow.kernels.SquaredExponential(lengthscales=2.0), wr.inducing_grid(BOX, 6),
                   y_bounds=BOUNDS, x_bounds=BOX, private_inputs=True, hyperparameters_public=True)
    released = _seeded(model.release_function, epsilon=1.0, delta=1e-3, seed=4)
    assert released.variances == "fit"
    refit = released.with_variances(1.0, 1.0).fitted()
    assert (released.kernel_variance, released.noise_variance) == pytest.approx((refit.kernel_variance,
                                                                                 refit.noise_variance))


def test_inputs_outside_the_box_are_clipped_with_a_count():
    X, Y = _data(30)
    X[:4] = [[-1.0], [11.0], [20.0], [-0.5]]
    with pytest.warns(dp.ClippingWarning, match=r"^4 of 30 private rows had inputs outside"):
        model = _model(X, Y)
    assert model.data[0].numpy().min() == 0.0 and model.data[0].numpy().max() == 10.0


def _refused(build, error, match):
    acc = dp.PrivacyAccountant(epsilon=2.0, delta=1e-2)
    with pytest.raises(error, match=match):
        build(acc)
    assert acc.history() == [] and acc.held == (0.0, 0.0) and acc.spent == (0.0, 0.0)


@pytest.mark.parametrize("options, error, match", [
    ({"x_bounds": None}, TypeError, "x_bounds"),
    ({"x_bounds": [(1.0, 0.0)]}, ValueError, "lo < hi"),
    ({"x_bounds": [(0.0, 1.0), (0.0, 1.0)]}, ValueError, "column"),
    ({"y_bounds": (1.0, -1.0)}, ValueError, "lo < hi"),
    ({"private_inputs": "yes"}, TypeError, "private_inputs"),
])
def test_bad_public_pieces_are_refused_when_the_model_is_built(options, error, match):
    _refused(lambda acc: _model(**options).release_function(epsilon=1.0, delta=1e-3, accountant=acc), error, match)


@pytest.mark.parametrize("mean_function", [gpflow.functions.Constant(0.0), gpflow.functions.Constant(160.0),
                                           gpflow.functions.Linear()])
def test_a_mean_function_with_private_inputs_is_refused_in_one_line(mean_function):
    """The whole-row release centres the outputs at the bounds' midpoint whatever the model's mean function: a given
    one was silently ignored (a fresh-user trial: Constant(0), Constant(160) and Linear predicted the same)."""
    with pytest.raises(ValueError, match="private_inputs=True takes no mean_function") as refused:
        _model(mean_function=mean_function)
    assert "\n" not in str(refused.value)
    _model(private_inputs=False, x_bounds=None, mean_function=mean_function)  # public inputs: it is used


def test_inducing_inputs_by_kmeans_on_the_private_inputs_are_refused():
    X, Y = _data()
    Z = kmeans_inducing_inputs(X, 5)
    with pytest.raises(ValueError, match="k-means"):
        DPSGPR((X, Y), _kernel(), gpflow.inducing_variables.InducingPoints(Z), noise_variance=0.2, y_bounds=BOUNDS,
               x_bounds=BOX, private_inputs=True)
    DPSGPR((X, Y), _kernel(), Z, noise_variance=0.2, y_bounds=BOUNDS)  # public inputs: still accepted


def test_inducing_inputs_by_streamed_kmeans_are_refused_before_reserving():
    """``streaming.minibatch_kmeans_inducing_inputs`` marks its centres computed from the inputs: the model and
    the streamed release refuse them (as k-means), with nothing reserved; other values are accepted."""
    X, Y = _data()
    Z = minibatch_kmeans_inducing_inputs(X, 5, chunk_size=40)
    assert Z.shape == (5, 1)  # centres of the inputs: inside their range, not a design over the box
    assert np.all((Z >= X.min()) & (Z <= X.max()))
    _refused(lambda acc: DPSGPR((X, Y), _kernel(), gpflow.inducing_variables.InducingPoints(Z), noise_variance=0.2,
                                y_bounds=BOUNDS, x_bounds=BOX, private_inputs=True,
                                hyperparameters_public=True).release_function(epsilon=1.0, delta=1e-3, accountant=acc),
             ValueError, "computed from the inputs \\(k-means\\)")
    _refused(lambda acc: wr.release_rows(LocalChunks(X, Y, 40), _kernel(), Z, x_bounds=BOX, y_bounds=BOUNDS,
                                         epsilon=1.0, delta=1e-3, accountant=acc, kernel_variance=3.0,
                                         noise_variance=0.2), ValueError, "computed from the inputs \\(k-means\\)")
    DPSGPR((X, Y), _kernel(), Z + 0.25, noise_variance=0.2, y_bounds=BOUNDS, x_bounds=BOX,
           private_inputs=True)  # other values: not marked, accepted
    DPSGPR((X, Y), _kernel(), Z, noise_variance=0.2, y_bounds=BOUNDS)  # public inputs: still accepted


def test_a_kernel_without_a_bound_is_refused():
    X, Y = _data()
    with pytest.raises(NotImplementedError, match="ArcCosine"):
        DPSGPR((X, Y), gpflow.kernels.ArcCosine(), wr.inducing_grid(BOX, 3), noise_variance=0.2, y_bounds=BOUNDS,
               x_bounds=BOX, private_inputs=True)


def test_inputs_outside_the_box_are_refused_where_clipping_is_off():
    X, Y = _data(30)
    X[0] = 11.0
    with pytest.raises(ValueError, match="clipping is off"):
        _model(X, Y, clip_inputs=False)


def test_a_box_without_private_inputs_is_refused():
    with pytest.raises(ValueError, match="private_inputs=True"):
        _model(private_inputs=False)


@pytest.mark.parametrize("options, error, match", [
    ({"epsilon": -1.0}, ValueError, "epsilon"),
    ({"objective": "mse"}, TypeError, "do not apply"),
    ({"shares": (1.0, 0.0, 1.0)}, ValueError, "shares"),
    ({"variances": "maybe"}, ValueError, "variances"),
])
def test_bad_release_options_are_refused_before_anything_is_reserved(options, error, match):
    model = _model()
    _refused(lambda acc: model.release_function(**{"epsilon": 1.0, "delta": 1e-3, **options, "accountant": acc}),
             error, match)


def test_the_leak_guard_refuses_before_anything_is_reserved():
    model = _model()
    model.elbo()  # the training objective read the private rows
    _refused(lambda acc: model.release_function(epsilon=1.0, delta=1e-3, accountant=acc), dp.PrivacyLeakError, None)


@pytest.mark.parametrize("path", ["release", "streaming", "selection"])
def test_releases_that_treat_the_inputs_as_public_refuse(path):
    model = _model()
    Xnew = np.linspace(0, 10, 5)[:, None]
    calls = {
        "release": lambda acc: model.release(Xnew, epsilon=1.0, delta=1e-3, accountant=acc),
        "streaming": lambda acc: dp.streaming.release_function(model, epsilon=1.0, delta=1e-3, accountant=acc),
        "selection": lambda acc: dp.selection.select_hyperparameters(
            model, [{".kernel.lengthscales": 1.0}, {".kernel.lengthscales": 3.0}], epsilon=0.5, accountant=acc),
    }
    _refused(calls[path], dp.PrivacyLeakError, "private_inputs=True")


def test_dask_rows_release_equals_the_in_memory_release():
    da = pytest.importorskip("dask.array")
    X, Y = _data(200)
    local = _seeded(_model(X, Y).release_function, epsilon=1.0, delta=1e-3, seed=9)
    model = _model(da.from_array(X, chunks=(50, 1)), da.from_array(Y, chunks=(50, 1)))
    on_dask = _seeded(model.release_function, epsilon=1.0, delta=1e-3, seed=9)
    for key in ("S", "b", "q"):
        np.testing.assert_allclose(on_dask.statistics[key], local.statistics[key], rtol=1e-9, atol=1e-9)
