"""Red-team edges of issue 34 (item 5, the library's findings): numbers at the edge of float64, booleans read
as numbers, release files whose kernel, relation, variance, version or seed flag make no sense, the loader's
memory, the compiled engine's record, and a mean function of the wrong width. Each case failed before its
fix (a charged release of NaN, TensorFlow's or NumPy's errors, a 1 GiB allocation, a forged file loaded).

References are independent of the code under test: scale equivariance of the Gaussian mechanism (a release
of outputs scaled by c, with bounds scaled by c and the same seed, is c times the unscaled one), the
eager release path for the engine's sensitivity, NumPy for the mean functions' widths."""

from __future__ import annotations

import base64
import gc
import io
import math
import re
import tracemalloc

import gpflow
import numpy as np
import pytest
import tensorflow as tf

import dpgp_gpflow as dp
from dpgp_gpflow import engine, streaming
from dpgp_gpflow.calibration import gaussian_multiplier
from dpgp_gpflow.noise_planning import optimise_noise_covariance
from dpgp_gpflow.io import format as release_file, loading
from dpgp_gpflow.io.format import ReleaseFileError, ReleaseFileVersionError
from dpgp_gpflow.mechanisms import check_whitened_shift, cloaking_release
from dpgp_gpflow.neighbours import group_neighbours
from dpgp_gpflow.models import (
    DPGPR,
    DPGPRFITC,
    DPLaplaceGPC,
    DPSGPR,
    DPSparseLaplaceGPC,
    DPSparseMulticlassLaplaceGPC,
)
from dpgp_gpflow.selection.cross_validation import validate_grid
from dpgp_gpflow.validation import MAX_MAGNITUDE, MIN_DATA_SENSITIVITY
from forgery import forged

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")

N = 14
RNG = np.random.default_rng(34)
X = np.sort(RNG.uniform(0.0, 6.0, (N, 1)), axis=0)
Y01 = np.clip(0.5 + 0.4 * np.sin(X), 0.0, 1.0)  # inside the unit bounds
LABELS = np.where(np.sin(X) > 0, 1.0, -1.0)
Z = np.linspace(0.5, 5.5, 4)[:, None]
XNEW = np.linspace(0.0, 6.0, 5)[:, None]
EPS, DELTA = 1.0, 1e-3


def se(**kw):
    return gpflow.kernels.SquaredExponential(**{"lengthscales": 1.5, **kw})


def regression(name, Y, y_bounds, **kw):
    kw = dict(y_bounds=y_bounds, noise_variance=0.1, hyperparameters_public=True, **kw)
    if name == "DPGPR":
        return DPGPR((X, Y), se(), **kw)
    return {"DPSGPR": DPSGPR, "DPGPRFITC": DPGPRFITC}[name]((X, Y), se(), Z, **kw)


#: (model, how it releases): the Python API's regression releases, in memory and streamed
RELEASES = [("DPGPR", "release"), ("DPGPR", "standard"), ("DPSGPR", "release"), ("DPSGPR", "release_function"),
            ("DPGPRFITC", "release"), ("DPGPRFITC", "release_function"), ("DPGPRFITC", "streamed")]


def released(model, how, **kw):
    kw = dict(epsilon=EPS, delta=DELTA, **kw)
    if how == "release":
        return model.release(XNEW, **kw)
    if how == "standard":
        return model.release(XNEW, mechanism="standard", **kw)
    function = model.release_function(**kw) if how == "release_function" else streaming.release_function(model, **kw)
    return function.release


# ---------------------------------------------------------------------------------------------
# 1. Numbers whose release arithmetic overflows: refused by one rule (MAX_MAGNITUDE), nothing reserved


@pytest.mark.parametrize("name", ["DPGPR", "DPSGPR", "DPGPRFITC"])
@pytest.mark.parametrize("y_bounds, match", [
    ((0.0, 1e308), r"y_bounds must lie within \+-1e\+100"),  # was: mean -inf, noise std NaN, budget charged
    ((-1e101, 0.0), r"y_bounds must lie within \+-1e\+100"),
    ([(0.0, 1.0), (0.0, 1e200)], r"y_bounds\[1\]: y_bounds must lie within"),
    ((-1e-300, 1e-300), r"at least 1e-100: .*whitening .*overflow float64"),  # was: "a plan made for another..."
])
def test_bounds_whose_release_overflows_are_refused_at_construction(name, y_bounds, match):
    Y = np.hstack([Y01, Y01]) if np.ndim(y_bounds) == 2 else Y01
    with pytest.raises(ValueError, match=match):
        regression(name, Y, y_bounds)


@pytest.mark.parametrize("name", ["DPGPR", "DPSGPR", "DPGPRFITC"])
@pytest.mark.parametrize("kw, match", [
    (dict(X=np.r_[X[:-1], [[1e150]]]), r"X has values beyond \+-1e\+100"),
    (dict(data_sensitivity=1e-200), r"data_sensitivity 1e-200 is below 1e-100"),
    (dict(noise_variance=1e150), r"noise_variance has values beyond \+-1e\+100"),
])
def test_inputs_sensitivities_and_noise_beyond_the_range_are_refused(name, kw, match):
    kw = dict(kw)
    Xs = kw.pop("X", X)
    kw = {"y_bounds": (0.0, 1.0), "noise_variance": 0.1, **kw}
    with pytest.raises(ValueError, match=match):
        DPGPR((Xs, Y01), se(), **kw) if name == "DPGPR" else \
            {"DPSGPR": DPSGPR, "DPGPRFITC": DPGPRFITC}[name]((Xs, Y01), se(), Z, **kw)


@pytest.mark.parametrize("name, how", RELEASES)
@pytest.mark.parametrize("parameter, value, match", [
    ("lengthscales", 1e-150, r"\.kernel\.lengthscales has values below 1e-100"),
    ("variance", 1e150, r"\.kernel\.variance has values beyond \+-1e\+100"),
])
def test_hyperparameters_beyond_the_range_refuse_the_release_before_reserving(draws, name, how, parameter, value,
                                                                              match):
    model = regression(name, Y01, (0.0, 1.0))
    getattr(model.kernel, parameter).assign(value)
    model.declare_hyperparameters_public()
    acc = dp.PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(ValueError, match=match):
        released(model, how, accountant=acc)
    assert draws == [] and acc.history() == []


def test_selection_grids_beyond_the_range_are_refused():
    model = regression("DPGPR", Y01, (0.0, 1.0))
    with pytest.raises(ValueError, match=r"grid value for \.kernel\.lengthscales has values below 1e-100"):
        validate_grid(model, [{".kernel.lengthscales": 1.0}, {".kernel.lengthscales": 1e-150}])
    with pytest.raises(ValueError, match=r"grid value for \.likelihood\.variance has values beyond \+-1e\+100"):
        validate_grid(model, [{".likelihood.variance": 1e200}])
    assert len(validate_grid(model, [{".kernel.lengthscales": 1e-100}, {".kernel.variance": 1e100}])) == 2


@pytest.mark.parametrize("name, how", [(name, how) for name, how in RELEASES if how in ("release", "standard")])
def test_test_inputs_beyond_the_range_refuse_the_release_before_reserving(draws, name, how):
    model = regression(name, Y01, (0.0, 1.0))
    acc = dp.PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(ValueError, match=r"Xnew has values beyond \+-1e\+100"):
        model.release(np.array([[1e150], [1.0]]), epsilon=EPS, delta=DELTA,
                      mechanism="standard" if how == "standard" else "cloaking", accountant=acc)
    assert draws == [] and acc.history() == []


@pytest.mark.parametrize("name, how", RELEASES)
def test_large_but_valid_bounds_release_finite_values_scale_for_scale(name, how):
    """Bounds (0, 1e100) release finite numbers, and exactly what the unit problem releases times 1e100
    (the Gaussian mechanism is scale-equivariant: C, the rank rule and the whitened query do not change)."""
    c = 1e100
    small = released(regression(name, Y01, (0.0, 1.0)), how, seed=7)
    large = released(regression(name, c * Y01, (0.0, c)), how, seed=7)
    for field in ("mean", "noise_std", "noise_factor"):
        values = getattr(large, field)
        assert np.all(np.isfinite(values)), field
        np.testing.assert_allclose(values, c * getattr(small, field), rtol=1e-7, atol=1e-9 * c, err_msg=field)
    assert large.sensitivity == pytest.approx(c * small.sensitivity, rel=1e-9)


def test_mechanisms_refuse_overflowing_bounds_before_reserving(draws):
    C = np.eye(3)
    acc = dp.PrivacyAccountant(epsilon=10.0, delta=0.5)
    for kw, match in [(dict(data_sensitivity=1e308, output_bound=5e307, y_bounds=(0.0, 1e308)), "y_bounds must lie"),
                      (dict(data_sensitivity=1.0, output_bound=1e200), r"output_bound has values beyond"),
                      (dict(data_sensitivity=2e-300, output_bound=1e-300), r"data_sensitivity 2e-300 is below 1e-100")]:
        with pytest.raises(ValueError, match=match):
            cloaking_release(C, np.zeros(3), np.zeros(3), np.zeros(3), epsilon=EPS, delta=DELTA, accountant=acc, **kw)
    assert draws == [] and acc.history() == []


# ---------------------------------------------------------------------------------------------
# 2. A noise multiplier out of float64's reach: one line naming it, before anything is reserved


@pytest.mark.parametrize("epsilon, delta, match", [
    (1e-300, 1e-300, r"noise multiplier s = 2\.\d+e\+299 .*outside \[1e-100, 1e\+100\].*over- or underflow"),
    (1e-13, 1e-13, r"noise multiplier s = .*beyond the largest the exact sampler's grid resolves"),
])
@pytest.mark.parametrize("name, how", [("DPGPR", "release"), ("DPGPR", "standard"), ("DPGPRFITC", "release_function"),
                                       ("DPGPRFITC", "streamed")])
def test_an_unreachable_noise_multiplier_is_named_before_reserving(draws, name, how, epsilon, delta, match):
    s = gaussian_multiplier(epsilon, delta, "analytic")
    assert s > 2.0**39  # the grid's limit in one dimension: K s 2^-40 <= 1/2 (sampling.MAX_GRID_LOSS)
    model = regression(name, Y01, (0.0, 1.0))
    acc = dp.PrivacyAccountant(epsilon=10.0, delta=0.5)
    kw = dict(epsilon=epsilon, delta=delta, accountant=acc)
    with pytest.raises(ValueError, match=match) as info:
        (model.release(XNEW, mechanism="standard", **kw) if how == "standard" else
         model.release(XNEW, **kw) if how == "release" else
         model.release_function(**kw) if how == "release_function" else streaming.release_function(model, **kw))
    assert "another data sensitivity" not in str(info.value) and "\n" not in str(info.value)
    assert draws == [] and acc.history() == []


def test_the_shift_check_names_the_real_cause():
    with pytest.raises(FloatingPointError, match=r"too large for the exact sampler's grid in 9 dimensions"):
        check_whitened_shift(1.0, 2.0**38, rank=9)  # sqrt(9) K s 2^-40 = 0.75 > 1/2
    with pytest.raises(FloatingPointError, match=r"not finite: the noise scale .* under- or overflows float64"):
        check_whitened_shift(math.nan, 2.0, rank=3)
    with pytest.raises(FloatingPointError, match=r"a plan made for another data sensitivity"):
        check_whitened_shift(1.0, 2.0, rank=3)  # finite, on the grid: a whitening for another release
    check_whitened_shift(0.49, 2.0, rank=3)  # within 1 / (s K)


def test_data_sensitivity_floor_is_the_reciprocal_of_the_magnitude_limit():
    assert MIN_DATA_SENSITIVITY * MAX_MAGNITUDE == 1.0 and MAX_MAGNITUDE == 1e100


# ---------------------------------------------------------------------------------------------
# 5. Booleans are never numbers


def test_a_boolean_data_sensitivity_is_refused_in_a_list_as_alone():
    Y2 = np.hstack([Y01, Y01])
    for d in ([True, 0.5], True, (0.5, np.bool_(True)), np.array([True, False])):
        with pytest.raises(TypeError, match="data_sensitivity"):
            DPGPR((X, Y2), se(), y_bounds=(0.0, 1.0), noise_variance=0.1, data_sensitivity=d)
    model = DPGPR((X, Y2), se(), y_bounds=(0.0, 1.0), noise_variance=0.1, data_sensitivity=[1, 0.5])
    assert model.output_sensitivities == (1.0, 0.5)  # integers are numbers


@pytest.mark.parametrize("build", [
    lambda: DPGPR(([[0.0], [True], [2.0]], [[0.1], [0.2], [0.3]]), se(), y_bounds=(0.0, 1.0)),
    lambda: DPGPR((X, [[True]] + Y01[1:].tolist()), se(), y_bounds=(0.0, 1.0)),
    lambda: DPGPR((X, np.hstack([Y01, Y01])), se(), y_bounds=[(0.0, 1.0), (True, 5.0)]),
    lambda: DPGPRFITC((X, Y01), se(), [[0.5], [False]], y_bounds=(0.0, 1.0)),
])
def test_booleans_in_data_groups_bounds_and_inducing_inputs_are_refused(build):
    with pytest.raises(TypeError, match="real numbers|boolean"):
        build()


@pytest.mark.parametrize("groups", [[True, False] * (N // 2), [0, 1] * (N // 2 - 1) + [True, 5]])
def test_boolean_person_ids_are_refused_as_groups_refuse_every_non_integer(groups):
    with pytest.raises(ValueError, match=r"groups must be an integer array .*got booleans"):  # was: [1, 5]
        DPGPR((X, Y01), se(), y_bounds=(0.0, 1.0), groups=groups)


def test_booleans_at_release_and_in_grids_are_refused_before_reserving(draws):
    model = regression("DPGPR", Y01, (0.0, 1.0))
    acc = dp.PrivacyAccountant(epsilon=10.0, delta=0.5)
    with pytest.raises(TypeError, match="Xnew"):
        model.release([[0.5], [True]], epsilon=EPS, delta=DELTA, accountant=acc)
    with pytest.raises(TypeError, match="y_bounds"):
        cloaking_release(np.eye(2), np.zeros(2), np.zeros(2), np.zeros(2), data_sensitivity=1.0, output_bound=0.5,
                         y_bounds=(False, 1.0), epsilon=EPS, delta=DELTA, accountant=acc)
    with pytest.raises(TypeError, match="grid value"):
        validate_grid(model, [{".kernel.lengthscales": [True]}])
    with pytest.raises(TypeError, match="max_iter must be an integer"):  # was: one optimiser step (True = 1)
        cloaking_release(np.eye(2), np.zeros(2), np.zeros(2), np.zeros(2), data_sensitivity=1.0, output_bound=0.5,
                         max_iter=True, epsilon=EPS, delta=DELTA, accountant=acc)
    with pytest.raises(TypeError, match="max_iter must be an integer"):
        engine.noise_plan(tf.constant(np.eye(2)), noise_multiplier=2.0, data_sensitivity=1.0, output_bound=0.5,
                          max_iter=True)
    with pytest.raises(TypeError, match="tol must be a real number"):
        optimise_noise_covariance(tf.constant(np.eye(2)), "mse", tol=True)
    assert draws == [] and acc.history() == []


# ---------------------------------------------------------------------------------------------
# 3, 6. Release files: what the file implies is checked; TensorFlow never raises


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("edges")
    Y2 = np.hstack([Y01, 1.0 - Y01])
    classes = np.clip(np.floor(X[:, 0] / 2.0), 0, 2).astype(int)
    objects = {
        "release-2": DPGPR((X, Y2), se(), y_bounds=(0.0, 1.0), noise_variance=0.1,
                           hyperparameters_public=True).release(XNEW, epsilon=EPS, delta=DELTA, seed=1),
        "function": regression("DPGPRFITC", Y01, (0.0, 1.0)).release_function(epsilon=EPS, delta=DELTA, seed=2),
        "laplace-2-steps": DPLaplaceGPC((X, LABELS), se(), hyperparameters_public=True).release(
            epsilon=EPS, delta=DELTA, steps=2, seed=3),
        "sparse-classifier": DPSparseLaplaceGPC((X, LABELS), se(), Z, hyperparameters_public=True).release(
            epsilon=EPS, delta=DELTA, seed=4),
        "multiclass": DPSparseMulticlassLaplaceGPC((X, classes), se(), Z, num_classes=3,
                                                   hyperparameters_public=True).release(epsilon=EPS, delta=DELTA, seed=5),
    }
    return {name: obj.save(folder / f"{name}.json") for name, obj in objects.items()}


def kernel_of(raw):
    content = raw["content"]
    state = content["readout"]["state"] if "readout" in content else None
    if state is None:  # a multi-class file: the first class's readout
        state = content["classes"][0]["readout"]["state"]
    return state["kernel"] if state["kernel"].get("class") != "Sum" else state["kernel"]["kernels"][0]


KERNEL_FORGERIES = [
    (lambda k: k.update(active_dims=[3]), r"active_dims \[3\] are beyond the file's 1 input column"),
    (lambda k: k["parameters"].update(lengthscales=1e-320), r"lengthscales has values below 1e-100"),
    (lambda k: k["parameters"].update(variance=1e300), r"variance has values beyond"),
    (lambda k: k["parameters"].update(lengthscales=[1.0, 2.0, 3.0]), r"3 lengthscales for 1 active input column"),
    (lambda k: k.update(active_dims={"start": 1, "stop": None, "step": None}), r"active_dims select none"),
    (lambda k: k.update(active_dims=[]), r"invalid active_dims \[\]"),
]


@pytest.mark.parametrize("name", ["function", "laplace-2-steps", "sparse-classifier", "multiclass"])
@pytest.mark.parametrize("edit, message", KERNEL_FORGERIES, ids=[str(i) for i in range(len(KERNEL_FORGERIES))])
def test_a_kernel_that_does_not_fit_the_file_is_a_release_file_error(files, tmp_path, name, edit, message):
    path = forged(files[name], tmp_path, lambda raw: edit(kernel_of(raw)))
    with pytest.raises(ReleaseFileError, match=message) as info:  # was: TensorFlow's InvalidArgumentError
        dp.load(path)
    assert "\n" not in str(info.value)


def entry(raw, i=0):
    return raw["card"]["releases"][i]


def every_release(field, value):
    def edit(raw):
        for e in raw["card"]["releases"]:
            e[field] = value
    return edit


CARD_FORGERIES = [
    ("release-2", every_release("neighbours", "banana"), r"\.neighbours: 'banana' is not a neighbouring relation"),
    ("release-2", every_release("neighbours", ""), r"\.neighbours: '' is not"),
    ("release-2", every_release("neighbours", "row (3 outputs)"), r"'row \(3 outputs\)' is not a neighbouring relation "
                                                                  r"of a release of 2 output"),
    ("release-2", every_release("neighbours", "row"), r"'row' is not a neighbouring relation of a release of 2"),
    ("function", every_release("neighbours", "person (groups, up to 0 rows)"), r"up to 0 rows\)' is not"),
    ("function", every_release("neighbours", "person (groups, up to 1 rows)"), r"up to 1 rows\)' is not"),
    ("function", every_release("neighbours", "row (2 outputs)"), r"'row \(2 outputs\)' is not"),
    ("sparse-classifier", every_release("neighbours", 7), r"7 is not a neighbouring relation"),
    ("function", lambda raw: put(raw, "releases/0/variance", -np.abs(array(raw, "releases/0/variance")) - 1.0),
     r"card\.releases\[0\]: variance has negative values"),
    ("release-2", lambda raw: put(raw, "releases/0/variance", array(raw, "releases/0/variance") - 10.0),
     r"variance has negative values"),
    ("laplace-2-steps", lambda raw: entry(raw, 1).update(reproducible=False),
     r"card\.releases\[1\]\.reproducible False is not that of card\.releases\[0\] \(True\)"),
    ("multiclass", lambda raw: entry(raw, 2).update(reproducible=False), r"card\.releases\[2\]\.reproducible False"),
]


def array(raw, name):
    arr = raw["arrays"][name]
    return np.frombuffer(base64.b64decode(arr["data"]), dtype="<f8").reshape(arr["shape"]).copy()


def put(raw, name, values):
    raw["arrays"][name] = release_file.encode_array(np.asarray(values, dtype=np.float64))


@pytest.mark.parametrize("name, edit, message", CARD_FORGERIES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CARD_FORGERIES)])
def test_a_card_the_file_contradicts_is_refused(files, tmp_path, name, edit, message):
    path = forged(files[name], tmp_path, edit)
    for read in (dp.load, loading.read_card):
        with pytest.raises(ReleaseFileError, match=message) as info:
            read(path)
        assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)


@pytest.mark.parametrize("version", [1.0, True, "1", [1]])
def test_format_version_must_be_the_integer_1(files, tmp_path, version):
    path = forged(files["function"], tmp_path, lambda raw: raw.update(format_version=version))
    with pytest.raises(ReleaseFileVersionError, match=rf"format version {re.escape(repr(version))} is not supported"):
        dp.load(path)


def test_honest_relations_of_every_kind_still_load(files):
    """The relations the models record ("row", "row (2 outputs)", the multi-class persons') are read back."""
    assert dp.load(files["release-2"]).neighbours == "row (2 outputs)"
    assert {r.neighbours for r in dp.load(files["laplace-2-steps"]).releases} == {"row"}
    assert {r.neighbours for r in dp.load(files["multiclass"]).releases} == {"row"}
    persons = DPGPR((X, Y01), se(), y_bounds=(0.0, 1.0), noise_variance=0.1, hyperparameters_public=True,
                    groups=np.arange(N) // 3).release(XNEW, epsilon=EPS, delta=DELTA, seed=1)
    assert persons.neighbours == "person (groups, up to 3 rows)"


def test_releases_never_publish_a_negative_posterior_variance(tmp_path):
    """A posterior variance rounded below zero (k** - k K^-1 k at a training input) is published as 0, so the
    loader's rule (variance >= 0) never refuses an honest file."""
    variance = np.array([-3e-17, 0.25, 0.0])
    rel = cloaking_release(np.eye(3), np.zeros(3), np.zeros(3), variance, data_sensitivity=1.0, output_bound=0.5,
                           epsilon=EPS, delta=DELTA, seed=1)
    np.testing.assert_array_equal(rel.variance, [[0.0], [0.25], [0.0]])
    assert dp.load(rel.save(tmp_path / "rounded.json")).variance.min() == 0.0


# ---------------------------------------------------------------------------------------------
# 4. Loading reads what the file holds


def test_loading_a_small_file_allocates_what_it_holds(files):
    path = files["function"]
    dp.load(path)  # TensorFlow and the loader warm, so that only the file's own cost is measured
    gc.collect()
    tracemalloc.start()
    try:
        release_file.read(path)
        dp.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = path.stat().st_size
    assert size < 100_000 and peak < 64 * 2**20, (size, peak)  # was 1 GiB: f.read(MAX_FILE_BYTES + 1)


def test_a_file_that_grows_while_it_is_read_is_read_whole_up_to_the_limit(monkeypatch):
    content = b"x" * 5000
    assert release_file._read_at_most(io.BytesIO(content), 10) == content  # opened at 10 bytes, grew to 5,000
    monkeypatch.setattr(release_file, "MAX_FILE_BYTES", 3000)
    assert len(release_file._read_at_most(io.BytesIO(content), 10)) == 3001  # one byte beyond: refused by read()


# ---------------------------------------------------------------------------------------------
# 7. The compiled engine recomputes what it records and records the relation as a model does


def problem():
    rng = np.random.default_rng(0)
    Xs = rng.uniform(0, 10, (30, 1))
    K = np.exp(-0.5 * (Xs - Xs.T) ** 2 / 1.5**2)
    Ks = np.exp(-0.5 * (XNEW * 10 / 6 - Xs.T) ** 2 / 1.5**2)
    C = np.linalg.solve(K + 0.5 * np.eye(30), Ks.T).T  # [5, 30]
    return C, np.clip(np.sin(Xs[:, 0]), -1.0, 1.0)


@pytest.mark.parametrize("groups", [None, np.arange(30) // 2])
def test_engine_publish_records_the_recomputed_sensitivity_and_the_relation(tmp_path, groups):
    C, y = problem()
    s = gaussian_multiplier(EPS, DELTA, "analytic")
    plan = engine.noise_plan(tf.constant(C), noise_multiplier=s, data_sensitivity=2.0, output_bound=1.0, groups=groups)
    forged_plan = plan._replace(sensitivity=tf.constant(1e-6, tf.float64))  # a plan's claim: never copied
    kw = dict(epsilon=EPS, delta=DELTA, data_sensitivity=2.0, output_bound=1.0, groups=groups, seed=3)
    rel = engine.publish(forged_plan, y, np.zeros(5), np.zeros(5), **kw)
    neighbours = None if groups is None else group_neighbours(groups, 30)
    eager = cloaking_release(tf.constant(C), tf.constant(y), np.zeros(5), np.zeros(5), data_sensitivity=2.0,
                             output_bound=1.0, epsilon=EPS, delta=DELTA, seed=3, neighbours=neighbours)
    assert rel.sensitivity == pytest.approx(eager.sensitivity, rel=1e-9) and rel.sensitivity >= 2.0
    model_relation = DPGPR((X, Y01), se(), y_bounds=(0.0, 1.0), noise_variance=0.1, hyperparameters_public=True,
                           groups=None if groups is None else np.arange(N) // 2).release(
        XNEW, epsilon=EPS, delta=DELTA, seed=1).neighbours
    assert rel.neighbours == model_relation == ("row" if groups is None else "person (groups, up to 2 rows)")
    assert dp.load(rel.save(tmp_path / "engine.json")).sensitivity == rel.sensitivity  # the loader agrees


# ---------------------------------------------------------------------------------------------
# 8. A mean function of the wrong width is refused where the model is built


@pytest.mark.parametrize("name", ["DPGPR", "DPSGPR", "DPGPRFITC"])
@pytest.mark.parametrize("P, c, ok", [(2, [0.1, 0.2, 0.3], False), (1, [0.1, 0.2], False), (2, [0.1, 0.2], True),
                                      (2, [0.5], True), (1, [0.5], True)])
def test_a_mean_function_must_give_one_column_or_one_per_output(name, P, c, ok):
    Y = np.hstack([Y01] * P)
    mean = gpflow.functions.Constant(np.array(c))
    columns = np.broadcast_to(np.array(c), (1, len(c))).shape[1]  # what a Constant of len(c) values gives per input
    build = lambda: regression(name, Y, (0.0, 1.0), mean_function=mean)  # noqa: E731
    if not ok:
        with pytest.raises(ValueError, match=rf"^the mean function gives {columns} column\(s\) per input; a model of "
                                             rf"{P} output\(s\) per row takes 1"):
            build()
        return
    model = build()
    rel = model.release(XNEW, epsilon=EPS, delta=DELTA, seed=1)
    assert np.shape(rel.mean) == (len(XNEW), P) and np.all(np.isfinite(rel.mean))
