"""The column space's singular pairs (noise_planning.space.singular_pairs): eagerly, a Gram matrix larger than
LAPACK_EIGH_MIN goes to LAPACK's eigensolver (issue 35 item 6: TensorFlow's took 0.52 s CPU at 1,000 x 1,000,
LAPACK's 0.23 s), with the same rule and rounding bound as in a graph. Reference: NumPy's SVD."""

import numpy as np
import pytest
import tensorflow as tf

from dpgp_gpflow.noise_planning import space


@pytest.mark.parametrize("shape", [(300, 280), (280, 300)])  # C C^T and C^T C: each side above 256
def test_eager_large_gram_pairs_come_from_lapack_and_match_the_svd(monkeypatch, shape):
    rng = np.random.default_rng(0)
    k, n = shape
    C = (rng.standard_normal((k, 40)) * np.exp(-0.3 * np.arange(40))) @ rng.standard_normal((40, n))  # rank 40
    calls = []
    eigh = np.linalg.eigh
    monkeypatch.setattr(np.linalg, "eigh", lambda *a, **kw: calls.append(1) or eigh(*a, **kw))
    s, u, outside = (x.numpy() for x in space.singular_pairs(tf.constant(C), 1e-6))
    assert calls == [1]
    U, s_ref, _ = np.linalg.svd(C, full_matrices=False)
    r = int(np.sum(s_ref > 1e-6 * s_ref[0]))
    assert r == 40
    rounding = np.sqrt((k + n) * np.finfo(float).eps) * np.linalg.norm(C)  # Weyl: the Gram matrix's rounding
    np.testing.assert_allclose(s[:r], s_ref[:r], rtol=0, atol=rounding)
    np.testing.assert_allclose(np.linalg.svd(u[:, :r].T @ U[:, :r], compute_uv=False), 1.0, atol=1e-8)  # same space
    # the discarded part is within the rounding bound: ||C - u u^T C||_2 <= s_{r+1} + outside
    residual = np.linalg.norm(C - u[:, :r] @ (u[:, :r].T @ C), 2)
    assert residual <= s[r] + outside
    graph = tf.function(lambda x: space.singular_pairs(x, 1e-6))(tf.constant(C))  # TensorFlow's solver
    assert calls == [1]
    np.testing.assert_allclose(graph[0].numpy()[:r], s_ref[:r], rtol=0, atol=rounding)
