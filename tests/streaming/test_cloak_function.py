"""streaming.cloak_function: the streamed release under a caller's validated request and held reservation,
committing one event into it (release_function is validation + one reservation + this)."""

from __future__ import annotations

import numpy as np
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow import streaming
from dpgp_gpflow.accounting import reserve
from dpgp_gpflow.mechanisms import release_request
from dpgp_gpflow.models import DPSGPR

from test_streaming import _model  # noqa: E402


def test_cloak_function_commits_one_event_per_release_into_the_callers_reservation():
    model = _model(DPSGPR, 400, 8)
    request = release_request(0.5, 1e-4, seed=5)
    with dp.PrivacyAccountant(epsilon=2.0, delta=1e-2) as acc:
        with reserve(acc, [request.event(), request.event()]) as reservation:
            first = streaming.cloak_function(model, request, reservation, chunk_size=150)
            assert acc.spent[0] == pytest.approx(0.5)  # committed after its draw, the second still held
            second = streaming.cloak_function(model, request._replace(seed=6), reservation, chunk_size=150)
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
        with reserve(acc, [request.event()]) as reservation:
            with pytest.raises(ValueError, match="objective"):
                streaming.cloak_function(model, request, reservation)
        assert acc.spent[0] == 0.0
