"""The Lagrange dual of the noise optimisation and its restricted solve (docs/mechanisms.md#noise-optimiser).

For sensitivity vectors ``v_i`` (the columns of an r x m matrix) the noise covariance ``M`` minimising
``log det M`` ("entropy") or ``tr M`` ("mse") s.t. ``v_i^T M^{-1} v_i <= 1`` is found through the dual
over one weight per column, ``g(l) = sum(l) - log det S`` or ``sum(l) - 2 tr S^{1/2}`` with
``S = V diag(l) V^T``: its gradient is ``1 - q`` in closed form (``q_i`` the leverages), and the
duality gap certifies any weights (:func:`duality_gap`). :func:`barrier_newton` is the log-barrier
Newton method on the columns given; the working-set loop (:mod:`.working_set`) decides which columns.

Pure TensorFlow, graph-safe, float64. Privacy assumption: none; everything here is a function of
the public sensitivity vectors.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from ..validation import OBJECTIVES, validate_objective

#: The barrier weight is decreased once the squared Newton decrement is below this (loosely centred) ...
CENTRED_DECREMENT = 1e-6
#: ... by this factor (or to a tenth of the duality gap per point, if smaller).
MU_FACTOR = 0.05
MU_GAP_DIV = 10.0
#: The first barrier weight is the duality gap per point divided by this: the (loosely centred)
#: path is joined close to the optimum, which matters most on warm restarts of the working-set
#: rounds (a large first weight pushes warm weights away from the optimum before coming back).
MU_START_DIV = 100.0
#: Primal-dual rounds set the barrier parameter to this fraction of the mean complementarity ``l_i s_i``
#: after every step (no centring steps).
PRIMAL_DUAL_SIGMA = 0.1
#: Relative residual at which conjugate gradients stop (inexact Newton: the line search and the
#: duality-gap stop make the step's accuracy a matter of speed only, never of the certificate).
CG_RTOL = 1e-2
#: The mse preconditioner is factorised on the points whose barrier curvature is below this times their
#: own dual curvature; the rest (far from the support, held up by the barrier) get its diagonal.
PRECONDITIONER_BLOCK = 1.0


MATRIX_SPEC = tf.TensorSpec([None, None], tf.float64)
VECTOR_SPEC = tf.TensorSpec([None], tf.float64)
REAL_SPEC = tf.TensorSpec([], tf.float64)
COUNT_SPEC = tf.TensorSpec([], tf.int32)


#: ``tf.function`` attributes of a body that other compiled graphs call (possibly from several places):
#: TensorFlow keeps each call a call of the one function instead of inlining a copy at every call site
#: when a graph is first run, so the body is instantiated and optimised (Grappler) once per process.
#: The same ops run either way.
SHARED_BODY = {"_noinline": True}


def compile_per_objective(impl, input_signature, attributes: Optional[dict] = None) -> dict:
    """``{objective: tf.function(impl(*args, objective=objective))}`` for every objective, each with the
    given ``input_signature`` (dimensions left unknown: any shapes, no retracing) and ``tf.function``
    ``attributes`` (e.g. :data:`SHARED_BODY`)."""

    def compiled(objective: str):
        return tf.function(lambda *args: impl(*args, objective=objective), autograph=False,
                           input_signature=input_signature, experimental_attributes=attributes)

    return {objective: compiled(objective) for objective in OBJECTIVES}


def _weighted_gram(vectors: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
    """``S = vectors diag(weights) vectors^T`` ([r, r], symmetrised)."""
    S = tf.linalg.matmul(vectors * weights[None, :], vectors, transpose_b=True)
    return 0.5 * (S + tf.transpose(S))


def dual_terms(vectors: tf.Tensor, weights: tf.Tensor, objective: str, S: Optional[tf.Tensor] = None):
    """Eigen-decomposition of ``S = vectors diag(weights) vectors^T`` and the leverages ``q``; ``S``
    may be given (formed from the weighted columns alone, when the others carry no weight)."""
    if S is None:
        S = _weighted_gram(vectors, weights)
    w, V = tf.linalg.eigh(S)  # w: [r], V: [r, r]
    w = tf.maximum(w, tf.reduce_max(w) * 1e-300 + 1e-300)
    P = tf.linalg.matmul(V, vectors, transpose_a=True)  # [r, n]
    q = tf.reduce_sum(P * P * inverse_scale(w, objective)[:, None], axis=0)  # [n]
    return w, V, P, q


def inverse_scale(w, objective: str):
    """The eigenvalues of ``M(l)^{-1}`` from those ``w`` of ``S``: ``1 / w`` (entropy) or ``w^{-1/2}`` (mse),
    so that the leverages are ``q_i = sum_a inverse_scale_a (V^T v_i)_a^2``."""
    return 1.0 / w if objective == "entropy" else 1.0 / tf.sqrt(w)


def _trial_terms(vectors: tf.Tensor, weights: tf.Tensor, objective: str):
    """A line search's trial weights: the dual value to minimise (``sum(l) - log det S`` or
    ``sum(l) - 2 tr S^{1/2}``; ``+inf`` where ``S`` is singular or the weights are not finite or
    negative, so line searches back off) and the terms ``(w, V, P, q)`` of :func:`dual_terms` at them,
    from the one eigen-decomposition (so the step that accepts the trial does not decompose ``S``
    again). The terms are meaningful only where the value is finite."""

    def value_and_terms():
        w, V = tf.linalg.eigh(_weighted_gram(vectors, weights))
        bad = tf.reduce_min(w) <= 0.0
        w_safe = tf.where(w > 0.0, w, tf.ones_like(w))
        if objective == "entropy":
            v = tf.reduce_sum(weights) - tf.reduce_sum(tf.math.log(w_safe))
        else:
            v = tf.reduce_sum(weights) - 2.0 * tf.reduce_sum(tf.sqrt(w_safe))
        w = tf.maximum(w, tf.reduce_max(w) * 1e-300 + 1e-300)  # as dual_terms
        P = tf.linalg.matmul(V, vectors, transpose_a=True)  # [r, m]
        q = tf.reduce_sum(P * P * inverse_scale(w, objective)[:, None], axis=0)  # [m]
        return tf.where(bad, tf.constant(np.inf, tf.float64), v), w, V, P, q

    def rejected():
        r = tf.shape(vectors)[0]
        return (tf.constant(np.inf, tf.float64), tf.ones([r], tf.float64), tf.eye(r, dtype=tf.float64),
                tf.zeros_like(vectors), tf.zeros_like(weights))

    finite = tf.logical_and(tf.reduce_all(tf.math.is_finite(weights)), tf.reduce_all(weights >= 0.0))
    return tf.cond(finite, value_and_terms, rejected)


def _value_of_terms(weights: tf.Tensor, w: tf.Tensor, objective: str) -> tf.Tensor:
    """The dual value at interior ``weights`` from the (clamped) eigenvalues ``w`` of ``S``."""
    if objective == "entropy":
        return tf.reduce_sum(weights) - tf.reduce_sum(tf.math.log(w))
    return tf.reduce_sum(weights) - 2.0 * tf.reduce_sum(tf.sqrt(w))


def _dual_state(vectors: tf.Tensor, weights: tf.Tensor, objective: str):
    """One eigen-decomposition of ``S`` giving the dual value, its gradient ``1 - q`` (closed form:
    no backpropagation through the eigen-decomposition) and the terms of :func:`dual_terms`.

    For interior weights (all positive, ``S`` non-singular) only: the Newton iterations keep them there.
    """
    w, V, P, q = dual_terms(vectors, weights, objective)
    return _value_of_terms(weights, w, objective), 1.0 - q, w, V, P, q


def _mse_curvature(w: tf.Tensor) -> tf.Tensor:
    """``E_ab = 1 / (sqrt(w_a) sqrt(w_b) (sqrt(w_a) + sqrt(w_b)))``: divided differences of ``w^{-1/2}``."""
    sig = tf.sqrt(w)
    return 1.0 / (sig[:, None] * sig[None, :] * (sig[:, None] + sig[None, :]))  # [r, r]


def _dual_hessian(w: tf.Tensor, P: tf.Tensor, objective: str) -> tf.Tensor:
    """Hessian of the dual in the weights, from the eigen-decomposition of ``S``.

    entropy: ``Q o Q`` with ``Q = P^T diag(1/w) P``; mse: ``sum_ab E_ab (p_a o p_b)(p_a o p_b)^T`` with
    ``E`` from :func:`_mse_curvature` (cost r^2 m^2: used only for small problems).
    """
    if objective == "entropy":
        Q = tf.linalg.matmul(P * (1.0 / w)[:, None], P, transpose_a=True)
        return Q * Q
    E = _mse_curvature(w)

    def one_row(a):
        pa = P[a]  # [m]
        inner = tf.linalg.matmul(P * E[a][:, None], P, transpose_a=True)  # [m, m]
        return (pa[:, None] * pa[None, :]) * inner

    r = tf.shape(P)[0]
    m = tf.shape(P)[1]
    H0 = tf.zeros(tf.stack([m, m]), dtype=P.dtype)
    _, H = tf.while_loop(
        lambda a, H: a < r,
        lambda a, H: (a + 1, H + one_row(a)),
        (tf.constant(0), H0),
        parallel_iterations=1,
    )
    return H


def _mse_hessian_vector(E: tf.Tensor, P: tf.Tensor, v: tf.Tensor) -> tf.Tensor:
    """Exact mse dual Hessian times ``v`` in O(r^2 m): ``(Hv)_j = p_j^T (E o (P diag(v) P^T)) p_j``, with
    ``E = _mse_curvature(w)`` (formed once per Newton step, not per product)."""
    G = tf.linalg.matmul(P * v[None, :], P, transpose_b=True)  # [r, r]
    return tf.reduce_sum(P * tf.linalg.matmul(E * G, P), axis=0)


def _barrier_curvature(slack, weights):
    """The barrier's curvature ``s / l`` (primal-dual; ``mu / l^2`` where ``s = mu / l``), capped so that
    weights that have all but vanished cannot overflow it."""
    return tf.minimum(slack / weights, 1e150)


def _mse_newton_direction(w, P, gb, barrier):
    """Newton direction for the barrier mse dual by preconditioned conjugate gradients.

    Exact Hessian-vector products. The preconditioner is the rank-one-curvature approximation
    ``Qt o Qt + barrier`` with ``Qt = P^T diag(e) P``, ``e_a = (2 w_a^{3/2})^{-1/2}`` (exact on the
    diagonal of ``E``), factorised only on the block of points whose barrier curvature is below
    their own curvature (those near the support); on the others, which the barrier dominates, it
    is its diagonal. So the Cholesky is of the near-support block, not of the whole working set.
    ``barrier`` ([m]) is the barrier's curvature (:func:`_barrier_curvature`).
    """
    e = tf.math.rsqrt(2.0 * tf.pow(w, 1.5))
    Pe = P * tf.sqrt(e)[:, None]
    own = tf.square(tf.reduce_sum(Pe * Pe, axis=0))  # diagonal of Qt o Qt
    block = tf.where(barrier < PRECONDITIONER_BLOCK * own)[:, 0]
    Pb = tf.gather(Pe, block, axis=1)
    Qt = tf.linalg.matmul(Pb, Pb, transpose_a=True)
    pre = Qt * Qt + tf.linalg.diag(tf.gather(barrier, block))
    pre = pre + 1e-13 * tf.reduce_max(own) * tf.eye(tf.shape(pre)[0], dtype=pre.dtype)
    Lp = tf.linalg.cholesky(pre)
    diagonal = 1.0 / (own + barrier)
    rows = tf.cast(block, tf.int32)[:, None]

    def precondition(v):
        inside = tf.linalg.cholesky_solve(Lp, tf.gather(v, block)[:, None])[:, 0]
        return tf.tensor_scatter_nd_update(v * diagonal, rows, inside)

    E = _mse_curvature(w)

    def apply(v):
        return _mse_hessian_vector(E, P, v) + barrier * v

    b = -gb
    x = precondition(b)
    res = b - apply(x)
    z = precondition(res)
    p = z
    rz = tf.reduce_sum(res * z)
    bnorm = tf.norm(b)

    def cond(k, x, res, z, p, rz):
        return tf.logical_and(k < 50, tf.norm(res) > CG_RTOL * bnorm)

    def body(k, x, res, z, p, rz):
        Ap = apply(p)
        alpha = rz / tf.reduce_sum(p * Ap)
        x = x + alpha * p
        res = res - alpha * Ap
        z = precondition(res)
        rz_new = tf.reduce_sum(res * z)
        p = z + (rz_new / rz) * p
        return k + 1, x, res, z, p, rz_new

    _, x, _, _, _, _ = tf.while_loop(cond, body, (tf.constant(0), x, res, z, p, rz))
    return x


#: Above this many r^2 m^2 flops the mse Newton direction is computed by preconditioned CG (the
#: dense Hessian is built row by row, r products of size m x r x m: slower than a few CG steps).
DENSE_MSE_HESSIAN_FLOPS = 1e8


def _certificate_terms(vectors: tf.Tensor, weights: tf.Tensor, objective: str):
    """Duality gap of the rescaled feasible covariance, its relative form, max q, and q."""
    w, _, _, q = dual_terms(vectors, weights, objective)
    gap, rel, qmax = duality_gap(w, q, weights, objective)
    return gap, rel, qmax, q


def duality_gap(w: tf.Tensor, q: tf.Tensor, weights: tf.Tensor, objective: str):
    """Duality gap, relative gap and max q from the eigenvalues ``w`` of ``S`` and the leverages ``q``.

    entropy: ``r log(1 + eps)`` with the design gap ``eps = max q * sum(l) / r - 1``; mse:
    ``eps * tr^2 / sum(l)`` with ``eps = max q * sum(l) / tr - 1``, ``tr = tr S^{1/2}`` (relative gap eps).
    """
    r = tf.cast(tf.shape(w)[0], tf.float64)
    total = tf.reduce_sum(weights)
    qmax = tf.reduce_max(q)
    if objective == "entropy":
        eps = qmax * total / r - 1.0
        gap = r * tf.math.log1p(tf.maximum(eps, -0.5))
        rel = gap / r
    else:
        trace = tf.reduce_sum(tf.sqrt(w))
        eps = qmax * total / trace - 1.0
        gap = eps * trace * trace / total
        rel = eps
    return gap, rel, qmax


def feasible_scales(w: tf.Tensor, qmax: tf.Tensor, objective: str) -> tf.Tensor:
    """The scales of the feasible covariance ``M = M(l) * max q`` from the eigenvalues ``w`` of ``S``:
    ``M(l) = S`` (entropy) or ``S^{1/2}`` (mse), rescaled so that ``max_i v_i^T M^{-1} v_i = 1``."""
    return tf.sqrt(w * qmax) if objective == "entropy" else tf.sqrt(tf.sqrt(w) * qmax)


def barrier_newton_terms(vectors, weights0, tol, max_iter, primal_dual, objective):
    """Log-barrier Newton on the dual from ``weights0`` (positive): ``(weights, steps, met, terms)``,
    ``terms`` the :func:`dual_terms` ``(w, V, P, q)`` at the weights returned (the loop carries them: the
    working-set loop and its certificate read them rather than decompose ``S`` again).

    Both variants take the Newton step of the barrier problem ``dual - mu sum(log l)`` with the
    barrier's curvature ``s / l`` and an Armijo line search on it, and stop once the certificate
    (:func:`duality_gap`) meets ``tol``. ``primal_dual=False``: ``s = mu / l`` (the primal barrier), and ``mu``
    falls once the iterate is centred. ``primal_dual=True``: a slack ``s`` takes its own Newton step
    on ``l_i s_i = mu`` (so weights that must shrink tenfold do not cut every step to a tenth), and
    ``mu`` is :data:`PRIMAL_DUAL_SIGMA` of the mean ``l_i s_i`` after every step: fewer steps from a
    cold start, but slower than the primal barrier when new points have just been added at a guessed
    weight (docs/mechanisms.md#noise-optimiser).
    """
    dtype = tf.float64
    m = tf.cast(tf.shape(vectors)[1], dtype)
    # The eigen-decomposition of S at the current weights is a loop variable: computed once here (it
    # also gives the first barrier weight), then by the line search at the trial it accepts.
    terms0 = dual_terms(vectors, weights0, objective)
    gap0, _, _ = duality_gap(terms0[0], terms0[3], weights0, objective)
    mu0 = tf.maximum(gap0, 1e-3) / (m * MU_START_DIV)
    inf = tf.constant(np.inf, dtype)

    def cond(it, weights, slack, mu, done, met, *terms):
        return tf.logical_and(it < max_iter, tf.logical_not(done))

    def body(it, weights, slack, mu, done, met, w, V, P, q):
        # The certificate bounds the excess of any weights, centred or not: stop once it is met
        # (before computing a step that would not be taken).
        gap, rel, _ = duality_gap(w, q, weights, objective)
        converged = rel <= tol

        def newton_step():
            value, grad = _value_of_terms(weights, w, objective), 1.0 - q
            gb = grad - mu / weights
            slack_ = tf.where(primal_dual, slack, mu / weights)
            barrier = _barrier_curvature(slack_, weights)

            def dense_direction():
                H = _dual_hessian(w, P, objective)
                Hb = H + tf.linalg.diag(barrier)
                # Jitter relative to the dual's own curvature, not the barrier's (which explodes on
                # inactive points and would swamp the Newton system).
                jitter = 1e-13 * tf.reduce_max(tf.linalg.diag_part(H))
                Hb = Hb + jitter * tf.eye(tf.shape(Hb)[0], dtype=dtype)
                return -tf.linalg.cholesky_solve(tf.linalg.cholesky(Hb), gb[:, None])[:, 0]

            if objective == "entropy":
                step = dense_direction()
            else:
                r_dim = tf.cast(tf.shape(P)[0], dtype)
                use_cg = r_dim * r_dim * m * m > DENSE_MSE_HESSIAN_FLOPS
                step = tf.cond(use_cg, lambda: _mse_newton_direction(w, P, gb, barrier), dense_direction)
            slack_step = mu / weights - slack_ - barrier * step  # Newton on l_i s_i = mu (primal-dual only)
            decrement2 = -tf.reduce_sum(gb * step)
            # Fraction to the boundary: keep every weight (and slack) strictly positive.
            t_max = tf.minimum(tf.constant(1.0, dtype),
                               0.99 * tf.reduce_min(tf.where(step < 0.0, -weights / step, tf.fill(tf.shape(step), inf))))
            t_slack = tf.minimum(tf.constant(1.0, dtype), 0.99 * tf.reduce_min(
                tf.where(slack_step < 0.0, -slack_ / slack_step, tf.fill(tf.shape(step), inf))))
            phi0 = value - mu * tf.reduce_sum(tf.math.log(weights))

            def trial(t):  # Armijo's test at weights + t step, and the decomposition there
                trial_weights = weights + t * step
                value_t, *terms_t = _trial_terms(vectors, trial_weights, objective)
                phi = value_t - mu * tf.reduce_sum(tf.math.log(trial_weights))
                return (phi <= phi0 - 0.25 * t * decrement2, *terms_t)

            t, k, _, *terms_t = tf.while_loop(
                lambda t, k, accepted, *_: tf.logical_and(k < 60, tf.logical_not(accepted)),
                lambda t, k, *_: (0.5 * t, k + 1, *trial(0.5 * t)),
                (t_max, tf.constant(0), *trial(t_max)))
            # A failed line search means rounding error dominates the predicted decrease: stop there
            # (the certificate then reports honestly how close we got).
            failed = tf.logical_or(k >= 60, tf.logical_not(tf.reduce_all(tf.math.is_finite(step))))
            stalled = tf.logical_or(failed, tf.reduce_max(tf.abs(t * step)) <= 1e-13 * tf.reduce_max(weights))
            new_weights = tf.where(failed, weights, weights + t * step)
            new_slack = tf.where(failed, slack_, slack_ + t_slack * slack_step)
            # Primal barrier: decrease mu once (roughly) centred: at the central point the gap is about m mu.
            centred = decrement2 < CENTRED_DECREMENT
            barrier_mu = tf.where(centred, tf.minimum(mu * MU_FACTOR, gap / (MU_GAP_DIV * m)), mu)
            pd_mu = PRIMAL_DUAL_SIGMA * tf.reduce_sum(new_weights * new_slack) / m
            new_mu = tf.maximum(tf.where(primal_dual, pd_mu, barrier_mu), 1e-300)
            # the decomposition at the new weights: the accepted trial's (a failed search ends the loop)
            return (new_weights, new_slack, new_mu, stalled,
                    *tf.cond(failed, lambda: (w, V, P, q), lambda: tuple(terms_t)))

        def stop():
            return weights, slack, mu, tf.constant(True), w, V, P, q

        new_weights, new_slack, new_mu, stalled, *new_terms = tf.cond(converged, stop, newton_step)
        return (it + 1, new_weights, new_slack, new_mu, tf.logical_or(converged, stalled), converged, *new_terms)

    it, weights, *_, met, w, V, P, q = tf.while_loop(
        cond, body, (tf.constant(0), weights0, mu0 / weights0, mu0, tf.constant(False), tf.constant(False), *terms0),
        parallel_iterations=1)
    return weights, it, met, (w, V, P, q)


def barrier_newton(vectors, weights0, tol, max_iter, primal_dual, objective):
    """Log-barrier Newton on the dual from ``weights0`` (positive): ``(weights, steps, met)``
    (:func:`barrier_newton_terms` without the decomposition)."""
    return barrier_newton_terms(vectors, weights0, tol, max_iter, primal_dual, objective)[:3]



def uniform_weight(vectors: tf.Tensor, objective: str) -> tf.Tensor:
    """The cold start: the dual's minimiser over equal weights ``c`` on the columns of ``vectors`` (r x m),
    ``c = r / m`` (entropy) or ``(tr G^{1/2} / m)^2`` (mse), ``G = vectors vectors^T``."""
    r = tf.cast(tf.shape(vectors)[0], tf.float64)
    m = tf.cast(tf.shape(vectors)[1], tf.float64)
    if objective == "entropy":
        return r / m
    G = _weighted_gram(vectors, tf.ones_like(vectors[0]))
    root_trace = tf.reduce_sum(tf.sqrt(tf.maximum(tf.linalg.eigvalsh(G), 0.0)))
    c = (root_trace / m) ** 2
    return tf.where(tf.logical_and(tf.math.is_finite(c), c > 0.0), c, r / m)



#: The restricted solve of one working-set round, compiled per objective (stable signatures).
RESTRICTED_SOLVERS = compile_per_objective(barrier_newton, [MATRIX_SPEC, VECTOR_SPEC, REAL_SPEC, COUNT_SPEC,
                                                                   tf.TensorSpec([], tf.bool)])


@check_shapes("vectors: [r, w]", "weights0: [w]")
def restricted_dual_solve(vectors: tf.Tensor, weights0: tf.Tensor, objective: str, tol: float, max_iter: int,
                          primal_dual: bool):
    """The working-set step of :func:`optimise_noise_covariance`: the compiled log-barrier Newton
    method on the columns ``vectors`` (r x w) from ``weights0`` (w, positive), primal-dual unless the
    round starts from violators just added (as the in-memory rounds choose). Returns
    ``(weights, steps, met)``. Lets a caller that streams the other columns (and certifies over all
    of them itself) run exactly the restricted solve the in-memory optimiser runs. Public: the
    sensitivity vectors only."""
    validate_objective(objective)
    return RESTRICTED_SOLVERS[objective](tf.convert_to_tensor(vectors, tf.float64),
                                         tf.convert_to_tensor(weights0, tf.float64),
                                         tf.constant(float(tol), tf.float64), tf.constant(int(max_iter), tf.int32),
                                         tf.constant(bool(primal_dual)))


@check_shapes("vectors: [r, w]")
def best_uniform_weight(vectors: tf.Tensor, objective: str) -> float:
    """The optimiser's cold start on the working set ``vectors`` (r x w): the dual's minimiser over equal
    weights (what :func:`optimise_noise_covariance` starts from). Public."""
    validate_objective(objective)
    return float(uniform_weight(tf.convert_to_tensor(vectors, tf.float64), objective))
