"""Clipping released means to the public bounds (issue 26 item 6): post-processing, recorded in the
privacy card, reproduced by a loaded release. The reference is ``np.clip`` of the unclipped values."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow.io import format as release_file
from dpgp_gpflow.models import DPGPR, DPGPRFITC, DPLaplaceGPC
from dpgp_gpflow.released import PrivateFunction, PrivateRelease

from reference import clipped_sine_toy

pytestmark = pytest.mark.filterwarnings("ignore::dpgp_gpflow.ReproducibleNoiseWarning")

LO, HI = -1.0, 1.0


@pytest.fixture(scope="module")
def toy():
    return clipped_sine_toy(LO, HI)


def kernel():
    return gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=1.0)


@pytest.fixture(scope="module")
def release(toy):
    X, Y, Xs = toy  # a small epsilon: the noise pushes many released means outside the bounds
    model = DPGPR((X, Y), kernel(), y_bounds=(LO, HI), noise_variance=0.1)
    model.declare_hyperparameters_public()  # chosen here without the outputs
    return model.release(Xs, epsilon=0.2, delta=1e-3, seed=3).unclipped()  # the raw DP mean (default: clipped)


@pytest.fixture(scope="module")
def function(toy):
    X, Y, _ = toy
    model = DPGPRFITC((X, Y), kernel(), X[:6], noise_variance=0.1, y_bounds=(LO, HI))
    model.declare_hyperparameters_public()
    return model.release_function(epsilon=0.2, delta=1e-3, seed=4).unclipped()  # raw predictions (default: clipped)


def test_clipped_release_is_np_clip_of_the_unclipped_one(release):
    assert np.any(release.mean < LO) and np.any(release.mean > HI)  # otherwise the test shows nothing
    clipped = release.clipped()
    np.testing.assert_array_equal(clipped.mean, np.clip(release.mean, LO, HI))
    assert np.all((clipped.mean >= LO) & (clipped.mean <= HI))
    for name in ("noise_std", "noise_factor", "variance"):  # the noise reported is the unclipped Gaussian's
        np.testing.assert_array_equal(getattr(clipped, name), getattr(release, name))
    assert (clipped.epsilon, clipped.delta) == (release.epsilon, release.delta)  # free
    assert clipped.clip_to_bounds and not release.clip_to_bounds
    assert clipped.privacy_card()["clip_to_bounds"] is True and release.privacy_card()["clip_to_bounds"] is False
    assert "clip_to_bounds=True" in repr(clipped) and "clip_to_bounds" not in repr(release)
    np.testing.assert_array_equal(clipped.clipped().mean, clipped.mean)  # idempotent


def test_clipped_function_predictions_are_np_clip_of_the_unclipped_ones(function, toy):
    Xs = toy[2]
    clipped = function.clipped()
    raw, cut = function.predict(Xs), clipped.predict(Xs)
    assert np.any(raw.mean < LO) or np.any(raw.mean > HI)
    np.testing.assert_array_equal(cut.mean, np.clip(raw.mean, LO, HI))
    np.testing.assert_array_equal(cut.noise_std, raw.noise_std)
    np.testing.assert_array_equal(cut.variance, raw.variance)
    mean, var = clipped.predict_f(Xs)
    np.testing.assert_array_equal(mean, cut.mean)  # both [k, 1]
    np.testing.assert_array_equal(var, function.predict_f(Xs)[1])
    assert not function.clip_to_bounds  # the original is unchanged
    again = PrivateFunction(function.release, function.readout, function.coordinates, clip_to_bounds=True)
    np.testing.assert_array_equal(again.predict(Xs).mean, cut.mean)


@pytest.mark.parametrize("which", ["release", "function"])
def test_card_round_trip_reproduces_the_clipping(which, release, function, toy, tmp_path):
    obj = (release if which == "release" else function).clipped()
    path = obj.save(tmp_path / "clipped.json")
    assert release_file.read(path).card["clip_to_bounds"] is True
    loaded = dp.load(path)
    assert loaded.clip_to_bounds and loaded.privacy_card() == obj.privacy_card() and repr(loaded) == repr(obj)
    if which == "release":
        np.testing.assert_array_equal(loaded.mean, obj.mean)
    else:
        np.testing.assert_array_equal(loaded.predict(toy[2]).mean, obj.predict(toy[2]).mean)
    plain = dp.load((release if which == "release" else function).save(tmp_path / "plain.json"))
    assert not plain.clip_to_bounds


def _rewrite(path, edit):
    document = json.loads(path.read_text())
    edit(document["card"])
    document["sha256"] = hashlib.sha256(release_file.canonical_bytes(document)).hexdigest()
    path.write_text(json.dumps(document))


def test_card_without_the_flag_loads_unclipped_and_a_bad_flag_is_refused(release, tmp_path):
    path = release.clipped().save(tmp_path / "r.json")
    _rewrite(path, lambda card: card.pop("clip_to_bounds"))  # a file written before the flag existed
    assert not dp.load(path).clip_to_bounds
    _rewrite(path, lambda card: card.update(clip_to_bounds="yes"))
    with pytest.raises(release_file.ReleaseFileError, match="clip_to_bounds"):
        dp.load(path)


def test_clipping_is_refused_where_it_has_no_meaning(release, toy):
    X, Y, _ = toy
    labels = np.where(Y > 0, 1.0, -1.0)
    classifier = DPLaplaceGPC((X, labels), kernel()).release(epsilon=1.0, delta=1e-3, seed=5)
    with pytest.raises(TypeError, match="regression"):
        classifier.clipped()
    no_bounds = PrivateRelease(**{f.name: getattr(release, f.name) for f in release.__dataclass_fields__.values()
                                  if f.name not in ("y_bounds", "clip_to_bounds")})
    with pytest.raises(ValueError, match="y_bounds"):
        no_bounds.clipped()


def test_a_classifiers_latent_releases_refuse_to_be_clipped(release, toy, tmp_path):
    X, Y, _ = toy
    labels = np.where(Y > 0, 1.0, -1.0)
    model = DPLaplaceGPC((X, labels), kernel())
    classifier = model.release(epsilon=1.0, delta=1e-3, steps=2, seed=5)
    loaded = dp.load(classifier.save(tmp_path / "classifier.json"))
    for rel in (*classifier.releases, *loaded.releases):  # every Newton step, in memory and loaded back
        assert rel.y_bounds == (-1.0, 1.0) and rel.classifier_latent
        with pytest.raises(ValueError, match="classifier's latent values"):
            rel.clipped()
    assert loaded.privacy_card() == classifier.privacy_card()  # the card does not record the mark
    with pytest.raises(ValueError, match="classifier's latent values"):
        dataclasses.replace(classifier.release, clip_to_bounds=True)
    with pytest.raises(TypeError, match="classifier_latent"):
        dataclasses.replace(release, classifier_latent=1)
    # the same bounds on a regression release: clipped (the mark, not the bounds, refuses)
    assert release.y_bounds == (-1.0, 1.0) and not release.classifier_latent
    assert release.clipped().clip_to_bounds
