"""The whole-row releases' refusals (issue 36, Tests: "Refusals: no box, Z from private data, kernels without a
bound, inputs outside a box refused where clipping is off"), at every entry point that takes rows: the functions
over a chunk source (``release_rows``, ``release_classifier_rows``) and the models' releases from a streamed
source (whose rows the model's constructor never saw). Each is one line and leaves the ledger untouched
(reference: the accountant's own history, held and spent). The models' constructors' refusals are in
test_model.py and test_classification.py."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.models import DPGPR, DPSGPR, DPSparseLaplaceGPC, DPSparseMulticlassLaplaceGPC, kmeans_inducing_inputs
from dpgp_gpflow.streaming import LocalChunks
from dpgp_gpflow.whole_rows.classification import release_classifier_rows

BOX = [(0.0, 10.0), (0.0, 10.0)]
_rng = np.random.default_rng(11)
X = _rng.uniform(0.0, 10.0, (40, 2))
Y = np.clip(np.sin(X[:, :1]) + 0.1 * X[:, 1:], -1.0, 1.5)
LABELS = (X[:, 0] > 5.0).astype(int) + (X[:, 1] > 5.0)  # 0, 1, 2
OUTSIDE = X.copy()
OUTSIDE[23, 1] = 10.5  # one row (not in the first chunk) outside the box
Z = wr.inducing_grid(BOX, 2)
KMEANS = kmeans_inducing_inputs(X, 4)  # centres of the private inputs: remembered as data-derived


def _se():
    return gpflow.kernels.SquaredExponential(variance=2.0, lengthscales=3.0)


def _untouched(acc, read_rows=False) -> None:
    """Nothing held or spent. A refusal found in the pass over the rows (a row outside the box, clipping off) comes
    after the reservation (the rows are read only inside it): its reservation is recorded as cancelled, no charge."""
    history = acc.history()
    assert acc.held == (0.0, 0.0) and acc.spent == (0.0, 0.0)
    assert [h["status"] for h in history] == (["cancelled"] if read_rows else [])


def _regression(inputs=X, kernel=None, Zs=Z, box=BOX, **options):
    return lambda acc: wr.release_rows(LocalChunks(inputs, Y, 10), kernel or _se(), Zs, x_bounds=box,
                                       y_bounds=(-1.0, 1.5), epsilon=1.0, delta=1e-3, accountant=acc,
                                       noise_variance=0.1, **options)


def _classifier(inputs=X, kernel=None, Zs=Z, box=BOX, **options):
    return lambda acc: release_classifier_rows(LocalChunks(inputs, LABELS, 10), kernel or _se(), Zs, x_bounds=box,
                                               num_classes=3, epsilon=1.0, delta=1e-3, accountant=acc, **options)


def _models_stream(kind):
    """A model built on rows inside the box, with clipping off, released from a source with a row outside it."""
    build = dict(x_bounds=BOX, private_inputs=True, clip_inputs=False, hyperparameters_public=True)
    if kind == "regression":
        model = DPSGPR((X, Y), _se(), Z, noise_variance=0.1, y_bounds=(-1.0, 1.5), **build)
        source = LocalChunks(OUTSIDE, Y, 10)
    else:
        model = DPSparseMulticlassLaplaceGPC((X, LABELS), _se(), Z, num_classes=3, **build)
        source = LocalChunks(OUTSIDE, LABELS, 10)
    release = model.release_function if kind == "regression" else model.release
    return lambda acc: release(epsilon=1.0, delta=1e-3, accountant=acc, source=source)


REFUSALS = {
    "no box": (TypeError, "x_bounds=.*is required when the inputs are private", dict(box=None)),
    "Z from k-means on the private inputs": (ValueError, r"computed from the inputs \(k-means\)", dict(Zs=KMEANS)),
    "a kernel without a bound": (NotImplementedError, "ArcCosine", dict(kernel=gpflow.kernels.ArcCosine())),
    "inputs outside the box, clipping off": (ValueError, "outside the public box x_bounds and clipping is off",
                                             dict(inputs=OUTSIDE, clip_inputs=False)),
}


@pytest.mark.parametrize("entry", ["regression", "classifier"])
@pytest.mark.parametrize("what", sorted(REFUSALS))
def test_each_refusal_is_one_line_and_reserves_nothing(entry, what):
    error, match, options = REFUSALS[what]
    build = (_regression if entry == "regression" else _classifier)(**options)
    acc = dp.PrivacyAccountant(epsilon=5.0, delta=1e-2)
    with pytest.raises(error, match=match) as refused:
        build(acc)
    assert "\n" not in str(refused.value)
    _untouched(acc, read_rows=what.startswith("inputs outside"))


@pytest.mark.parametrize("kind", ["regression", "classifier"])
def test_a_streamed_row_outside_the_box_is_refused_where_clipping_is_off(kind):
    acc = dp.PrivacyAccountant(epsilon=5.0, delta=1e-2)
    with pytest.raises(ValueError, match="outside the public box x_bounds and clipping is off"):
        _models_stream(kind)(acc)
    _untouched(acc, read_rows=True)
    _regression(inputs=OUTSIDE)(acc) if kind == "regression" else _classifier(inputs=OUTSIDE)(acc)  # clipping on
    assert [h["status"] for h in acc.history()] == ["cancelled", "committed"] and acc.spent[0] == pytest.approx(1.0)


#: Options of private inputs where they cannot apply, each refused in one line naming what to do (found by a
#: fresh-user trial: DPGPR raised a bare TypeError, clip_inputs=False without private_inputs was silently accepted,
#: and the classifier's residual_fractions and a misspelt scheme got messages that did not say what applies).
MISPLACED = {
    "DPGPR with private inputs": (NotImplementedError, r"DPSGPR\(\.\.\., private_inputs=True",
                                  lambda: DPGPR((X, Y), _se(), y_bounds=(-1.0, 1.5), private_inputs=True)),
    "clip_inputs without private inputs (regression)": (
        ValueError, "clip_inputs applies to private inputs.*give it with private_inputs=True",
        lambda: DPSGPR((X, Y), _se(), Z, noise_variance=0.1, y_bounds=(-1.0, 1.5), clip_inputs=False)),
    "clip_inputs without private inputs (classifier)": (
        ValueError, "clip_inputs applies to private inputs",
        lambda: DPSparseLaplaceGPC((X, np.where(LABELS[:, None] > 0, 1.0, -1.0)), _se(), Z, clip_inputs=False)),
    "residual releases of a classifier": (
        TypeError, "no residual releases",
        lambda: DPSparseMulticlassLaplaceGPC((X, LABELS), _se(), Z, num_classes=3, private_inputs=True, x_bounds=BOX,
                                             hyperparameters_public=True).release(
            epsilon=1.0, delta=1e-3, residual_fractions="default")),
    "a misspelt scheme": (ValueError, "'histogram'", _regression(residual_fractions="histo")),
}


@pytest.mark.parametrize("what", sorted(MISPLACED))
def test_options_that_do_not_apply_are_refused_in_one_line_saying_what_does(what):
    error, match, build = MISPLACED[what]
    acc = dp.PrivacyAccountant(epsilon=5.0, delta=1e-2)
    with pytest.raises(error, match=match) as refused:
        build(acc) if what == "a misspelt scheme" else build()
    assert "\n" not in str(refused.value)
    _untouched(acc)
