"""streaming.release.cloak_function (internal): the streamed release under a validated request and a held
reservation, committing one event into it, run inside measure only (release_function is validation + one
measurement of this; the multiclass streamed release runs it per class)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import streaming
from dpgp_gpflow.accounting import reserve
from dpgp_gpflow.mechanisms import release_request
from dpgp_gpflow.mechanisms import cloaking as cloaking_module
from dpgp_gpflow.measurement import Measurement, measure
from dpgp_gpflow.mechanisms.rounding import SENSITIVITY_SAFETY
from dpgp_gpflow.models import DPSGPR
from dpgp_gpflow.neighbours import sensitivity_path
from dpgp_gpflow.sampling import DISCRETE_GAUSSIAN_FACTOR, GRID_EXPONENT
from dpgp_gpflow.streaming.release import cloak_function
from dpgp_gpflow.streaming.solver import StreamedQuery

from test_streaming import _model  # noqa: E402


def _measured(model, request, accountant, **kwargs):
    """cloak_function as release_function runs it: one measurement of the model's sensitivity path."""
    path = sensitivity_path(model)
    return measure(Measurement(request, path.relation(), lambda reservation: cloak_function(
        model, request, reservation, **kwargs), path=path), accountant)


def test_cloak_function_commits_one_event_per_release_into_the_callers_reservation():
    model = _model(DPSGPR, 400, 8)
    request = release_request(0.5, 1e-4, seed=5)
    with dp.PrivacyAccountant(epsilon=2.0, delta=1e-2) as acc:
        with reserve(acc, [request.event(), request.event()]) as reservation:
            first = _measured(model, request, reservation, chunk_size=150)
            assert acc.spent[0] == pytest.approx(0.5)  # committed after its draw, the second still held
            second = _measured(model, request._replace(seed=6), reservation, chunk_size=150)
        assert acc.spent[0] == pytest.approx(1.0) and len(acc.ledger) == 2
    # the same release as the public entry point (which validates, reserves once and calls it)
    again = streaming.release_function(model, epsilon=0.5, delta=1e-4, seed=5, chunk_size=150)
    np.testing.assert_array_equal(again.release.mean, first.release.mean)
    np.testing.assert_array_equal(again.release.noise_factor, first.release.noise_factor)
    assert not np.array_equal(second.release.mean, first.release.mean)


def test_cloak_function_refuses_without_an_objective_and_commits_nothing():
    model = _model(DPSGPR, 200, 6)
    request = release_request(0.5, 1e-4, objective=None)
    with dp.PrivacyAccountant(epsilon=2.0, delta=1e-2) as acc:
        with pytest.raises(ValueError, match="objective"):
            _measured(model, request, acc)
        assert acc.spent[0] == 0.0


def test_cloak_function_outside_measure_is_refused_before_any_pass_over_the_chunks(monkeypatch):
    """Called directly into a caller's (package-issued, matching) reservation, the streamed release skipped the
    leak guard, the file-pieces check and the stated path (found by review: a model fitted by gpflow's Scipy on its
    outputs was published): every draw runs inside measure, so it is refused (RuntimeError) before the chunks are
    read; nothing drawn or charged, the reservation still holds its event."""
    module = importlib.import_module("dpgp_gpflow.streaming.release")
    passes = []
    monkeypatch.setattr(module, "streamed_map", lambda *a, **k: passes.append(1))
    model = _model(DPSGPR, 60, 4)
    request = release_request(0.5, 1e-4, seed=5)
    with dp.PrivacyAccountant(epsilon=2.0, delta=1e-2) as acc:
        with reserve(acc, [request.event()]) as reservation:
            with pytest.raises(RuntimeError, match="only inside"):
                cloak_function(model, request, reservation)
            assert reservation.uncommitted == 1 and passes == []
        assert acc.spent == (0.0, 0.0) and acc.ledger == ()
    assert "cloak_function" not in streaming.__all__ + module.__all__  # internal: composing is release_function's
    assert not hasattr(streaming, "cloak_function")  # nor reachable as dp.streaming.cloak_function


def _publish_spy(monkeypatch):
    """Record the keyword arguments of every call of publish_cloaking by the streamed release."""
    module = importlib.import_module("dpgp_gpflow.streaming.release")
    original, calls = module.publish_cloaking, []

    def spy(**kwargs):
        calls.append(kwargs)
        return original(**kwargs)

    monkeypatch.setattr(module, "publish_cloaking", spy)
    return calls


def test_the_streamed_release_goes_through_publish_cloaking_with_the_shift_of_its_whole_whitening(monkeypatch):
    """The streamed release publishes through publish_cloaking (the one check-draw-spend step) with a query
    that never forms W; the shift it checks and the query it noises are those of W held whole (NumPy:
    W = F_u^{-1} basis^T C / (s Delta), y_c the clipped outputs, mu = S (d max ||w_i|| + 2 gamma_n b
    sum ||w_i||) + sqrt(r) 2^G), and the release re-colours with the factor it was handed."""
    model = _model(DPSGPR, 400, 8)
    calls = _publish_spy(monkeypatch)
    released = streaming.release_function(model, epsilon=0.5, delta=1e-4, seed=5, chunk_size=150)
    assert len(calls) == 1
    kw = calls[0]
    query = kw["whitening"]
    assert isinstance(query, StreamedQuery) and kw["y_centred"] is None
    X, Y = (np.asarray(a, dtype=np.float64) for a in model.data)
    C = query.cmap.terms.columns(X, query.cmap.factors).numpy()  # [m, n]: the released map whole
    W = np.linalg.solve(query.factor_u, query.basis.T @ C) / query.divisor  # [r, n]
    y_c = np.clip(Y[:, 0], -2.0, 2.0)  # the prior mean is the bounds' midpoint, 0
    s, d, b = kw["multiplier"], float(model.data_sensitivity), kw["output_bound"]
    assert b == pytest.approx(2.0)
    mu = query.shift(d, b, s)
    np.testing.assert_allclose(query.values(), W @ y_c, rtol=1e-9, atol=1e-12 * np.abs(W @ y_c).max())
    norms = np.linalg.norm(W, axis=0)
    unit = np.finfo(np.float64).eps / 2
    gamma = W.shape[1] * unit / (1 - W.shape[1] * unit)
    reference = SENSITIVITY_SAFETY * (d * norms.max() + 2 * gamma * b * norms.sum()) \
        + np.sqrt(W.shape[0]) * 2.0**GRID_EXPONENT
    assert mu == pytest.approx(reference, rel=1e-9)
    assert 0.0 < mu * DISCRETE_GAUSSIAN_FACTOR <= 1.0 / s  # what publish_cloaking checked before the draw
    np.testing.assert_array_equal(released.release.noise_factor, np.asarray(kw["noise_factor"]))


def test_a_streamed_query_with_too_large_a_shift_is_refused_by_publish_cloaking_and_charges_nothing(monkeypatch):
    """A whitened query scaled up twofold (a plan for another sensitivity) fails publish_cloaking's shift
    check: FloatingPointError before any draw, nothing charged."""
    module = importlib.import_module("dpgp_gpflow.streaming.release")

    class Doubled(StreamedQuery):
        def __init__(self, cmap, basis, factor_u, divisor):
            super().__init__(cmap, basis, factor_u, divisor / 2.0)

    monkeypatch.setattr(module, "StreamedQuery", Doubled)
    # registered as the package's own (a query class from outside is refused by type before its shift is read)
    monkeypatch.setattr(cloaking_module, "_TRUSTED_QUERIES", cloaking_module._TRUSTED_QUERIES | {Doubled})
    draws = []
    monkeypatch.setattr(cloaking_module, "draw_and_spend", lambda *a, **k: draws.append(1))
    model = _model(DPSGPR, 200, 6)
    with dp.PrivacyAccountant(epsilon=2.0, delta=1e-2) as acc:
        with pytest.raises(FloatingPointError, match="exceeds"):
            streaming.release_function(model, epsilon=0.5, delta=1e-4, seed=5, accountant=acc, chunk_size=80)
        assert acc.spent == (0.0, 0.0) and len(acc.ledger) == 0 and draws == []


@pytest.mark.parametrize("factor", [0.5, 2.0])
def test_a_shift_checked_with_another_bound_than_the_querys_clipping_is_refused_before_any_output_is_read(
        monkeypatch, factor):
    """The streamed query clips and centres the outputs within its terms' bound (2 for bounds (-2, 2) and mean
    0); a shift checked with any other bound (smaller: it would not bound them) is refused before the pass over
    the outputs: ValueError, nothing drawn, nothing charged."""
    module = importlib.import_module("dpgp_gpflow.streaming.release")
    original, queries = module.publish_cloaking, []

    def other_bound(**kwargs):
        queries.append(kwargs["whitening"])
        return original(**{**kwargs, "output_bound": factor * kwargs["output_bound"]})

    monkeypatch.setattr(module, "publish_cloaking", other_bound)
    draws = []
    monkeypatch.setattr(cloaking_module, "draw_and_spend", lambda *a, **k: draws.append(1))
    model = _model(DPSGPR, 200, 6)
    with dp.PrivacyAccountant(epsilon=2.0, delta=1e-2) as acc:
        with pytest.raises(ValueError, match="output_bound"):
            streaming.release_function(model, epsilon=0.5, delta=1e-4, seed=5, accountant=acc, chunk_size=80)
        assert acc.spent == (0.0, 0.0) and len(acc.ledger) == 0 and draws == []
    (query,) = queries
    assert query.output_bound == pytest.approx(2.0)
    with pytest.raises(RuntimeError, match="checked before"):  # the outputs were never read
        query.values()
