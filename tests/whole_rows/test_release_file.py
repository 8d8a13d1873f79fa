"""Release files of whole-row releases (issue 36 item 6): save, ``dp.load`` and ``dpgp show``.

The file holds the statistics as released (``S`` through its upper triangle, row by row), their noise std and the
public pieces; a loaded release predicts exactly as the saved one. Every public number of the card is recomputed
on loading (the multiplier, the sensitivity from the shares, M, n, the chunking and the persons, each entry's noise
std, the relation), so a consistent forgery (hash recomputed) of any of them is refused; ``dpgp show`` checks and
prints the card without TensorFlow."""

from __future__ import annotations

import base64
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.io import ReleaseFileError, ReleaseFileIntegrityError
from dpgp_gpflow.io import format as release_file
from dpgp_gpflow.streaming import LocalChunks

from forgery import forged

# the forgeries start from releases with variances fitted on small problems, whose fit may end on an edge of
# its range (dp.VarianceFitWarning: about the fit, not these tests' subject)
pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.VarianceFitWarning")

BOX = [(0.0, 10.0)]
BOUNDS = (0.0, 1.0)
Z = wr.inducing_grid(BOX, 4)
_rng = np.random.default_rng(0)
X = _rng.uniform(0.0, 10.0, (40, 1))
Y = np.clip(0.5 + 0.4 * np.sin(X), 0.0, 1.0)
XQ = np.linspace(-2.0, 12.0, 9)[:, None]  # inside and outside the box


def _release(**options):
    kernel = gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        return wr.release_rows(LocalChunks(X, Y, 7), kernel, Z, x_bounds=BOX, y_bounds=BOUNDS, epsilon=1.0,
                               delta=1e-3, seed=3, **options)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whole_rows_files")
    one = _release(noise_variance=0.1)
    grid = _release(lengthscales=[2.0, 4.0, 8.0])  # variances fitted, the lengthscale chosen from a grid
    return {"one": (one, one.save(folder / "one.json")), "grid": (grid, grid.save(folder / "grid.json"))}


def _set_array(raw, name, values) -> None:
    raw["arrays"][name] = release_file.encode_array(np.asarray(values, dtype=np.float64))


def _array(raw, name) -> np.ndarray:
    entry = raw["arrays"][name]
    return np.frombuffer(base64.b64decode(entry["data"]), dtype="<f8").reshape(entry["shape"]).copy()


@pytest.mark.parametrize("name", ["one", "grid"])
def test_a_loaded_release_predicts_exactly_as_the_saved_one(saved, name):
    original, path = saved[name]
    loaded = dp.load(path)
    assert type(loaded) is wr.WholeRowsRelease and repr(loaded) == repr(original)
    assert loaded.privacy_card() == original.privacy_card()
    for a, b in zip(original.predict_f(XQ), loaded.predict_f(XQ)):
        assert b.shape == (XQ.shape[0], 1)
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=0.0)
    for a, b in zip(original.predict_y(XQ), loaded.predict_y(XQ)):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=0.0)
    assert (loaded.kernel_variance, loaded.noise_variance) == (original.kernel_variance, original.noise_variance)
    assert loaded.selection == original.selection and len(loaded.candidates) == len(original.candidates)


def test_the_file_holds_the_statistics_as_released_and_nothing_of_the_rows(saved):
    original, path = saved["grid"]
    raw = json.loads(Path(path).read_text())
    rows, cols = np.triu_indices(Z.shape[0])  # S through its upper triangle, row by row
    np.testing.assert_array_equal(_array(raw, "statistics/S"), original.statistics["S"][rows, cols])
    np.testing.assert_array_equal(_array(raw, "statistics/b"), original.statistics["b"])
    np.testing.assert_array_equal(_array(raw, "statistics/q"), [float(original.statistics["q"])])
    np.testing.assert_array_equal(_array(raw, "noise_std/S"), original.statistics_noise_std["S"][rows, cols])
    np.testing.assert_array_equal(_array(raw, "inducing_inputs"), Z)
    expected = {f"{p}/{k}" for p in ("statistics", "noise_std", *(f"candidates/{i}" for i in range(3)))
                for k in "Sbq"} | {"inducing_inputs"}
    assert set(raw["arrays"]) == expected  # no X, no Y
    card = raw["card"]
    assert card["neighbours"] == "row (inputs and outputs)" and card["chunking"] == [7, 6]
    # the noise std of b, recomputed here from the card: s * Delta * d / w_b (d the bounds' width)
    w_b = math.sqrt(card["shares"][1])
    np.testing.assert_allclose(_array(raw, "noise_std/b"),
                               card["noise_multiplier"] * card["sensitivity"] * 1.0 / w_b, rtol=1e-12)


def _scaled(raw, name, factor) -> None:
    _set_array(raw, name, _array(raw, name) * factor)


FORGERIES = {
    "the sensitivity lowered": lambda raw: raw["card"].update(sensitivity=raw["card"]["sensitivity"] / 2),
    "the noise multiplier": lambda raw: raw["card"].update(noise_multiplier=raw["card"]["noise_multiplier"] * 1.1),
    "fewer rows claimed": lambda raw: raw["card"].update(num_data=20, chunking=[7, 3]),
    "another chunking": lambda raw: raw["card"].update(chunking=[40, 1]),
    "persons as rows": lambda raw: raw["card"].update(person_rows=2),
    "the relation": lambda raw: raw["card"].update(neighbours="person (groups, up to 2 rows) (inputs and outputs)"),
    "the shares": lambda raw: raw["card"].update(shares=[0.2, 0.78, 0.02]),
    "epsilon": lambda raw: raw["card"].update(epsilon=2.0),
    "the noise std of S": lambda raw: _scaled(raw, "noise_std/S", 0.5),
    "the noise std of b": lambda raw: _scaled(raw, "noise_std/b", 0.5),
    "the noise std of q": lambda raw: _scaled(raw, "noise_std/q", 2.0),
    "S without a row": lambda raw: _set_array(raw, "statistics/S", _array(raw, "statistics/S")[:-1]),
    "b non-finite": lambda raw: _set_array(raw, "statistics/b", _array(raw, "statistics/b") * np.inf),
    "the kernel": lambda raw: raw["content"]["kernel"].update(**{"class": "NoSuchKernel"}),
    "an extra array": lambda raw: _set_array(raw, "rows/X", X),
    # the public pieces predictions read, against the card and the kernel (found by a fresh-user trial: each loaded)
    "k_max halved": lambda raw: raw["content"].update(k_max=raw["content"]["k_max"] / 2),
    "the card's kernel variance": lambda raw: raw["card"].update(kernel_variance=1.0),
    "the card's noise variance": lambda raw: raw["card"].update(noise_variance=0.5),
    "the card's lengthscales": lambda raw: raw["card"].update(lengthscales=6.0),
    "the content's lengthscales": lambda raw: raw["content"]["kernel"]["parameters"].update(lengthscales=6.0),
    "the variances' kind": lambda raw: raw["card"].update(variances="fit"),
}


@pytest.mark.parametrize("what", sorted(FORGERIES))
def test_a_consistent_forgery_is_refused(saved, tmp_path, what):
    path = forged(saved["one"][1], tmp_path, FORGERIES[what])
    with pytest.raises(ReleaseFileError) as caught:
        dp.load(path)
    assert "\n" not in str(caught.value)


def test_noise_a_hair_below_the_charge_is_refused_at_the_recomputed_multiplier(saved, tmp_path):
    """The card's multiplier and every noise std times (1 - 9e-10), within the card's 1e-9 of the multiplier of
    (epsilon, delta) (the sensitivity's grid factor does not move at this change): the stds are recomputed at the
    recomputed multiplier, never the card's, so this is refused (it loaded before)."""
    def edit(raw):
        raw["card"]["noise_multiplier"] *= 1.0 - 9e-10
        for name in ("noise_std/S", "noise_std/b", "noise_std/q"):
            _scaled(raw, name, 1.0 - 9e-10)

    with pytest.raises(ReleaseFileError, match="noise_std"):
        dp.load(forged(saved["one"][1], tmp_path, edit))


GRID_FORGERIES = {
    "the chosen statistics": lambda raw: _scaled(raw, "statistics/b", 1.5),  # no longer the chosen candidate's
    "the choice": lambda raw: raw["content"]["selection"].update(chosen=(raw["content"]["selection"]["chosen"] + 1) % 3),
    "the candidates": lambda raw: raw["card"].update(lengthscale_candidates=[2.0, 4.0]),
    "a fitted variance": lambda raw: raw["content"].update(noise_variance=raw["content"]["noise_variance"] * 2),
    "a candidate's k_max": lambda raw: raw["content"]["candidates"][0].update(k_max=1.0),
    "the card's fitted kernel variance": lambda raw: raw["card"].update(kernel_variance=1.0),
}


@pytest.mark.parametrize("what", sorted(GRID_FORGERIES))
def test_a_consistent_forgery_of_a_grid_is_refused(saved, tmp_path, what):
    path = forged(saved["grid"][1], tmp_path, GRID_FORGERIES[what])
    with pytest.raises(ReleaseFileError):
        dp.load(path)


def test_a_grid_whose_kernel_is_not_the_chosen_candidates_is_refused(saved, tmp_path):
    """Found by review: content.kernel (what predictions read) and card.lengthscales set to another candidate's
    lengthscale, hash recomputed, loaded and predicted otherwise; the loader now ties them to the chosen one."""
    grid, path = saved["grid"]
    chosen = grid.selection["chosen"]
    other = grid.selection["lengthscales"][(chosen + 1) % 3]
    assert other != grid.lengthscales

    def edit(raw):
        raw["card"]["lengthscales"] = other
        raw["content"]["kernel"]["parameters"]["lengthscales"] = other

    with pytest.raises(ReleaseFileError, match="not the chosen candidate's"):
        dp.load(forged(path, tmp_path, edit))


def test_edited_statistics_without_the_hash_are_refused(saved, tmp_path):
    raw = json.loads(Path(saved["one"][1]).read_text())
    _scaled(raw, "statistics/b", 1.01)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ReleaseFileIntegrityError):
        dp.load(path)


def test_the_card_checks_refuse_without_tensorflow(saved, tmp_path):
    """``dp.read_card`` (and so ``dpgp show``) refuses a forged card; ``dpgp show`` prints the card and imports
    neither TensorFlow nor GPflow."""
    forged_path = forged(saved["one"][1], tmp_path, FORGERIES["the sensitivity lowered"])
    with pytest.raises(ReleaseFileError, match="sensitivity"):
        dp.io.read_card(forged_path)
    child = ("import contextlib, io, sys, dpgp_gpflow.cli\n"
             "out = io.StringIO()\n"
             "with contextlib.redirect_stdout(out):\n"
             "    code = dpgp_gpflow.cli.main(['show', sys.argv[1]])\n"
             "print(code, [m for m in ('tensorflow', 'gpflow') if m in sys.modules])\n"
             "print(out.getvalue())\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-c", child, str(saved["one"][1])], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    first, *shown = proc.stdout.splitlines()
    assert first == "0 []"
    original = saved["one"][0]
    assert shown[0] == f"{saved['one'][1]}: {original!r}"
    assert "  neighbours: row (inputs and outputs)" in shown and "  chunking: [7, 6]" in shown


# -- every kernel a whole-row release accepts saves and loads (save refused Cosine, Polynomial and Periodic after
# the release was charged); each class's file form alone: tests/test_release_file_kernels.py

BOX2 = [(0.0, 10.0), (-1.0, 1.0)]
Z2 = wr.inducing_grid(BOX2, 3)  # M = 9
X2 = np.column_stack([_rng.uniform(0.0, 10.0, 30), _rng.uniform(-1.0, 1.0, 30)])
Y2 = np.clip(0.5 + 0.3 * np.sin(X2[:, :1]) + 0.1 * X2[:, 1:], 0.0, 1.0)
XQ2 = np.column_stack([np.linspace(-1.0, 11.0, 7), np.linspace(-1.5, 1.5, 7)])  # inside and outside the box
K = gpflow.kernels
KERNELS = {
    "the other stationary kernels, summed": lambda: (
        K.SquaredExponential(variance=2.0, lengthscales=[3.0, 0.7]) + K.Matern12(lengthscales=2.0)
        + K.Matern32(variance=0.5, lengthscales=[2.0, 1.0]) + K.Matern52(lengthscales=2.5, active_dims=[0])
        + K.Exponential(lengthscales=4.0) + K.RationalQuadratic(alpha=0.7, lengthscales=2.0)),
    "cosine": lambda: K.Cosine(variance=1.5, lengthscales=[15.0, 4.0]),
    "polynomial": lambda: K.Polynomial(degree=2.0, variance=[0.02, 0.5], offset=0.3),
    "periodic": lambda: K.Periodic(K.SquaredExponential(variance=1.2, lengthscales=0.8, active_dims=[0]), period=4.0),
    "linear-active-dims + constant": lambda: K.Linear(variance=0.4, active_dims=[1]) + K.Constant(0.3),
    "sum": lambda: K.Matern32(lengthscales=3.0) + K.Periodic(K.Matern52(lengthscales=1.0), period=[5.0, 2.0]),
    "product": lambda: K.SquaredExponential(lengthscales=3.0, active_dims=[0]) * K.Polynomial(degree=1.0,
                                                                                              active_dims=[1]),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_every_kernel_a_release_accepts_saves_and_loads_predicting_the_same(name, tmp_path):
    """The in-memory release is the reference: the loaded file predicts the same means and variances (before,
    save refused Cosine, Polynomial and Periodic after the release was charged)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        released = wr.release_rows(LocalChunks(X2, Y2, 11), KERNELS[name](), Z2, x_bounds=BOX2, y_bounds=BOUNDS,
                                   epsilon=1.0, delta=1e-3, seed=5, noise_variance=0.05)
    loaded = dp.load(released.save(tmp_path / "k.json"))
    assert type(loaded.features.kernel) is type(released.features.kernel)
    assert loaded.features.k_max == released.features.k_max
    for a, b in zip(released.predict_f(XQ2), loaded.predict_f(XQ2)):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("name", ["one", "grid"])
def test_a_fitted_variance_not_the_refit_says_what_likely_happened(saved, tmp_path, name):
    """A file whose fitted variances are not what loading refits (e.g. written before 4a34f08 changed the fit, review
    V, session 19) is refused saying so; a file's given variances are refused without that reason."""

    def edit(raw):
        raw["card"].update(kernel_variance=raw["card"]["kernel_variance"] * 1.01)

    with pytest.raises(ReleaseFileError, match=r"card\.kernel_variance: not what the loaded") as caught:
        dp.load(forged(saved[name][1], tmp_path, edit))
    refitted = "the variances refitted from the released statistics differ from the file's" in str(caught.value)
    assert refitted == (name == "grid") and "\n" not in str(caught.value)
