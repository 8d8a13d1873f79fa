"""GridIntegralSE (table-driven integral EQ kernel on the bins of a grid) against IntegralSE."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from numpy.testing import assert_allclose

from dpgp_gpflow.kernels import GridIntegralSE, IntegralSE, grid_edges, interval_interval, interval_point

EDGES_2D = (np.array([0.0, 1.0, 2.5, 4.0]), np.array([-1.0, 0.0, 0.5, 2.0, 3.0]))


class Grid:
    """Anything with an ``edges`` attribute is a grid (e.g. ``dpgp_gpflow.baselines.Bins``)."""

    def __init__(self, edges):
        self.edges = edges


def grid_boxes(edges):
    """``[B, 2D]`` boxes of every bin, C order (first axis slowest)."""
    lower = np.stack(np.meshgrid(*[e[:-1] for e in edges], indexing="ij"), -1).reshape(-1, len(edges))
    upper = np.stack(np.meshgrid(*[e[1:] for e in edges], indexing="ij"), -1).reshape(-1, len(edges))
    return np.hstack([lower, upper])


@pytest.mark.parametrize("lengthscales", [0.7, [0.6, 1.7]])
@pytest.mark.parametrize("grid", [EDGES_2D, Grid(EDGES_2D)], ids=["edges", "object"])
def test_grid_integral_kernel_equals_integral_se(lengthscales, grid):
    rng = np.random.default_rng(5)
    boxes = grid_boxes(EDGES_2D)
    boxes = boxes[rng.permutation(boxes.shape[0])]  # any order, repeats allowed
    boxes = np.vstack([boxes, boxes[:3]])
    points = rng.uniform(-2.0, 5.0, (7, 2))
    fast, ref = GridIntegralSE(grid, lengthscales, 2.5), IntegralSE(lengthscales, 2.5)
    scale = np.max(np.abs(ref.K(boxes).numpy()))
    assert_allclose(fast.K(boxes).numpy(), ref.K(boxes).numpy(), rtol=1e-12, atol=1e-14 * scale)
    assert_allclose(fast.K(boxes, boxes[:4]).numpy(), ref.K(boxes, boxes[:4]).numpy(), rtol=1e-12, atol=1e-14 * scale)
    assert_allclose(fast.K_diag(boxes).numpy(), ref.K_diag(boxes).numpy(), rtol=1e-12)
    assert_allclose(fast.K_box_point(boxes, points).numpy(), ref.K_box_point(boxes, points).numpy(),
                    rtol=1e-12, atol=1e-14 * scale)
    off_grid = boxes.copy()
    off_grid[0, 0] += 0.1  # not a bin: falls back to IntegralSE
    assert_allclose(fast.K(off_grid).numpy(), ref.K(off_grid).numpy(), rtol=1e-12, atol=1e-14 * scale)
    assert_allclose(fast.K_diag(off_grid).numpy(), ref.K_diag(off_grid).numpy(), rtol=1e-12)


def test_grid_integral_kernel_gradients_match():
    """Hyperparameters may be trained on a release (post-processing): gradients must be right."""
    boxes = tf.constant(grid_boxes(EDGES_2D))
    grads = []
    for kern in (GridIntegralSE(EDGES_2D, [0.6, 1.7], 2.5), IntegralSE([0.6, 1.7], 2.5)):
        with tf.GradientTape() as tape:
            value = tf.reduce_sum(kern.K(boxes) ** 2) + tf.reduce_sum(kern.K_box_point(boxes, boxes[:, :2]))
        grads.append(tape.gradient(value, kern.trainable_variables))
    for g_fast, g_ref in zip(*grads):
        assert_allclose(g_fast.numpy(), g_ref.numpy(), rtol=1e-10)


def test_grid_edges_validation():
    assert [e.tolist() for e in grid_edges([0.0, 1.0, 3.0])] == [[0.0, 1.0, 3.0]]  # one axis, flat
    assert len(grid_edges(Grid(EDGES_2D))) == 2
    with pytest.raises(ValueError, match="increasing"):
        grid_edges([np.array([0.0, 1.0, 1.0])])
    with pytest.raises(ValueError, match="finite"):
        grid_edges([np.array([0.0, np.inf])])
    with pytest.raises(ValueError, match="at least 2"):
        grid_edges([np.array([0.0])])
    with pytest.raises(TypeError):
        grid_edges(3.0)
    with pytest.raises(TypeError):
        GridIntegralSE(object())
    with pytest.raises(ValueError, match="lengthscales"):
        GridIntegralSE(EDGES_2D, lengthscales=[1.0, 1.0, 1.0])


def test_interval_functions_are_the_one_dimensional_factors():
    """The public 1-D closed forms multiply to IntegralSE (variance 1) along the axes."""
    boxes = grid_boxes(EDGES_2D)[:5]
    m, h = 0.5 * (boxes[:, :2] + boxes[:, 2:]), 0.5 * (boxes[:, 2:] - boxes[:, :2])
    ell = tf.constant([0.8, 1.3], dtype=tf.float64)
    ii = interval_interval(m[:, None, :] - m[None, :, :], h[:, None, :], h[None, :, :], ell)
    assert_allclose(tf.reduce_prod(ii, -1).numpy(), IntegralSE([0.8, 1.3], 1.0).K(boxes).numpy(), rtol=1e-13)
    x = np.array([[0.3, 0.1], [2.0, -0.5]])
    ip = interval_point(m[:, None, :] - x[None, :, :], h[:, None, :], ell)
    assert_allclose(tf.reduce_prod(ip, -1).numpy(), IntegralSE([0.8, 1.3], 1.0).K_box_point(boxes, x).numpy(),
                    rtol=1e-13)
