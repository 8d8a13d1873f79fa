"""The sparse models' release maps, one row chunk at a time.

:class:`ChunkTerms` holds the public pieces of a :class:`~dpgp_gpflow.models.DPGPRFITC`,
:class:`~dpgp_gpflow.models.DPSGPR` or :class:`~dpgp_gpflow.models.DPSparseLaplaceGPC` (kernel, prior
mean, inducing inputs ``Z``, noise variance, output bounds) and computes, for a chunk of rows, exactly what the in-memory model computes for those
columns: the m x m sums that determine the factors (:meth:`ChunkTerms.summaries`), and, once the
factors are known (:meth:`ChunkTerms.factors`), the columns ``R B[:, chunk]`` of the released map
(:meth:`ChunkTerms.columns`; ``R``: the reference coordinates of
:func:`~dpgp_gpflow.pipeline.reference_coordinates` at the training inputs) and the clipped, centred
outputs (:meth:`ChunkTerms.centred_outputs`). Nothing m x n is formed: a chunk's m x c block at most.

FITC (``docs/mechanisms.md#sparse-regression``): ``V = L_uu^{-1} K_uf``, ``nu = diag(K_ff - V^T V) +
sigma^2``; sums ``V diag(1/nu) V^T`` (giving ``L_B``) and ``V V^T`` (the readout's Gram at the training
inputs). SGPR (Titsias): ``W = L^{-1} K_uf``, ``A = W / sigma``; sums ``A A^T`` (giving ``L_B``) and
``W W^T`` (the readout's Gram is ``L_B^{-1} W W^T L_B^{-T}``). SoR classifier (the first Newton step
``w1 = C_w y``, ``docs/mechanisms.md``): FITC's sums with ``nu = 4`` (the linearised likelihood's
variance ``1/W``) and ``C_w = 2 (L_B L_B^T)^{-1} V / nu``; ``V = Phi^T``.

Privacy assumption: the kernel, ``Z``, the noise variance, the prior mean and the bounds are public;
the outputs enter only :meth:`ChunkTerms.centred_outputs`, which clips them to the public bounds
(labels: checks they are -1 or +1) before anything else is computed from them. The object pickles through the release-file
specifications of its kernel and mean function (:mod:`dpgp_gpflow.release_file`), so Dask workers
rebuild exactly the same public pieces.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Tuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from .. import linalg
from ..models.dp_laplace import DPSparseLaplaceGPC
from ..models.laplace import SoRReadout, validate_labels
from ..models.fitc import DPGPRFITC, FITCReadout, FITCTerms
from ..models.sgpr import DPSGPR, SGPRReadout, SGPRTerms
from ..release_file import kernel_from_spec, kernel_spec, mean_function_from_spec, mean_function_spec
from ..validation import clip_outputs

__all__ = ["KINDS", "SOR_VARIANCE", "ChunkTerms", "Factors", "add_summaries"]


class Factors(NamedTuple):
    """The public m x m factors of a sparse model, from the chunk sums."""

    L: tf.Tensor  #: [M, M] Cholesky of K_uu (+ GPflow's default jitter)
    LB: tf.Tensor  #: [M, M] Cholesky of I + (the model's sum)
    R: Optional[tf.Tensor]  #: [M, M] upper-triangular reference coordinates, or None (release of u itself)


def add_summaries(a: Dict[str, np.ndarray], b: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Sum two chunks' summaries (sums, except ``output_bound``, a maximum)."""
    return {k: (np.maximum(a[k], b[k]) if k == "output_bound" else a[k] + b[k]) for k in a}


#: The sparse models a stream releases, by the kind of their per-chunk maths.
KINDS = ("fitc", "sgpr", "sor")
#: The SoR classifier's first Newton step from ``w0 = 0`` linearises the likelihood with ``W = 1/4``.
SOR_VARIANCE = 4.0


class ChunkTerms:
    """Public per-chunk maths of a sparse model (see the module docstring).

    Build it with :meth:`from_model`. ``kind`` is one of :data:`KINDS`.
    """

    def __init__(self, kind: str, kernel: Any, mean_function: Any, Z: np.ndarray, noise_variance: float,
                 y_bounds: Tuple[float, float], jitter: float) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.kind = kind
        self.Z = np.asarray(Z, dtype=np.float64)
        self.noise_variance = float(noise_variance)
        self.y_bounds = (float(y_bounds[0]), float(y_bounds[1]))
        self.jitter = float(jitter)
        self._kernel = gpflow.utilities.freeze(kernel)
        self._mean_function = gpflow.utilities.freeze(mean_function)

    @classmethod
    def from_model(cls, model: Any) -> "ChunkTerms":
        """The public pieces of a ``DPGPRFITC`` or ``DPSGPR`` with one (homoscedastic) noise variance, or
        of a ``DPSparseLaplaceGPC``."""
        if isinstance(model, DPSparseLaplaceGPC):
            return cls("sor", model.kernel, model.mean_function, model.inducing_variable.Z.numpy(), SOR_VARIANCE,
                       model.y_bounds, gpflow.config.default_jitter())
        if isinstance(model, DPGPRFITC):
            kind = "fitc"
        elif isinstance(model, DPSGPR):
            kind = "sgpr"
        else:
            raise TypeError("streaming releases support DPGPRFITC, DPSGPR and DPSparseLaplaceGPC, not "
                            f"{type(model).__name__}")
        variance = np.asarray(model.likelihood.variance.numpy(), dtype=np.float64)
        if variance.size != 1:
            raise NotImplementedError("streaming releases need one noise variance for all points")
        return cls(kind, model.kernel, model.mean_function, model.inducing_variable.Z.numpy(), float(variance),
                   model.y_bounds, gpflow.config.default_jitter())

    # -- pickling (Dask workers): the kernel and mean function travel as their specifications --------
    def __getstate__(self) -> Dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k not in ("_kernel", "_mean_function")}
        state["kernel_spec"] = kernel_spec(self._kernel)
        state["mean_spec"] = mean_function_spec(self._mean_function)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        state = dict(state)
        self._kernel = kernel_from_spec(state.pop("kernel_spec"))
        self._mean_function = mean_function_from_spec(state.pop("mean_spec"))
        self.__dict__.update(state)

    @property
    def m(self) -> int:
        return int(self.Z.shape[0])

    def kuu_cholesky(self) -> tf.Tensor:
        """``chol(K_uu + jitter I)`` [M, M], as GPflow's ``Kuu`` with the default jitter (public)."""
        Z = tf.constant(self.Z)
        kuu = self._kernel(Z) + self.jitter * tf.eye(self.m, dtype=tf.float64)
        return tf.linalg.cholesky(kuu)

    def _projected(self, X: np.ndarray, L: tf.Tensor) -> tf.Tensor:
        """``L^{-1} K_uf`` for the chunk [M, c]."""
        kuf = self._kernel(tf.constant(self.Z), tf.constant(X))  # [M, c]
        return linalg.triangular_solve(L, kuf, lower=True)

    def _nu(self, X: np.ndarray, V: tf.Tensor) -> Any:
        """FITC's per-point ``diag(K_ff - V^T V) + sigma^2`` [c], or the SoR step's constant variance."""
        if self.kind == "sor":
            return self.noise_variance
        return self._kernel(tf.constant(X), full_cov=False) - tf.reduce_sum(tf.square(V), 0) + self.noise_variance

    def summaries(self, X: np.ndarray, L: tf.Tensor) -> Dict[str, np.ndarray]:
        """The chunk's m x m sums (public: inputs only) and its output bound (see module docstring)."""
        V = self._projected(X, L)  # [M, c]
        if self.kind != "sgpr":
            inner = tf.linalg.matmul(V / self._nu(X, V), V, transpose_b=True)
        else:
            A = V / np.sqrt(self.noise_variance)
            inner = tf.linalg.matmul(A, A, transpose_b=True)
        mean = self._mean_function(tf.constant(X))[:, 0].numpy()
        lo, hi = self.y_bounds
        bound = float(np.max(np.maximum(hi - mean, mean - lo))) if mean.size else 0.0
        return {"inner": inner.numpy(), "gram": tf.linalg.matmul(V, V, transpose_b=True).numpy(),
                "output_bound": np.array(bound)}

    def factors(self, L: tf.Tensor, sums: Dict[str, np.ndarray], reference: bool = True) -> Factors:
        """``L_B`` and the reference coordinates ``R`` at the training inputs (``reference=False``: no
        ``R``) from the summed chunk summaries (public)."""
        eye = tf.eye(self.m, dtype=tf.float64)
        LB = tf.linalg.cholesky(eye + tf.constant(sums["inner"]))
        R = None
        if reference:
            G = tf.constant(sums["gram"])  # [M, M] = readout^T readout at the training inputs (FITC)
            if self.kind == "sgpr":  # readout = (L_B^{-1} W)^T: G = L_B^{-1} (W W^T) L_B^{-T}
                half = tf.linalg.triangular_solve(LB, G, lower=True)
                G = tf.transpose(tf.linalg.triangular_solve(LB, tf.transpose(half), lower=True))
            R = _reference_from_gram(G)
        return Factors(L, LB, R)

    @check_shapes("X: [c, D]", "return: [M, c]")
    def latent_columns(self, X: np.ndarray, factors: Factors) -> tf.Tensor:
        """``B[:, chunk]`` [M, c]: the map from the chunk's centred outputs to the latent values (public)."""
        V = self._projected(X, factors.L)
        if self.kind != "sgpr":
            return linalg.cholesky_solve(factors.LB, V / self._nu(X, V)) * self._step_scale
        sigma = np.sqrt(self.noise_variance)
        return linalg.triangular_solve(factors.LB, (V / sigma) / sigma, lower=True)

    @check_shapes("X: [c, D]", "return: [M, c]")
    def columns(self, X: np.ndarray, factors: Factors) -> tf.Tensor:
        """``R B[:, chunk]`` (or ``B[:, chunk]`` without ``R``): the released map's columns (public)."""
        B = self.latent_columns(X, factors)
        return B if factors.R is None else tf.linalg.matmul(factors.R, B)

    @check_shapes("X: [c, D]", "T: [r, M]", "return: [r, c]")
    def transformed_columns(self, X: np.ndarray, factors: Factors, T: np.ndarray) -> tf.Tensor:
        """``T C[:, chunk]`` for a public ``T`` (r x m), with the m x m factors applied to ``T`` (triangular
        and Cholesky solves on r x m, by associativity) so that the chunk costs one r x m x c product
        (SGPR; FITC adds the m x m x c solve that ``nu`` needs). Public."""
        left = tf.constant(T)
        if factors.R is not None:
            left = tf.linalg.matmul(left, factors.R)  # [r, M]
        kuf = self._kernel(tf.constant(self.Z), tf.constant(X))  # [M, c]
        if self.kind != "sgpr":  # T R (L_B L_B^T)^{-1} V diag(1/nu), V = L^{-1} K_uf (times the SoR step's 2)
            M = tf.transpose(tf.linalg.cholesky_solve(factors.LB, tf.transpose(left))) * self._step_scale
            V = linalg.triangular_solve(factors.L, kuf, lower=True)
            return tf.linalg.matmul(M, V) / self._nu(X, V)
        # SGPR: T R L_B^{-1} L^{-1} K_uf / sigma^2
        M = tf.linalg.triangular_solve(factors.LB, tf.transpose(left), lower=True, adjoint=True)  # [M, r]
        M = tf.linalg.triangular_solve(factors.L, M, lower=True, adjoint=True)
        return tf.linalg.matmul(M, kuf, transpose_a=True) / self.noise_variance

    @property
    def _step_scale(self) -> float:
        """The SoR first step's ``C_w = 2 (L_B L_B^T)^{-1} V / nu`` (gradient ``y / 2`` over ``W = 1/4``)."""
        return 2.0 if self.kind == "sor" else 1.0

    def centred_outputs(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """PRIVATE: the chunk's outputs clipped to the public bounds, minus the public prior mean [c]
        (labels: checked to be -1 or +1, without any statistic of them in the error)."""
        if self.kind == "sor":
            validate_labels(np.asarray(Y).reshape(-1, 1))
        if not np.all(np.isfinite(Y)):
            raise ValueError("the private outputs are not all finite")
        clipped = clip_outputs(np.asarray(Y, dtype=np.float64).reshape(-1, 1), self.y_bounds)
        return (clipped - self._mean_function(tf.constant(X)).numpy()).reshape(-1)

    def readout(self, factors: Factors) -> Any:
        """The frozen public readout the in-memory model's ``public_readout`` gives (no ``B`` in it)."""
        if self.kind == "sor":
            return SoRReadout.from_factors(self._kernel, self.Z, factors.L, factors.LB)
        if self.kind == "fitc":
            return FITCReadout(self._kernel, self._mean_function, tf.constant(self.Z),
                               FITCTerms(factors.L, factors.LB, None))
        return SGPRReadout(self._kernel, self._mean_function, tf.constant(self.Z), SGPRTerms(factors.L, factors.LB, None))


@check_shapes("G: [M, M]", "return: [M, M]")
def _reference_from_gram(G: tf.Tensor) -> tf.Tensor:
    """:func:`~dpgp_gpflow.pipeline.reference_coordinates` from the readout's Gram ``A^T A`` (same ridge)."""
    m = int(G.shape[0])
    ridge = 1e-8 * tf.linalg.trace(G) / m
    return tf.transpose(tf.linalg.cholesky(G + ridge * tf.eye(m, dtype=G.dtype)))
