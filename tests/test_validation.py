"""Bad inputs raise the documented error (naming the value) and draw no noise; the leak guard fires."""

from __future__ import annotations

import warnings

import gpflow
import numpy as np
import pytest

from dpgp_gpflow import ClippingWarning, PrivacyAccountant, PrivacyLeakError
from dpgp_gpflow.models import DPGPR

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")

LO, HI = -1.0, 1.0
N = 8


def data(seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 3.0, (N, 1))
    Y = np.clip(np.sin(X) + 0.1 * rng.standard_normal((N, 1)), LO, HI)
    return X, Y


def kernel():
    return gpflow.kernels.SquaredExponential(lengthscales=1.0)


def build(X=None, Y=None, **kwargs):
    X0, Y0 = data()
    kwargs.setdefault("y_bounds", (LO, HI))
    kwargs.setdefault("noise_variance", 0.1)
    kwargs.setdefault("hyperparameters_public", True)  # chosen a priori (the leak guard refuses undeclared values)
    return DPGPR((X0 if X is None else X, Y0 if Y is None else Y), kernel(), **kwargs)


XNEW = np.linspace(0.0, 3.0, 4)[:, None]


@pytest.fixture(scope="module")
def model():
    return build()


# ---------------------------------------------------------------------------------------------
# Privacy parameters and options at release time


@pytest.mark.parametrize("mechanism", ["cloaking", "standard"])
@pytest.mark.parametrize("epsilon, error", [
    (0.0, ValueError), (-1.0, ValueError), (float("nan"), ValueError), (float("inf"), ValueError),
    (True, TypeError), ("1", TypeError), (None, TypeError),
])
def test_bad_epsilon(model, draws, epsilon, error, mechanism):
    acc = PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(error, match="epsilon"):
        model.release(XNEW, epsilon=epsilon, delta=0.01, mechanism=mechanism, accountant=acc)
    assert draws == [] and acc.ledger == ()


@pytest.mark.parametrize("mechanism", ["cloaking", "standard"])
@pytest.mark.parametrize("delta, error", [
    (0.0, ValueError), (-0.01, ValueError), (1.0, ValueError), (2.0, ValueError), (float("nan"), ValueError),
    (False, TypeError), ("0.01", TypeError),
])
def test_bad_delta(model, draws, delta, error, mechanism):
    with pytest.raises(error, match="delta"):
        model.release(XNEW, epsilon=1.0, delta=delta, mechanism=mechanism)
    assert draws == []


@pytest.mark.parametrize("kwargs, match", [
    (dict(objective="volume"), "objective"),
    (dict(calibration="laplace"), "calibration"),
    (dict(calibration="classical", epsilon=2.0), "epsilon <= 1"),
    (dict(mechanism="exponential"), "mechanism"),
])
def test_unknown_options(model, draws, kwargs, match):
    kw = dict(epsilon=1.0, delta=0.01)
    kw.update(kwargs)
    acc = PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(ValueError, match=match):
        model.release(XNEW, accountant=acc, **kw)
    assert draws == [] and acc.ledger == ()


# ---------------------------------------------------------------------------------------------
# Test inputs


@pytest.mark.parametrize("Xnew, error, match", [
    (np.array([[0.5], [np.nan]]), ValueError, "non-finite"),
    (np.array([[0.5], [np.inf]]), ValueError, "non-finite"),
    (np.zeros((0, 1)), ValueError, "empty"),
    (np.zeros((3, 2)), ValueError, "columns"),
    (np.zeros(3), ValueError, "shape"),
    (np.array([["a"], ["b"]]), TypeError, "real numbers"),
    (np.array([[True], [False]]), TypeError, "real numbers"),
])
def test_bad_test_inputs(model, draws, Xnew, error, match):
    with pytest.raises(error, match=match):
        model.release(Xnew, epsilon=1.0, delta=0.01)
    assert draws == []


def test_float32_and_integer_test_inputs_are_converted(model, draws):
    a = model.release(XNEW.astype(np.float32), epsilon=1.0, delta=0.01, seed=0)
    b = model.release(XNEW.astype(np.float32).astype(np.float64), epsilon=1.0, delta=0.01, seed=0)
    np.testing.assert_array_equal(a.mean, b.mean)
    c = model.release(np.array([[0], [1], [3]]), epsilon=1.0, delta=0.01, seed=0)
    assert c.mean.dtype == np.float64 and c.mean.shape == (3, 1)


# ---------------------------------------------------------------------------------------------
# Training data, bounds and d at construction


@pytest.mark.parametrize("y_bounds, error", [
    ((1.0, 1.0), ValueError), ((2.0, 1.0), ValueError), ((0.0, np.inf), ValueError), ((np.nan, 1.0), ValueError),
    ((0.0,), TypeError), (None, TypeError), (("a", "b"), TypeError), ((0.0, 1.0, 2.0), TypeError),
])
def test_bad_bounds(y_bounds, error):
    with pytest.raises(error, match="y_bounds"):
        build(y_bounds=y_bounds)


@pytest.mark.parametrize("d, error", [
    (0.0, ValueError), (-1.0, ValueError), (float("nan"), ValueError), (float("inf"), ValueError),
    (2.5, ValueError),  # wider than the bounds
    ("1", TypeError), (True, TypeError),
])
def test_bad_data_sensitivity(d, error):
    with pytest.raises(error, match="data_sensitivity"):
        build(data_sensitivity=d)


def test_smaller_public_d_scales_the_noise(draws):
    full = build().release(XNEW, epsilon=1.0, delta=0.01, seed=0, rtol=1e-6)
    half = build(data_sensitivity=1.0).release(XNEW, epsilon=1.0, delta=0.01, seed=0, rtol=1e-6)
    assert full.data_sensitivity == 2.0 and half.data_sensitivity == 1.0
    np.testing.assert_allclose(half.noise_std, 0.5 * full.noise_std, rtol=1e-9)
    np.testing.assert_allclose(half.sensitivity, 0.5 * full.sensitivity, rtol=1e-9)


def bad(X=None, Y=None):
    X0, Y0 = data()
    return (X0 if X is None else X, Y0 if Y is None else Y)


@pytest.mark.parametrize("X, Y, error, match", [
    (*bad(X=np.where(np.arange(N)[:, None] == 2, np.nan, data()[0])), ValueError, "non-finite"),
    (*bad(X=np.where(np.arange(N)[:, None] == 2, np.inf, data()[0])), ValueError, "non-finite"),
    (*bad(Y=np.where(np.arange(N)[:, None] == 2, np.nan, data()[1])), ValueError, "non-finite"),
    (*bad(Y=np.where(np.arange(N)[:, None] == 2, -np.inf, data()[1])), ValueError, "non-finite"),
    (*bad(Y=data()[1][:, 0]), ValueError, r"\[N, 1\]"),
    (*bad(Y=np.stack([data()[1], data()[1]], axis=1)), ValueError, r"\[N, 1\]"),  # [N, P] is DPGPR's several outputs
    (*bad(Y=data()[1][:-1]), ValueError, "rows"),
    (*bad(X=data()[0][:, 0]), ValueError, "shape"),
    (*bad(X=np.zeros((0, 1)), Y=np.zeros((0, 1))), ValueError, "empty"),
    (*bad(X=data()[0].astype(str)), TypeError, "real numbers"),
    (*bad(Y=np.array([["a"]] * N)), TypeError, "real numbers"),
    (*bad(Y=data()[1] > 0), TypeError, "real numbers"),
    (*bad(Y=np.array([[None]] * N)), TypeError, "real numbers"),
])
def test_bad_training_data(X, Y, error, match):
    with pytest.raises(error, match=match):
        DPGPR((X, Y), kernel(), y_bounds=(LO, HI), noise_variance=0.1)


def test_data_must_be_a_pair():
    with pytest.raises(TypeError, match="pair"):
        DPGPR(data()[0], kernel(), y_bounds=(LO, HI))


def test_float32_data_is_converted_to_float64():
    X, Y = data()
    m32 = DPGPR((X.astype(np.float32), Y.astype(np.float32)), kernel(), y_bounds=(LO, HI), noise_variance=0.1,
                hyperparameters_public=True)
    X64, Y64 = X.astype(np.float32).astype(np.float64), Y.astype(np.float32).astype(np.float64)
    m64 = DPGPR((X64, Y64), kernel(), y_bounds=(LO, HI), noise_variance=0.1, hyperparameters_public=True)
    assert all(t.dtype == np.float64 for t in m32.data)
    np.testing.assert_array_equal(m32.data[0].numpy(), X64)
    np.testing.assert_array_equal(m32.data[1].numpy(), Y64)
    a = m32.release(XNEW, epsilon=1.0, delta=0.01, seed=1)
    b = m64.release(XNEW, epsilon=1.0, delta=0.01, seed=1)
    np.testing.assert_array_equal(a.mean, b.mean)
    assert a.mean.dtype == np.float64


def test_integer_data_is_converted():
    X = np.arange(N)[:, None]
    Y = (np.arange(N)[:, None] % 3) - 1
    m = DPGPR((X, Y), kernel(), y_bounds=(-1, 1), noise_variance=0.1)
    assert all(t.dtype == np.float64 for t in m.data)
    assert m.y_bounds == (-1.0, 1.0) and m.data_sensitivity == 2.0


# ---------------------------------------------------------------------------------------------
# Clipping


def test_clipping_warns_with_the_count_and_clips():
    X, Y = data()
    Y = Y.copy()
    Y[1, 0], Y[4, 0], Y[6, 0] = 5.0, -3.0, 1.0 + 1e-9
    with pytest.warns(ClippingWarning, match=f"3 of {N}") as record:
        m = DPGPR((X, Y), kernel(), y_bounds=(LO, HI), noise_variance=0.1)
    assert len([w for w in record if issubclass(w.category, ClippingWarning)]) == 1
    msg = str(record[0].message)
    assert "5.0" not in msg and "-3.0" not in msg  # the count, never the values
    Yc = m.data[1].numpy()
    expected = Y.copy()
    expected[1, 0], expected[4, 0], expected[6, 0] = HI, LO, HI
    np.testing.assert_array_equal(Yc, expected)


def test_no_warning_inside_the_bounds():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClippingWarning)
        X, Y = data()
        Y = Y.copy()
        Y[0, 0], Y[1, 0] = LO, HI  # on the bounds is inside
        DPGPR((X, Y), kernel(), y_bounds=(LO, HI), noise_variance=0.1)


# ---------------------------------------------------------------------------------------------
# The privacy-leak guard


@pytest.mark.parametrize("mechanism", ["cloaking", "standard"])
def test_leak_guard_after_scipy_training(draws, mechanism):
    m = build()
    gpflow.optimizers.Scipy().minimize(m.training_loss, m.trainable_variables, options=dict(maxiter=3))
    assert m.private_objective_evaluated
    with pytest.raises(PrivacyLeakError, match="hyperparameters_public"):
        m.release(XNEW, epsilon=1.0, delta=0.01, mechanism=mechanism)
    assert draws == []
    rel = m.release(XNEW, epsilon=1.0, delta=0.01, mechanism=mechanism, hyperparameters_public=True, seed=0)
    assert rel.mean.shape == (4, 1) and len(draws) == 1


def test_leak_guard_after_an_eager_marginal_likelihood(draws):
    m = build()
    assert not m.private_objective_evaluated
    m.release(XNEW, epsilon=1.0, delta=0.01, seed=0)  # a fresh model may release
    m.log_marginal_likelihood()
    acc = PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(PrivacyLeakError):
        m.release(XNEW, epsilon=1.0, delta=0.01, accountant=acc)
    assert len(draws) == 1 and acc.ledger == ()


def test_leak_guard_after_the_training_loss(draws):
    m = build()
    m.training_loss()
    with pytest.raises(PrivacyLeakError):
        m.release(XNEW, epsilon=1.0, delta=0.01)
    assert draws == []


def test_prediction_does_not_trip_the_guard():
    m = build()
    m.predict_f(XNEW)
    m.predict_y(XNEW)
    m.cloaking_matrix(XNEW)
    assert not m.private_objective_evaluated
    m.release(XNEW, epsilon=1.0, delta=0.01, seed=0)


# ---------------------------------------------------------------------------------------------
# Found by the fuzz suite (tests/fuzz): refused with the documented error before any budget is
# reserved (the accountant's history stays empty: nothing was even held) and before any draw.


@pytest.mark.parametrize("cls", ["DPGPR", "DPGPRFITC", "DPSGPR"])
@pytest.mark.parametrize("value, error", [
    (1e-6, ValueError), (5e-7, ValueError), (0.0, ValueError), (-1.0, ValueError), (float("nan"), ValueError),
    (float("inf"), ValueError), (True, TypeError), ("0.1", TypeError),
])
def test_noise_variance_outside_gpflow_bound_is_refused(draws, cls, value, error):
    """FUZZ-BUG-1: tensorflow's InvalidArgumentError from gpflow.Parameter before the fix."""
    from dpgp_gpflow.models import DPGPRFITC, DPSGPR

    X, Y = data()
    build_it = {
        "DPGPR": lambda: DPGPR((X, Y), kernel(), y_bounds=(LO, HI), noise_variance=value),
        "DPGPRFITC": lambda: DPGPRFITC((X, Y), kernel(), X[:3], noise_variance=value, y_bounds=(LO, HI)),
        "DPSGPR": lambda: DPSGPR((X, Y), kernel(), X[:3], noise_variance=value, y_bounds=(LO, HI)),
    }[cls]
    with pytest.raises(error, match="noise_variance"):
        build_it()
    assert draws == []


def test_noise_variance_just_above_gpflow_bound_is_kept():
    model = build(noise_variance=1.5e-6)
    assert model.likelihood.variance.numpy() == pytest.approx(1.5e-6, rel=1e-9)
    assert build(noise_variance=None).likelihood.variance.numpy() == pytest.approx(1.0)  # GPflow's default


@pytest.mark.parametrize("seed, error", [
    (-1, ValueError), (np.int64(-3), ValueError), (2**128, ValueError), (1.5, TypeError), (3.0, TypeError),
    (True, TypeError), (np.bool_(False), TypeError), ("7", TypeError),
])
def test_validate_seed(seed, error):
    from dpgp_gpflow.validation import validate_seed

    with pytest.raises(error, match="seed"):
        validate_seed(seed)


def test_validate_seed_accepts_none_and_integers():
    from dpgp_gpflow.validation import validate_seed

    assert validate_seed(None) is None
    assert [validate_seed(s) for s in (0, np.int64(3), 2**128 - 1)] == [0, 3, 2**128 - 1]
    assert type(validate_seed(np.uint32(5))) is int


@pytest.mark.parametrize("seed, error", [(-1, ValueError), (1.5, TypeError), (True, TypeError), (2**130, ValueError)])
@pytest.mark.parametrize("entry", ["cloaking", "standard", "release_function", "classifier", "selection", "bins",
                                   "cloaking_release"])
def test_invalid_seed_is_refused_before_reserving(draws, seed, error, entry):
    """FUZZ-BUG-7: an invalid seed was refused only inside the sampler, after the private computation."""
    from dpgp_gpflow.baselines import make_bins, release_bin_means
    from dpgp_gpflow.models import DPLaplaceGPC, DPSGPR
    from dpgp_gpflow.mechanisms import cloaking_release
    from dpgp_gpflow.selection import select_hyperparameters

    X, Y = data()
    acc = PrivacyAccountant(epsilon=100.0, delta=0.5)
    common = dict(epsilon=1.0, delta=1e-2, seed=seed, accountant=acc)
    calls = {
        "cloaking": lambda: build().release(XNEW, **common),
        "standard": lambda: build().release(XNEW, mechanism="standard", **common),
        "release_function": lambda: DPSGPR((X, Y), kernel(), X[:3], noise_variance=0.1,
                                           y_bounds=(LO, HI)).release_function(**common),
        "classifier": lambda: DPLaplaceGPC((X, np.where(Y > 0, 1.0, -1.0)), kernel()).release(**common),
        "selection": lambda: select_hyperparameters(build(), [{".kernel.lengthscales": 1.0}], epsilon=1.0, folds=2,
                                                    seed=seed, accountant=acc),
        "bins": lambda: release_bin_means(X, Y, make_bins(counts=2, bounds=(0.0, 3.0)), y_bounds=(LO, HI),
                                          epsilon=1.0, seed=seed, accountant=acc),
        "cloaking_release": lambda: cloaking_release(
            np.eye(N), np.zeros(N), np.zeros(N), np.zeros(N), data_sensitivity=1.0, output_bound=1.0, **common),
    }
    with pytest.raises(error, match="seed"):
        calls[entry]()
    assert draws == []
    assert acc.history() == [], "budget was reserved before the seed was checked"


def test_check_real_takes_a_zero_dimensional_array():
    # GPflow's tutorial passes parameter.numpy() (a 0-d array) where a number is expected
    from dpgp_gpflow.validation import check_real
    assert check_real("x", np.array(2.5)) == 2.5 and check_real("x", np.array(3)) == 3.0
    for bad in (np.array(True), np.array([1.0]), np.array("1"), np.bool_(True)):
        with pytest.raises(TypeError):
            check_real("x", bad)
    with pytest.raises(ValueError):
        check_real("x", np.array(np.nan))
