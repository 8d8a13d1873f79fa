"""Release files of histogram residual releases (issue 36 item 6): save, ``dp.load``, ``dp.audit`` of the loaded
release, and consistent forgeries refused (docs/release_file.md#histogram-residual-releases).

The file holds the counts-and-``b`` stage and every residual stage as released, their noise stds and the public
pieces; a loaded release predicts bit for bit as the saved one (its constructor replays every radius and estimate
from the released values). Each forgery below edits one claim and recomputes the hash, so only the loader's own
checks can refuse it. The command line (``--residual histogram``): tests/test_cli_whole_rows.py."""

from __future__ import annotations

import base64
import json
import math
import warnings
from pathlib import Path

import gpflow
import numpy as np
import pytest
from forgery import forged
from reference import reference_multiplier
from whole_rows_reference import features as reference_features

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.io import ReleaseFileError
from dpgp_gpflow.io import format as release_file
from dpgp_gpflow.models import DPSGPR
from dpgp_gpflow.whole_rows.residual_bounds import histogram_sensitivity, residual_sensitivity

BOX = [(0.0, 10.0)]
BOUNDS = (-3.0, 3.0)
LENGTHSCALE = 2.0  # 10 cells of half a lengthscale over the box
Z = wr.inducing_grid(BOX, 6)
EPSILON, DELTA = 2.0, 1e-3
FRACTIONS = (0.3, 0.15, 0.15, 0.15, 0.25)  # the scheme's (docs/whole_rows.md#residual-releases)
XQ = np.linspace(-1.0, 11.0, 7)[:, None]  # inside and outside the box


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 10.0, (80, 1))
    Y = np.sin(X) + 0.3 * rng.standard_normal((80, 1))
    kernel = gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=LENGTHSCALE)
    model = DPSGPR((X, Y), kernel, Z, noise_variance=0.09, y_bounds=BOUNDS, x_bounds=BOX, private_inputs=True,
                   hyperparameters_public=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.ReproducibleNoiseWarning)
        released = model.release_function(epsilon=EPSILON, delta=DELTA, seed=5, residual_fractions="histogram")
    path = released.save(tmp_path_factory.mktemp("histogram_files") / "histogram.json")
    return model, released, path, dp.load(path)


def _array(raw, name) -> np.ndarray:
    entry = raw["arrays"][name]
    return np.frombuffer(base64.b64decode(entry["data"]), dtype="<f8").reshape(entry["shape"]).copy()


def _scaled(raw, name, factor, index=None) -> None:
    values = _array(raw, name)
    if index is None:
        values = values * factor
    else:
        values[index] *= factor
    raw["arrays"][name] = release_file.encode_array(values)


def test_a_loaded_release_predicts_bit_for_bit_as_the_saved_one_and_passes_the_audit(saved):
    model, original, _, loaded = saved
    assert type(loaded) is type(original) and repr(loaded) == repr(original)
    assert loaded.privacy_card() == original.privacy_card()
    assert original.lengthscales == loaded.lengthscales == LENGTHSCALE  # as a whole-row release's
    for a, b in zip(original.predict_f(XQ), loaded.predict_f(XQ)):
        assert b.shape == (XQ.shape[0], 1)
        np.testing.assert_array_equal(b, a)
    for name, values in original.statistics.items():
        np.testing.assert_array_equal(loaded.statistics[name], values)
        np.testing.assert_array_equal(loaded.statistics_noise_std[name], original.statistics_noise_std[name])
    np.testing.assert_array_equal(loaded.estimates, original.estimates)
    np.testing.assert_array_equal(loaded.noise_covariance, original.noise_covariance)
    np.testing.assert_allclose(loaded.radii, original.radii, rtol=1e-12)
    assert loaded.neighbours == "row (inputs and outputs)" and loaded.clip_to_bounds
    # the loaded release predicts from its last estimate: clip(c + phi(x)^T u_J), phi written here in NumPy
    mean = np.clip(reference_features(XQ, Z, LENGTHSCALE) @ loaded.estimates[-1] + 0.0, *BOUNDS)
    np.testing.assert_allclose(loaded.predict_f(XQ)[0][:, 0], mean, rtol=1e-6, atol=1e-8)
    report = dp.audit(loaded, model)  # the loaded release's noise within its claim, every radius recomputed
    assert report.passed and 0.99 * EPSILON <= report.epsilon <= EPSILON * (1 + 1e-9)


def test_the_file_holds_what_was_released_with_the_noise_its_card_charges(saved):
    _, original, path, _ = saved
    raw = json.loads(Path(path).read_text())
    card, st = raw["card"], original.statistics
    assert card["neighbours"] == "row (inputs and outputs)" and card["chunking"][1] >= 1
    assert set(raw["arrays"]) == {"inducing_inputs", "histogram/centres", "histogram/counts", "histogram/b",
                                  "histogram/noise_std", "residual/b", "residual/noise_std"}  # no X, no Y
    np.testing.assert_array_equal(_array(raw, "histogram/counts"), st["counts"])
    np.testing.assert_array_equal(_array(raw, "histogram/b"), st["b"])
    np.testing.assert_array_equal(_array(raw, "residual/b"), st["residual_b"])
    np.testing.assert_array_equal(_array(raw, "inducing_inputs"), Z)
    np.testing.assert_allclose(_array(raw, "histogram/centres")[:, 0], np.arange(10) + 0.5, rtol=1e-15)
    # every stage's multiplier s / sqrt(f_j), s the analytic multiplier computed apart (tests/reference.py)
    s = reference_multiplier(EPSILON, DELTA)
    np.testing.assert_allclose(card["stage_multipliers"], s / np.sqrt(FRACTIONS), rtol=1e-8)
    # a row moves the released vector by one (a little more for the sums' rounding and the sampler's grid)
    assert all(1.0 <= d <= 1.0 + 1e-6 for d in card["stage_sensitivities"])
    # stage 1: [w_n / sqrt(2) counts, w_b / d b] with noise s_1 Delta_1 on every entry, so
    # 2 / sigma_n^2 + d^2 / sigma_b^2 = (w_n^2 + w_b^2) / (s_1 Delta_1)^2 = 1 / (s_1 Delta_1)^2
    sigma_n, sigma_b = _array(raw, "histogram/noise_std")
    d = BOUNDS[1] - BOUNDS[0]
    unit = card["stage_multipliers"][0] * card["stage_sensitivities"][0]
    assert 2.0 / sigma_n**2 + d**2 / sigma_b**2 == pytest.approx(1.0 / unit**2, rel=1e-12)
    assert sigma_n == pytest.approx(unit * math.sqrt(2.0 / card["shares"][0]), rel=1e-12)
    # the residual stages: s_j Delta_j 2 R_j
    np.testing.assert_allclose(_array(raw, "residual/noise_std"), np.asarray(card["stage_multipliers"][1:])
                               * card["stage_sensitivities"][1:] * 2.0 * np.asarray(card["radii"]), rtol=1e-12)


def _card(**fields):
    return lambda raw: raw["card"].update(**fields)


def _radius_and_its_noise(raw) -> None:
    """The second radius 1 % wider and its stage's noise std with it: the card consistent, the radius not what
    the earlier stages give."""
    raw["card"]["radii"][1] *= 1.01
    _scaled(raw, "residual/noise_std", 1.01, index=1)


def _radii_a_hair_smaller(raw) -> None:
    """Every radius and residual noise std times (1 - 9e-13): the card consistent, the radii within the replay's
    1e-12 but below the radii the earlier stages give (less noise than their clipping needs; loaded before)."""
    raw["card"]["radii"] = [r * (1.0 - 9e-13) for r in raw["card"]["radii"]]
    _scaled(raw, "residual/noise_std", 1.0 - 9e-13)


def _kernel_lengthscale(raw) -> None:
    raw["content"]["kernel"]["parameters"]["lengthscales"] = 1e-3  # 10^4 cells over the box


def _restated(raw, saved_release, counts_std, b_std) -> None:
    """The histogram stage's noise stds set to ``(counts_std, b_std)``, every radius replayed from the released
    values as the loader does (:func:`~dpgp_gpflow.whole_rows.histogram_scheme.histogram_chain`; radius ``j``
    reads stage ``j - 1``'s std) and each residual std ``s_j Delta_j 2 R_j`` from the card: a file consistent
    everywhere but in the noise its card charges, so only the recomputed noise std can refuse it."""
    from dpgp_gpflow.whole_rows.histogram_scheme import histogram_chain
    from dpgp_gpflow.whole_rows.residual import radius_features

    card = raw["card"]
    raw["arrays"]["histogram/noise_std"] = release_file.encode_array(np.array([counts_std, b_std]))
    phi = radius_features(saved_release.features, saved_release.centres).phi.numpy()
    stds = list(_array(raw, "residual/noise_std"))
    for _ in range(len(stds) + 1):  # stage j's std is fixed once stage j - 1's is
        chain = histogram_chain(_array(raw, "histogram/counts"), _array(raw, "histogram/b"),
                                _array(raw, "residual/b"), stds, phi, counts_std=counts_std, b_std=b_std,
                                kernel_variance=card["kernel_variance"], noise_variance=card["noise_variance"],
                                width=BOUNDS[1] - BOUNDS[0])
        stds = [s * d * 2.0 * r for s, d, r in zip(card["stage_multipliers"][1:], card["stage_sensitivities"][1:],
                                                   chain.radii)]
    card["radii"] = [float(r) for r in chain.radii]
    raw["arrays"]["residual/noise_std"] = release_file.encode_array(np.array(stds))


def _consistent_cells(raw) -> None:
    """12 cells claimed with every number of the card that follows from them recomputed (the stage's sensitivity
    for C + M = 18 entries, its two noise stds, the counts' and centres' shapes): only the grid recomputed from
    the kernel and the box (10 cells) can refuse it."""
    card = raw["card"]
    n, (longest, chunks) = card["num_data"], card["chunking"]
    old = card["stage_sensitivities"][0]
    new = histogram_sensitivity(m=card["num_inducing"], num_cells=12,
                                                   multiplier=card["stage_multipliers"][0], num_rows=n,
                                                   chunk_rows=longest, num_chunks=chunks)
    assert new != old  # the forgery changes what the card charges
    card.update(cells=12, num_cells=12)
    card["stage_sensitivities"][0] = new
    _scaled(raw, "histogram/noise_std", new / old)
    raw["arrays"]["histogram/counts"] = release_file.encode_array(np.resize(_array(raw, "histogram/counts"), 12))
    raw["arrays"]["histogram/centres"] = release_file.encode_array((np.arange(12.0) + 0.5)[:, None] * 10.0 / 12.0)


FORGERIES = {
    "the counts' noise std halved": (lambda raw: _scaled(raw, "histogram/noise_std", 0.5, index=0), "noise_std"),
    "b's noise std halved": (lambda raw: _scaled(raw, "histogram/noise_std", 0.5, index=1), "noise_std"),
    "a residual noise std halved": (lambda raw: _scaled(raw, "residual/noise_std", 0.5, index=2), "noise_std"),
    "the counts' sensitivity": (lambda raw: raw["card"]["stage_sensitivities"].__setitem__(0, 0.5), "sensitivit"),
    "a residual sensitivity": (lambda raw: raw["card"]["stage_sensitivities"].__setitem__(2, 0.5), "sensitivit"),
    "a radius": (lambda raw: raw["card"]["radii"].__setitem__(0, raw["card"]["radii"][0] * 1.5), "noise_std"),
    "a radius and its noise": (_radius_and_its_noise, "earlier stages"),
    "the radii a hair smaller": (_radii_a_hair_smaller, "earlier stages"),
    "fractions not summing to 1": (_card(residual_fractions=[0.3, 0.15, 0.15, 0.15, 0.2]), "summing to 1"),
    "other fractions": (_card(residual_fractions=[0.2, 0.2, 0.2, 0.15, 0.25]), "stage_multipliers"),
    "a grid over the cap": (_card(cells=5000, num_cells=5000), "at most 4096"),
    "a kernel whose grid is over the cap": (_kernel_lengthscale, "4096"),
    "the cells": (_card(cells=12, num_cells=12), "histogram stage's sensitivity"),
    "the centres": (lambda raw: _scaled(raw, "histogram/centres", 1.01), "centres"),
    "the shares": (_card(shares=[0.5, 0.5]), "noise_std"),
    "unnormalised shares": (_card(shares=[0.3, 0.8]), "shares"),
    "persons as rows": (_card(person_rows=2), "neighbours"),
    "fewer rows": (_card(num_data=40, chunking=[40, 1]), "sensitivit"),
    "epsilon": (_card(epsilon=4.0), "noise_multiplier"),
    "the radius rule": (_card(radius_z=3.0), "radius_z"),
    "the kernel variance": (_card(kernel_variance=2.0), "earlier stages"),
    "an extra array": (lambda raw: raw["arrays"].update(**{"rows/X": raw["arrays"]["inducing_inputs"]}), "rows/X"),
}


def test_a_consistent_forgery_of_the_grid_reaches_the_grid_recomputed_from_the_kernel(saved, tmp_path):
    """Two self-consistent forgeries whose card checks all pass (``dp.io.read_card`` reads them): the kernel's
    lengthscale halved (20 cells of half a lengthscale, the card's 10), and 12 cells claimed with the stage's
    sensitivity, noise stds, counts and centres recomputed for them. Only the loader's grid from the kernel and
    the box refuses them (io/loading.py: card.cells against histogram_cells)."""
    halved = forged(saved[2], tmp_path, lambda raw: raw["content"]["kernel"]["parameters"].update(
        lengthscales=LENGTHSCALE / 2))
    dp.io.read_card(halved)
    with pytest.raises(ReleaseFileError, match="card.cells 10 is not the grid's 20 cells"):
        dp.load(halved)
    twelve = forged(saved[2], tmp_path, _consistent_cells)
    assert dp.io.read_card(twelve)["num_cells"] == 12
    with pytest.raises(ReleaseFileError, match="card.cells 12 is not the grid's 10 cells"):
        dp.load(twelve)


def _unnormalised_shares(saved_release):
    """Both shares times (1 + 1e-10) (their sum within the card's 1e-9 of 1) and both stds over sqrt(1 + 1e-10), as
    the written shares would give unnormalised, the radii and residual stds restated: noise too small by 5e-11 of
    itself, which the release's rule (the shares normalised) recomputes."""
    def edit(raw):
        factor = 1.0 + 1e-10
        raw["card"]["shares"] = [v * factor for v in raw["card"]["shares"]]
        counts_std, b_std = _array(raw, "histogram/noise_std") / math.sqrt(factor)
        _restated(raw, saved_release, counts_std, b_std)
    return edit


def _smaller_multiplier(saved_release):
    """The card's noise multiplier and every stage's times (1 - 9e-10) (within the card's 1e-9 of the recomputed
    multiplier), each stage's sensitivity recomputed at its forged multiplier, every noise std with them, the radii
    and residual stds restated: noise too small by 9e-10 of itself, which the multipliers recomputed from epsilon
    and delta (never the card's) refuse."""
    def edit(raw):
        card, factor = raw["card"], 1.0 - 9e-10
        n, (longest, chunks), m = card["num_data"], card["chunking"], card["num_inducing"]
        card["noise_multiplier"] *= factor
        card["stage_multipliers"] = [s * factor for s in card["stage_multipliers"]]
        first = histogram_sensitivity(m=m, num_cells=card["num_cells"],
                                                         multiplier=card["stage_multipliers"][0], num_rows=n,
                                                         chunk_rows=longest, num_chunks=chunks)
        change = factor * first / card["stage_sensitivities"][0]
        card["stage_sensitivities"] = [first] + [
            residual_sensitivity(m=m, multiplier=s, num_rows=n, chunk_rows=longest, num_chunks=chunks)
            for s in card["stage_multipliers"][1:]]
        counts_std, b_std = _array(raw, "histogram/noise_std") * change
        _restated(raw, saved_release, counts_std, b_std)
    return edit


@pytest.mark.parametrize("forgery", [_unnormalised_shares, _smaller_multiplier])
def test_noise_a_hair_below_the_charge_is_refused_on_the_recomputed_numbers(saved, tmp_path, forgery):
    """The card's shares and multipliers are trusted only within 1e-9: the noise stds are recomputed from the
    shares normalised and the multipliers of (epsilon, delta), by the release's rule. Both forgeries loaded
    before (their noise 5e-11 and 9e-10 of itself too small)."""
    _, original, path, _ = saved
    bad = forged(path, tmp_path, forgery(original))
    raw = json.loads(Path(bad).read_text())
    sigma_n, _ = _array(raw, "histogram/noise_std")
    assert sigma_n < original.statistics_noise_std["counts"][0] * (1 - 4e-11)  # the forgery's noise is smaller
    for read in (dp.io.read_card, dp.load):  # dpgp show and the loader
        with pytest.raises(ReleaseFileError, match="histogram/noise_std"):
            read(bad)


def test_estimates_that_overflow_are_refused(saved, tmp_path):
    """The last stage's b at 1e308 (hash consistent; its std and the radii do not read it): its estimate is not
    finite, so the release would predict NaN; the constructor refuses it and the loader names the stages."""
    def edit(raw):
        values = _array(raw, "residual/b")
        values[-1, 0] = 1e308
        raw["arrays"]["residual/b"] = release_file.encode_array(values)

    with pytest.raises(ReleaseFileError, match="not finite"):
        dp.load(forged(saved[2], tmp_path, edit))


@pytest.mark.parametrize("what", sorted(FORGERIES))
def test_a_consistent_forgery_is_refused(saved, tmp_path, what):
    edit, message = FORGERIES[what]
    with pytest.raises(ReleaseFileError, match=message):
        dp.load(forged(saved[2], tmp_path, edit))


def test_the_card_checks_run_without_building_the_release(saved, tmp_path):
    """``dp.io.read_card`` (what ``dpgp show`` runs, without TensorFlow) refuses a forged noise std and reads the
    honest card, whose one line is the release's repr."""
    from dpgp_gpflow.io.card import whole_rows_summary

    _, original, path, _ = saved
    with pytest.raises(ReleaseFileError, match="noise_std"):
        dp.io.read_card(forged(path, tmp_path, FORGERIES["the counts' noise std halved"][0]))
    card = dp.io.read_card(path)
    assert whole_rows_summary(card) == repr(original)
    assert repr(original).startswith("HistogramResidualRelease(mechanism='whole-row histogram + 4 residual release(s)'")
