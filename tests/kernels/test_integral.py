"""IntegralSE against independent numerical quadrature (scipy / Gauss-Legendre in NumPy)."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from numpy.testing import assert_allclose
from scipy import integrate

from dpgp_gpflow.kernels import IntegralSE, predict_f_at_points

RTOL = 1e-7


def eq(u, v, ell, variance=1.0):
    """NumPy EQ kernel between two points (GPflow convention)."""
    u, v, ell = np.atleast_1d(u), np.atleast_1d(v), np.atleast_1d(ell)
    return variance * np.exp(-0.5 * np.sum(((u - v) / ell) ** 2))


def dblquad_1d(a, b, c, d, ell, variance=1.0):
    """int_a^b int_c^d k(u, v) dv du by scipy's adaptive quadrature."""
    val, _ = integrate.dblquad(
        lambda v, u: variance * np.exp(-0.5 * ((u - v) / ell) ** 2),
        a,
        b,
        c,
        d,
        epsabs=0.0,
        epsrel=1e-12,
    )
    return val


def gauss_legendre(lo, hi, n=40):
    """Nodes and weights of an n-point Gauss-Legendre rule on [lo, hi]."""
    x, w = np.polynomial.legendre.leggauss(n)
    return 0.5 * (hi - lo) * x + 0.5 * (hi + lo), 0.5 * (hi - lo) * w


def gl_box_box(box1, box2, ell, variance, n=40):
    """int_box1 int_box2 k by tensor Gauss-Legendre over all 2D coordinates (NumPy)."""
    D = len(ell)
    grids, weights = [], []
    for box in (box1, box2):
        for d in range(D):
            x, w = gauss_legendre(box[d], box[D + d], n)
            grids.append(x)
            weights.append(w)
    mesh = np.meshgrid(*grids, indexing="ij", sparse=True)
    wmesh = np.meshgrid(*weights, indexing="ij", sparse=True)
    sq = sum(((mesh[d] - mesh[D + d]) / ell[d]) ** 2 for d in range(D))
    w = 1.0
    for wm in wmesh:
        w = w * wm
    return variance * np.sum(w * np.exp(-0.5 * sq))


# 1-D box pairs: overlapping, nested, identical, disjoint, far apart, mixed and tiny widths on
# both sides of the Taylor threshold (1e-2 lengthscales in half-width).
PAIRS_1D = [
    ((0.0, 1.0), (0.5, 2.0)),
    ((-1.0, 3.0), (0.0, 0.5)),
    ((0.2, 1.7), (0.2, 1.7)),
    ((0.0, 0.4), (1.0, 2.5)),
    ((0.0, 1.0), (4.0, 5.5)),
    ((-2.0, 2.0), (0.3, 0.3 + 2 * 0.0095 * 0.8)),
    ((-2.0, 2.0), (0.3, 0.3 + 2 * 0.0105 * 0.8)),
    ((0.1, 0.1 + 0.01), (0.7, 0.7 + 0.02)),
    ((0.1, 0.1 + 0.03), (0.15, 0.15 + 0.033)),
    ((1.0, 1.0 + 1e-3), (-0.5, 2.0)),
]


@pytest.mark.parametrize("box1, box2", PAIRS_1D)
def test_K_1d_matches_dblquad(box1, box2):
    ell, variance = 0.8, 1.7
    k = IntegralSE(lengthscales=ell, variance=variance)
    X = np.array([[box1[0], box1[1]], [box2[0], box2[1]]])
    K = k(X).numpy()
    ref12 = dblquad_1d(*box1, *box2, ell, variance)
    assert_allclose(K[0, 1], ref12, rtol=RTOL)
    assert_allclose(K[1, 0], ref12, rtol=RTOL)
    assert_allclose(K[0, 0], dblquad_1d(*box1, *box1, ell, variance), rtol=RTOL)
    assert_allclose(K[1, 1], dblquad_1d(*box2, *box2, ell, variance), rtol=RTOL)
    assert_allclose(k.K_diag(X).numpy(), np.diag(K), rtol=1e-12)


def test_K_2d_ard_matches_tensor_quadrature():
    ell, variance = np.array([0.6, 1.4]), 2.3
    k = IntegralSE(lengthscales=ell, variance=variance)
    boxes = np.array(
        [
            [0.0, 0.0, 1.0, 0.5],
            [0.5, -0.5, 1.2, 1.0],
            [2.0, 1.0, 2.3, 2.5],
            [-1.0, 0.2, 0.0, 0.25],
        ]
    )
    K = k(boxes).numpy()
    ref = np.array([[gl_box_box(b1, b2, ell, variance) for b2 in boxes] for b1 in boxes])
    assert_allclose(K, ref, rtol=RTOL)
    assert_allclose(k.K_diag(boxes).numpy(), np.diag(ref), rtol=RTOL)
    K12 = k(boxes[:2], boxes[2:]).numpy()
    assert_allclose(K12, ref[:2, 2:], rtol=RTOL)


@pytest.mark.parametrize(
    "box, x",
    [
        ((0.0, 1.0), 0.3),
        ((0.0, 1.0), 4.0),
        ((-3.0, -2.5), 6.0),
        ((0.2, 0.2 + 1e-3), 0.5),
        ((0.0, 0.0317), 0.1),
    ],
)
def test_K_box_point_1d_matches_quad(box, x):
    ell, variance = 0.9, 1.3
    k = IntegralSE(lengthscales=ell, variance=variance)
    got = k.K_box_point(np.array([box]), np.array([[x]])).numpy()[0, 0]
    ref, _ = integrate.quad(lambda u: eq(u, x, ell, variance), *box, epsabs=0.0, epsrel=1e-12)
    assert_allclose(got, ref, rtol=RTOL)


def test_K_box_point_2d_matches_dblquad():
    ell, variance = np.array([0.7, 1.2]), 0.9
    k = IntegralSE(lengthscales=ell, variance=variance)
    boxes = np.array([[0.0, 0.0, 1.0, 0.5], [-1.0, 1.0, 0.5, 3.0]])
    points = np.array([[0.2, 0.1], [2.0, -1.0], [0.0, 2.0]])
    got = k.K_box_point(boxes, points).numpy()
    ref = np.empty((2, 3))
    for i, b in enumerate(boxes):
        for j, p in enumerate(points):
            ref[i, j], _ = integrate.dblquad(
                lambda v, u: eq([u, v], p, ell, variance),
                b[0],
                b[2],
                b[1],
                b[3],
                epsabs=0.0,
                epsrel=1e-12,
            )
    assert_allclose(got, ref, rtol=RTOL)


def random_boxes(rng, n, D, scale=1.0):
    lower = rng.uniform(-3.0, 3.0, size=(n, D))
    widths = rng.uniform(0.05, 1.5, size=(n, D)) * scale
    return np.hstack([lower, lower + widths])


def test_K_symmetric_and_psd():
    rng = np.random.default_rng(0)
    k = IntegralSE(lengthscales=[0.5, 2.0], variance=1.5)
    K = k(random_boxes(rng, 40, 2)).numpy()
    assert_allclose(K, K.T, rtol=0.0, atol=1e-14 * np.abs(K).max())
    eig = np.linalg.eigvalsh(K)
    assert eig.min() >= -1e-10 * eig.max()


def test_tiny_boxes_reduce_to_eq_times_volumes():
    ell, variance = np.array([0.8, 1.5]), 1.9
    k = IntegralSE(lengthscales=ell, variance=variance)
    centres = np.array([[0.0, 0.0], [0.3, -0.7], [1.1, 0.4]])
    widths = np.array([[1e-5, 2e-5], [3e-6, 1e-6], [2e-4, 5e-5]])
    boxes = np.hstack([centres - widths / 2, centres + widths / 2])
    vol = widths.prod(axis=1)
    ref = np.array([[eq(c1, c2, ell, variance) for c2 in centres] for c1 in centres])
    ref = ref * vol[:, None] * vol[None, :]
    assert_allclose(k(boxes).numpy(), ref, rtol=1e-7)
    points = np.array([[0.1, 0.2], [-1.0, 1.0]])
    ref_bp = np.array([[eq(c, p, ell, variance) for p in points] for c in centres]) * vol[:, None]
    assert_allclose(k.K_box_point(boxes, points).numpy(), ref_bp, rtol=1e-7)


def test_degenerate_boxes_give_exact_zeros():
    k = IntegralSE(lengthscales=0.7, variance=1.0)
    boxes = np.array([[0.0, 0.5, 1.0, 0.5], [0.0, 0.0, 1.0, 1.0]])  # first: zero height
    K = k(boxes).numpy()
    assert np.all(K[0] == 0.0) and np.all(K[:, 0] == 0.0)
    assert K[1, 1] > 0.0
    assert np.all(k.K_box_point(boxes[:1], np.array([[0.5, 0.5]])).numpy() == 0.0)


def test_reversed_box_is_oriented_integral():
    k = IntegralSE(lengthscales=1.1, variance=1.0)
    fwd = k(np.array([[0.0, 1.0]]), np.array([[0.5, 2.0]])).numpy()
    rev = k(np.array([[1.0, 0.0]]), np.array([[0.5, 2.0]])).numpy()
    assert fwd[0, 0] > 0.0
    assert_allclose(rev, -fwd, rtol=1e-12)


def test_invalid_inputs_raise():
    k = IntegralSE(lengthscales=[1.0, 2.0])
    with pytest.raises(ValueError, match="2D columns"):
        k.K(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="lengthscales"):
        k.K(np.zeros((3, 6)))
    with pytest.raises(ValueError, match="columns"):
        k.K_box_point(np.zeros((3, 4)), np.zeros((2, 3)))


def gl_posterior_reference(boxes, Y, points, ell, variance, noise, n=60):
    """Posterior of f at points from bin integrals, all matrices by NumPy Gauss-Legendre (1-D)."""
    nodes = [gauss_legendre(b[0], b[1], n) for b in boxes]

    def kf(u, v):
        return variance * np.exp(-0.5 * ((u[:, None] - v[None, :]) / ell) ** 2)

    N = len(boxes)
    Kbb = np.array([[w1 @ kf(x1, x2) @ w2 for (x2, w2) in nodes] for (x1, w1) in nodes])
    Kbp = np.array([w1 @ kf(x1, points) for (x1, w1) in nodes])  # [N, P]
    A = Kbb + noise * np.eye(N)
    mean = Kbp.T @ np.linalg.solve(A, Y)
    cov = kf(points, points) - Kbp.T @ np.linalg.solve(A, Kbp)
    return mean, cov


def test_gpr_on_boxes_matches_reference_and_is_finite():
    rng = np.random.default_rng(1)
    edges = np.linspace(0.0, 10.0, 11)
    boxes = np.stack([edges[:-1], edges[1:]], axis=1)  # [10, 2]
    f_integrals = np.sin(edges[1:]) - np.sin(edges[:-1])  # integrals of cos over the bins
    Y = (f_integrals + 0.05 * rng.standard_normal(10))[:, None]
    ell, variance, noise = 1.5, 1.0, 0.01
    model = gpflow.models.GPR(
        (boxes, Y), kernel=IntegralSE(lengthscales=ell, variance=variance), noise_variance=noise
    )
    lml = model.log_marginal_likelihood()
    assert np.isfinite(lml.numpy())
    with tf.GradientTape() as tape:
        loss = model.training_loss()
    grads = tape.gradient(loss, model.trainable_variables)
    assert all(np.all(np.isfinite(g.numpy())) for g in grads)
    compiled = tf.function(model.training_loss, autograph=False)  # graph mode, cheap to trace
    assert compiled().numpy() == pytest.approx(loss.numpy(), rel=1e-12)

    points = np.linspace(-1.0, 11.0, 25)[:, None]
    mean, var = predict_f_at_points(model, points)
    mean_full, cov = predict_f_at_points(model, points, full_cov=True)
    ref_mean, ref_cov = gl_posterior_reference(boxes, Y, points[:, 0], ell, variance, noise)
    assert np.all(np.isfinite(mean.numpy())) and np.all(np.isfinite(var.numpy()))
    assert_allclose(mean.numpy(), ref_mean, rtol=1e-7, atol=1e-9)
    assert_allclose(var.numpy()[:, 0], np.diag(ref_cov), rtol=1e-6, atol=1e-9)
    assert_allclose(cov.numpy()[0], ref_cov, rtol=1e-6, atol=1e-9)
    assert_allclose(mean_full.numpy(), mean.numpy(), rtol=1e-12)
    assert np.all(var.numpy() > 0.0) and np.all(var.numpy() <= variance)
    # The data are informative: inside the binned range the posterior tracks cos(x).
    inside = (points[:, 0] > 0.5) & (points[:, 0] < 9.5)
    assert np.max(np.abs(mean.numpy()[inside, 0] - np.cos(points[inside, 0]))) < 0.3


def test_predict_f_at_points_rejects_unsupported_models():
    boxes = np.array([[0.0, 1.0], [1.0, 2.0]])
    Y = np.array([[0.5], [0.2]])
    with pytest.raises(TypeError, match="IntegralSE"):
        predict_f_at_points(
            gpflow.models.GPR((np.array([[0.5], [1.5]]), Y), gpflow.kernels.SquaredExponential()),
            np.zeros((2, 1)),
        )
    model = gpflow.models.GPR(
        (boxes, Y), IntegralSE(), mean_function=gpflow.mean_functions.Constant(1.0)
    )
    with pytest.raises(ValueError, match="Zero mean"):
        predict_f_at_points(model, np.zeros((2, 1)))
    with pytest.raises(TypeError, match="GPR"):
        predict_f_at_points("not a model", np.zeros((2, 1)))


@pytest.mark.parametrize("half_width", [0.0095, 0.0105])
def test_taylor_branch_is_accurate_at_threshold(half_width):
    """Half-widths just below (Taylor) and above (erf) 1e-2 lengthscales agree with quadrature.

    The tolerance is tight enough to see the fourth-order Taylor terms (~2e-10 relative here).
    """
    ell = 1.0
    k = IntegralSE(lengthscales=ell, variance=1.0)
    c = 0.4
    small = (c - half_width * ell, c + half_width * ell)
    smaller = (c - 0.8 * half_width * ell, c + 0.8 * half_width * ell)
    big = (c - 0.85, c + 0.85)
    bp = k.K_box_point(np.array([small]), np.array([[c]])).numpy()[0, 0]
    ref_bp, _ = integrate.quad(lambda u: eq(u, c, ell), *small, epsabs=0.0, epsrel=1e-13)
    assert_allclose(bp, ref_bp, rtol=2e-12)
    K = k(np.array([small, smaller, big])).numpy()
    assert_allclose(K[0, 1], dblquad_1d(*small, *smaller, ell), rtol=2e-12)
    assert_allclose(K[0, 2], dblquad_1d(*small, *big, ell), rtol=2e-12)
