"""The working set's column pivoting stops at a floor (issue 35 item 6): the spread of violators uses only
the picks whose residual is at least ``SPREAD_RESIDUAL``, so pivoting stops after the first pick below it.
References: LAPACK's column-pivoted QR (scipy), never the code under test."""

import numpy as np
import pytest
import scipy.linalg
import tensorflow as tf

from dpgp_gpflow.noise_planning import working_set


def _columns(r: int = 12, n: int = 300, seed: int = 4) -> np.ndarray:
    """Smooth columns of decaying directions (near-copies), as whitened violators of a smooth kernel are."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0.0, 10.0, n))
    return np.stack([np.cos(j * x / 3.0) * np.exp(-0.4 * j) for j in range(r)]) + 1e-4 * rng.standard_normal((r, n))


@pytest.mark.parametrize("floor", [0.3, 0.05])
def test_pivoting_stops_after_the_first_pick_below_the_floor(floor):
    V = _columns()
    _, R, order = scipy.linalg.qr(V, pivoting=True, mode="economic")
    residuals = np.abs(np.diag(R))
    last = int(np.argmax(residuals < floor))  # the first pick below the floor (LAPACK's)
    assert 0 < last < 10  # the problem reaches below the floor before count picks
    picks, sizes = (a.numpy() for a in working_set._pivot_columns(tf.constant(V), tf.constant(10), floor))
    np.testing.assert_array_equal(picks[:last + 1], order[:last + 1])
    np.testing.assert_allclose(sizes[:last + 1], residuals[:last + 1], rtol=1e-8)
    assert np.all(sizes[last + 1:] == 0.0)  # not picked: the loop stopped


def test_spread_violators_are_the_pivots_above_the_floor():
    V = 3.0 * _columns(seed=7)
    _, R, order = scipy.linalg.qr(V, pivoting=True, mode="economic")
    count = 10
    expected = np.sort(order[:count][np.abs(np.diag(R))[:count] >= working_set.SPREAD_RESIDUAL])
    assert 0 < expected.size < count
    np.testing.assert_array_equal(working_set.spread_violators(V, count).numpy(), expected)


@pytest.mark.parametrize("floor", [0.3, -np.inf])
def test_compiled_pivoting_with_a_floor_tensor_is_lapacks(floor):
    """The one compiled pivoting body the graphs call (a floor tensor; -inf: none) picks as LAPACK does."""
    V = _columns()
    _, R, order = scipy.linalg.qr(V, pivoting=True, mode="economic")
    residuals = np.abs(np.diag(R))
    last = int(np.argmax(residuals < floor)) if floor > 0 else 9  # the last pick made
    picks, sizes = (a.numpy() for a in working_set._floored_pivots(tf.constant(V), tf.constant(10),
                                                                    tf.constant(floor, tf.float64)))
    np.testing.assert_array_equal(picks[:last + 1], order[:last + 1])
    np.testing.assert_allclose(sizes[:last + 1], residuals[:last + 1], rtol=1e-8)
    assert np.all(sizes[last + 1:] == 0.0)


def _calls(fn) -> dict:
    """``{called function: its _noinline attribute}`` of every function call in ``fn``'s graph (nested
    branches and loop bodies included)."""
    graph = fn.get_concrete_function().graph.as_graph_def()
    nodes = list(graph.node) + [node for f in graph.library.function for node in f.node_def]
    names = {node.attr["f"].func.name for node in nodes if node.op in ("PartitionedCall", "StatefulPartitionedCall")}
    return {f.signature.name: f.attr["_noinline"].b for f in graph.library.function if f.signature.name in names}


def test_graphs_call_one_pivoting_body_kept_as_a_call():
    """A fresh process's first release traces and instantiates the pivoting once (cold start): the screened
    cold start and the spread of violators call the same compiled function, not inlined (a copy each before)."""
    start, spread = _calls(working_set._screened_start), _calls(working_set._spread)
    assert start and start == spread and all(start.values())


@pytest.mark.parametrize("where", ["eager", "graph"])
def test_pivoting_refuses_vectors_that_are_not_finite(where):
    """A NaN (or an infinity) in the vectors raises, eager or in the one compiled body every graph calls (floor -inf,
    as _pivots_of passes it): it ordered the picks silently before (a NaN column never picked; all NaN: three NaN
    sizes eager, one and then zeros in a graph)."""
    V = _columns(r=3, n=8)
    for bad in (np.nan, np.inf):
        W = V.copy()
        W[1, 2] = bad
        run = {"eager": lambda: working_set._pivots_of(tf.constant(W), tf.constant(3)),
               "graph": lambda: working_set._floored_pivots(tf.constant(W), tf.constant(3),
                                                            tf.constant(-np.inf, tf.float64))}
        with pytest.raises(tf.errors.InvalidArgumentError, match="column pivoting needs finite vectors"):
            run[where]()
