"""Issue 34 item 3: every array a release hands back is NumPy [k, P] ([k, 1] for one output), as GPflow's
predictions, on every kind of released object; the release file keeps storing one output's values as [k]
(its format is unchanged), and a file written before this change (one output's arrays [k]) loads as [k, 1].

References are NumPy written here: the row norms of the public noise factor, the RMSE written elementwise,
the arrays of the file as the old writer stored them (``np.asarray(release.mean)`` of a [k] mean).
"""

from __future__ import annotations

import json

import gpflow
import numpy as np
import pytest
import tensorflow as tf

import dpgp_gpflow as dp
from dpgp_gpflow import engine
from dpgp_gpflow.calibration import gaussian_multiplier
from dpgp_gpflow.io.format import provenance, write
from dpgp_gpflow.io.writing import file_content
from dpgp_gpflow.mechanisms import cloaking_release
from dpgp_gpflow.models import DPGPR, DPGPRFITC, DPLaplaceGPC, DPMulticlassLaplaceGPC

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")

K = 7


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    X = rng.uniform(0.0, 6.0, (30, 1))
    Y = np.clip(np.sin(X) + 0.2 * rng.standard_normal((30, 1)), -2.0, 2.0)
    return X, Y, np.linspace(0.0, 6.0, K)[:, None]


def se():
    return gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=1.2)


def gpr(X, Y):
    return DPGPR((X, Y), se(), y_bounds=(-2.0, 2.0), noise_variance=0.1, hyperparameters_public=True)


def assert_k_by_p(release, k, P=1):
    """``mean``, ``variance``, ``noise_std`` and ``total_variance`` NumPy [k, P]; ``noise_std`` the row norms
    (NumPy) of the public noise factor, read back stacked output by output."""
    for name in ("mean", "variance", "noise_std", "total_variance"):
        value = getattr(release, name)
        assert isinstance(value, np.ndarray) and value.shape == (k, P), (name, np.shape(value))
    assert release.num_outputs == P
    norms = np.sqrt(np.sum(np.asarray(release.noise_factor) ** 2, axis=1))  # [kP], output by output
    np.testing.assert_allclose(release.noise_std, norms.reshape(P, k).T, rtol=1e-12)


def releases_of_every_kind(X, Y, Xs):
    """(name, PrivateRelease, k, P) for every way a release is made."""
    labels = np.where(Y > 0.0, 1.0, -1.0)
    classes = np.clip(np.floor(X[:, 0] / 2.0), 0, 2).astype(int)
    C = np.random.default_rng(0).standard_normal((6, 30)) / 10
    y = np.random.default_rng(1).uniform(-1.0, 1.0, 30)
    s = gaussian_multiplier(1.0, 1e-3, "analytic")
    plan = engine.noise_plan(tf.constant(C), noise_multiplier=s, data_sensitivity=2.0, output_bound=1.0)
    common = dict(epsilon=1.0, delta=1e-3, seed=2)
    yield "cloaking", gpr(X, Y).release(Xs, **common), K, 1
    yield "standard", gpr(X, Y).release(Xs, mechanism="standard", **common), K, 1
    yield "two outputs", gpr(X, np.hstack([Y, np.cos(X)])).release(Xs, **common), K, 2
    yield "cloaking_release", cloaking_release(tf.constant(C), tf.constant(y), np.zeros(6), np.zeros(6),
                                               data_sensitivity=2.0, output_bound=1.0, **common), 6, 1
    yield "engine.publish", engine.publish(plan, y, np.zeros(6), np.zeros(6), data_sensitivity=2.0,
                                           output_bound=1.0, **common), 6, 1
    function = DPGPRFITC((X, Y), se(), X[:5], noise_variance=0.1, y_bounds=(-2.0, 2.0),
                         hyperparameters_public=True).release_function(**common)
    yield "function's latents", function.release, 5, 1
    classifier = DPLaplaceGPC((X, labels), se(), hyperparameters_public=True).release(steps=2, **common)
    for t, step in enumerate(classifier.releases):
        yield f"classifier step {t}", step, len(X), 1
    several = DPMulticlassLaplaceGPC((X, classes), se(), num_classes=3, hyperparameters_public=True).release(**common)
    for c, part in enumerate(several.releases):
        yield f"multiclass release {c}", part, len(X), 1


def test_every_kind_of_release_holds_k_by_p_arrays(data):
    X, Y, Xs = data
    kinds = []
    for name, release, k, P in releases_of_every_kind(X, Y, Xs):
        kinds.append(name)
        assert_k_by_p(release, k, P)
        assert_k_by_p(release.unclipped(), k, P)
    assert len(kinds) >= 10


def test_a_releases_rmse_against_outputs_k_by_1_is_elementwise(data):
    """The broadcast trap of a [k] mean: ``mean - Y`` is [k, 1] and the RMSE the one written elementwise."""
    X, Y, _ = data
    release = gpr(X, Y).release(X, epsilon=1.0, delta=1e-3, seed=4)
    difference = release.mean - Y
    assert difference.shape == Y.shape
    expected = np.sqrt(sum((release.mean[i, 0] - Y[i, 0]) ** 2 for i in range(len(X))) / len(X))
    assert float(np.sqrt(np.mean(difference**2))) == pytest.approx(expected, rel=1e-12)


def test_a_functions_predict_is_k_by_p_and_matches_predict_f(data):
    X, Y, Xs = data
    for outputs in (Y, np.hstack([Y, np.cos(X)])):
        P = outputs.shape[1]
        function = DPGPRFITC((X, outputs), se(), X[:5], noise_variance=0.1, y_bounds=(-2.0, 2.0),
                             hyperparameters_public=True).release_function(epsilon=1.0, delta=1e-3, seed=3)
        pred = function.predict(Xs)
        for value in pred:
            assert isinstance(value, np.ndarray) and value.shape == (K, P)
        mean, var = function.predict_f(Xs)
        np.testing.assert_array_equal(pred.mean, mean)
        np.testing.assert_allclose(pred.variance + pred.noise_std**2, var, rtol=1e-12)
        np.testing.assert_allclose(pred.noise_std**2, function.dp_noise_variance(Xs), rtol=1e-12)


def file_arrays(path):
    """``{name: shape}`` of the arrays a release file stores (its JSON, read here)."""
    return {name: a["shape"] for name, a in json.loads(path.read_text())["arrays"].items()}


def test_the_file_stores_one_outputs_values_as_k_and_two_as_k_by_2(data, tmp_path):
    """The file format is unchanged: one output's values stored [k] (files of older versions read the same),
    several outputs' [k, P]; loaded, both are [k, P] and equal to what was saved."""
    X, Y, Xs = data
    for outputs, stored in ((Y, [K]), (np.hstack([Y, np.cos(X)]), [K, 2])):
        release = gpr(X, outputs).release(Xs, epsilon=1.0, delta=1e-3, seed=5)
        path = release.save(tmp_path / f"p{outputs.shape[1]}.json")
        shapes = file_arrays(path)
        for name in ("mean", "variance", "noise_std"):
            assert shapes[f"releases/0/{name}"] == stored
        loaded = dp.load(path)
        assert_k_by_p(loaded, K, outputs.shape[1])
        for name in ("mean", "variance", "noise_std", "noise_factor"):
            np.testing.assert_array_equal(getattr(loaded, name), getattr(release, name))


def write_as_before(path, released, kind, *, readout=False):
    """A release file as the writer before [k, 1] wrote it: the card, and each release's arrays as the
    release held them, ``np.asarray(r.mean)`` of a [k] mean (here: column 0 of the [k, 1] one)."""
    card = {**released.privacy_card(), **provenance(), "inputs_hash": None}
    arrays = {}
    for i, r in enumerate(released.releases):
        for name in ("mean", "variance", "noise_std"):
            arrays[f"releases/{i}/{name}"] = np.asarray(getattr(r, name))[:, 0].copy()
        arrays[f"releases/{i}/noise_factor"] = np.asarray(r.noise_factor)
    content = {}
    if readout:  # the readout's part, as the function writes it (unchanged)
        content, theirs = file_content(released)
        arrays.update({n: a for n, a in theirs.items() if not n.startswith("releases/")})
    return write(path, kind, card, content, arrays)


def test_a_file_written_before_loads_as_k_by_1(data, tmp_path):
    X, Y, Xs = data
    release = gpr(X, Y).release(Xs, epsilon=1.0, delta=1e-3, seed=6).unclipped()
    path = write_as_before(tmp_path / "old_release.json", release, "PrivateRelease")
    assert file_arrays(path)["releases/0/mean"] == [K]
    loaded = dp.load(path)
    assert_k_by_p(loaded, K)
    np.testing.assert_array_equal(loaded.mean[:, 0], np.asarray(json_array(path, "releases/0/mean")))
    labels = np.where(Y > 0.0, 1.0, -1.0)
    classifier = DPLaplaceGPC((X, labels), se(), hyperparameters_public=True).release(epsilon=1.0, delta=1e-3,
                                                                                       steps=2, seed=6)
    path = write_as_before(tmp_path / "old_classifier.json", classifier, type(classifier).__name__, readout=True)
    assert file_arrays(path)["releases/1/mean"] == [len(X)]
    loaded = dp.load(path)
    for step in loaded.releases:
        assert_k_by_p(step, len(X))
    assert loaded.latent.shape == (len(X), 1)
    np.testing.assert_array_equal(loaded.predict_y(Xs)[0], classifier.predict_y(Xs)[0])


def test_old_format_function_and_multiclass_files_load_as_k_by_1(data, tmp_path):
    X, Y, Xs = data
    function = DPGPRFITC((X, Y), se(), X[:5], noise_variance=0.1, y_bounds=(-2.0, 2.0),
                         hyperparameters_public=True).release_function(epsilon=1.0, delta=1e-3, seed=9)
    classes = np.clip(np.floor(X[:, 0] / 2.0), 0, 2).astype(int)
    several = DPMulticlassLaplaceGPC((X, classes), se(), num_classes=3, hyperparameters_public=True).release(
        epsilon=1.0, delta=1e-3, seed=9)
    for name, released, m in (("function", function, 5), ("multiclass", several, len(X))):
        path = write_as_before(tmp_path / f"old_{name}.json", released, type(released).__name__, readout=True)
        assert file_arrays(path)["releases/0/mean"] == [m]
        loaded = dp.load(path)
        for release in loaded.releases:
            assert_k_by_p(release, m)
        if name == "function":
            for got, want in zip(loaded.predict(Xs), released.predict(Xs)):
                assert got.shape == (K, 1)
                np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_array_equal(loaded.predict_y(Xs)[0], released.predict_y(Xs)[0])


def json_array(path, name):
    """An array of a release file decoded here from its base64 little-endian float64 bytes."""
    import base64

    a = json.loads(path.read_text())["arrays"][name]
    assert a["dtype"] == "float64"
    return np.frombuffer(base64.b64decode(a["data"]), dtype="<f8").reshape(a["shape"])


def test_plotting_draws_a_k_by_1_release_and_refuses_several_outputs(data):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpgp_gpflow.plotting import plot_noise_std, plot_release

    X, Y, Xs = data
    release = gpr(X, Y).release(Xs[::-1], epsilon=1.0, delta=1e-3, seed=8)  # unsorted inputs: drawn sorted
    fig, ax = plt.subplots()
    plot_release(ax, Xs[::-1], release)
    plot_noise_std(ax, Xs[::-1], {"noise": release})
    lines = {line.get_label(): line for line in ax.lines}
    np.testing.assert_array_equal(lines["DP mean"].get_ydata(), release.mean[::-1, 0])
    np.testing.assert_array_equal(lines["noise"].get_ydata(), release.noise_std[::-1, 0])
    two = gpr(X, np.hstack([Y, np.cos(X)])).release(Xs, epsilon=1.0, delta=1e-3, seed=8)
    with pytest.raises(ValueError, match="only a release of one output"):
        plot_release(ax, Xs, two)
    plt.close(fig)
