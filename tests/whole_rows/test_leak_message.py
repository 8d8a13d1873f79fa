"""The leak guard's refusal on a model with private inputs (red-team R, session 19, a7): it advised
``select_hyperparameters`` (which refuses such models) and declaring the values public "if chosen without the
outputs", and a user following it released private input rows as inducing inputs. For a model whose inputs are
private the advice is the release's lengthscale grid, inducing inputs from the public box, and values chosen
without the inputs and the outputs; a model with public inputs keeps its advice."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import whole_rows as wr
from dpgp_gpflow.models import DPSGPR

BOX = [(0.0, 10.0)]
_rng = np.random.default_rng(0)
X = _rng.uniform(0.0, 10.0, (20, 1))
Y = np.sin(X)
SELECT = "selection = dpgp_gpflow.selection.select_hyperparameters("


def _model(private_inputs=True, **options):
    box = dict(x_bounds=BOX) if private_inputs else {}
    return DPSGPR((X, Y), gpflow.kernels.SquaredExponential(lengthscales=2.0), wr.inducing_grid(BOX, 5),
                  noise_variance=0.1, y_bounds=(-2.0, 2.0), private_inputs=private_inputs, **box, **options)


def _refusal(model):
    with pytest.raises(dp.exceptions.PrivacyLeakError) as refused:
        model.release_function(epsilon=1.0, delta=1e-5)
    return str(refused.value)


@pytest.mark.parametrize("how", ["changed Z", "undeclared lengthscale"])
def test_a_private_inputs_models_refusal_advises_the_release_grid_and_the_public_box(how):
    if how == "changed Z":
        model = _model(hyperparameters_public=True)
        model.inducing_variable.Z.assign(X[:5])  # chosen from the private inputs
    else:
        model = _model()
    message = _refusal(model)
    assert SELECT not in message and "select_hyperparameters refuses models with private inputs" in message
    assert "lengthscales=[...]" in message and "inducing_grid" in message
    assert "without the private inputs and outputs" in message and "without the outputs," not in message


def test_a_public_inputs_models_refusal_keeps_its_advice():
    model = _model(private_inputs=False, hyperparameters_public=True)
    model.kernel.lengthscales.assign(3.0)
    message = _refusal(model)
    assert SELECT in message and "chosen without the outputs," in message and "private inputs" not in message


@pytest.mark.parametrize("num_classes", [None, 3])
def test_a_private_inputs_classifiers_refusal_advises_public_knowledge_not_a_grid(num_classes):
    """A whole-row classifier releases with model.release and has no lengthscale grid (review V, session 19):
    the advice to call release_function(lengthscales=[...]) was wrong for it."""
    labels = np.where(np.sin(X) > 0, 1.0, -1.0)
    kernel = gpflow.kernels.SquaredExponential(lengthscales=2.0)
    build = dict(private_inputs=True, x_bounds=BOX)
    if num_classes is None:
        model = dp.models.DPSparseLaplaceGPC((X, labels), kernel, wr.inducing_grid(BOX, 4), **build)
    else:
        classes = np.floor(X / 10.0 * 3).clip(0, 2)
        model = dp.models.DPSparseMulticlassLaplaceGPC((X, classes), kernel, wr.inducing_grid(BOX, 4),
                                                       num_classes=num_classes, **build)
    with pytest.raises(dp.exceptions.PrivacyLeakError) as refused:
        model.release(epsilon=1.0, delta=1e-3)
    message = str(refused.value)
    assert "lengthscales=[...]" not in message and "release_function" not in message and SELECT not in message
    assert "from public knowledge" in message and "model.release(epsilon=" in message and "inducing_grid" in message
    assert "without the private inputs and outputs" in message
