"""A sparse model's release map, one row chunk at a time: :class:`ChunkTerms`.

A sparse model's ``chunk_terms()`` (:meth:`~dpgp_gpflow.models.sgpr_base.DPSGPRBase.chunk_terms`,
:meth:`~dpgp_gpflow.models.DPSparseLaplaceGPC.chunk_terms`) returns
its subclass of :class:`ChunkTerms` (:class:`~dpgp_gpflow.models.fitc.FITCChunkTerms`,
:class:`~dpgp_gpflow.models.sgpr.SGPRChunkTerms`,
:class:`~dpgp_gpflow.models.dp_laplace.SoRChunkTerms`, each beside its model), holding the model's
public pieces (kernel, prior mean, inducing inputs ``Z``, noise variance, output bounds). For a chunk
of rows it computes exactly what the in-memory model computes for those columns: the m x m sums that
determine the factors (:meth:`ChunkTerms.summaries`), and, once the factors are known
(:meth:`ChunkTerms.factors`), the columns ``R B[:, chunk]`` of the released map
(:meth:`ChunkTerms.columns`; ``R``: the reference coordinates of
:func:`~dpgp_gpflow.pipeline.reference_coordinates` at the training inputs) and the clipped, centred
outputs (:meth:`ChunkTerms.centred_outputs`). Nothing m x n is formed: a chunk's m x c block at most.

What is shared is here: ``L = chol(K_uu + jitter I)``, the chunk's ``V = L^{-1} K_uf``, the sums
``inner`` (the model's, giving ``L_B = chol(I + inner)``) and ``V V^T`` (from which the readout's
Gram at the training inputs, hence ``R``, follows), the output bound, the clipping. A model's
subclass gives its ``inner``, its readout's Gram, its columns ``B[:, chunk]`` and ``T B[:, chunk]``,
and its readout (``docs/mechanisms.md#sparse-regression``).

Several outputs per row (``Y`` [N, P], one ``B`` for all, :attr:`ChunkTerms.num_outputs`): a chunk's
columns of the stacked map ``I_P kron (R B)`` are ``I_P kron (R B[:, chunk])`` (the chunk's rows of output
1, then of output 2, ...), and its centred outputs are stacked the same way.

Privacy assumption: the kernel, ``Z``, the noise variance, the prior mean and the bounds are public;
the outputs enter only :meth:`ChunkTerms.centred_outputs`, which checks them
(:meth:`ChunkTerms.check_outputs`) and clips them to the public bounds before anything else is
computed from them. The object pickles through the release-file specifications of its kernel and
mean function (:mod:`dpgp_gpflow.io.format`), so Dask workers rebuild exactly the same public pieces.
"""

from __future__ import annotations

import abc
from typing import Any, Dict, NamedTuple, Optional, Tuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from .. import linalg
from ..contract import PublicReadout, output_map
from ..io.gpflow_specs import kernel_from_spec, kernel_spec, mean_function_from_spec, mean_function_spec
from ..validation import bound_columns, clip_outputs, validate_output_bounds
from .chunks import output_columns

__all__: list[str] = []  # internal: the package imports these names by name


class Factors(NamedTuple):
    """The public m x m factors of a sparse model, from the chunk sums."""

    L: tf.Tensor  #: [M, M] Cholesky of K_uu (+ GPflow's default jitter)
    LB: tf.Tensor  #: [M, M] Cholesky of I + (the model's sum)
    R: Optional[tf.Tensor]  #: [M, M] upper-triangular reference coordinates, or None (release of u itself)


def add_summaries(a: Dict[str, np.ndarray], b: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Sum two chunks' summaries (sums, except ``output_bound``, a maximum)."""
    return {k: (np.maximum(a[k], b[k]) if k == "output_bound" else a[k] + b[k]) for k in a}


@check_shapes("G: [M, M]", "return: [M, M]")
def reference_from_gram(G: tf.Tensor) -> tf.Tensor:
    """:func:`~dpgp_gpflow.pipeline.reference_coordinates` from the readout's Gram ``A^T A`` (same ridge)."""
    m = int(G.shape[0])
    ridge = 1e-8 * tf.linalg.trace(G) / m
    return tf.transpose(tf.linalg.cholesky(G + ridge * tf.eye(m, dtype=G.dtype)))


class ChunkTerms(abc.ABC):
    """Public per-chunk maths of a sparse model (see the module docstring); a model's ``chunk_terms()``
    builds its subclass. ``y_bounds``: a pair, or for ``num_outputs`` P > 1 outputs per row a pair for all
    or one per output."""

    #: P: the number of outputs per row, stacked output by output within each chunk (public)
    num_outputs: int = 1

    def __init__(self, kernel: Any, mean_function: Any, Z: np.ndarray, noise_variance: float,
                 y_bounds: Any, jitter: float, num_outputs: int = 1) -> None:
        self.Z = np.asarray(Z, dtype=np.float64)
        self.noise_variance = float(noise_variance)
        self.num_outputs = int(num_outputs)
        self.y_bounds = validate_output_bounds(y_bounds, self.num_outputs)
        self.jitter = float(jitter)
        self._kernel = gpflow.utilities.freeze(kernel)
        self._mean_function = gpflow.utilities.freeze(mean_function)

    @staticmethod
    def from_model(model: Any) -> "ChunkTerms":
        """``model.chunk_terms()``: ``TypeError`` for a model that has no chunked terms."""
        chunk_terms = getattr(model, "chunk_terms", None)
        if not callable(chunk_terms):
            raise TypeError("streaming releases support models with chunk_terms() (DPGPRFITC, DPSGPR and "
                            f"DPSparseLaplaceGPC), not {type(model).__name__}")
        return chunk_terms()

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

    # -- shared maths ------------------------------------------------------------------------------
    def kuu_cholesky(self) -> tf.Tensor:
        """``chol(K_uu + jitter I)`` [M, M], as GPflow's ``Kuu`` with the default jitter (public)."""
        Z = tf.constant(self.Z)
        kuu = self._kernel(Z) + self.jitter * tf.eye(self.m, dtype=tf.float64)
        return tf.linalg.cholesky(kuu)

    def kuf(self, X: np.ndarray) -> tf.Tensor:
        """``K_uf`` for the chunk [M, c] (public)."""
        return self._kernel(tf.constant(self.Z), tf.constant(X))

    def projected(self, X: np.ndarray, L: tf.Tensor) -> tf.Tensor:
        """``V = L^{-1} K_uf`` for the chunk [M, c] (public)."""
        return linalg.triangular_solve(L, self.kuf(X), lower=True)

    def summaries(self, X: np.ndarray, L: tf.Tensor) -> Dict[str, np.ndarray]:
        """The chunk's m x m sums (public: inputs only) and its output bound (see module docstring)."""
        V = self.projected(X, L)  # [M, c]
        inner = self.inner(X, V)
        mean = self._mean_function(tf.constant(X)).numpy()  # [c, 1] or [c, P]
        lo, hi = bound_columns(self.y_bounds)  # per output: [P]
        bound = float(np.max(np.maximum(hi - mean, mean - lo))) if mean.size else 0.0
        return {"inner": inner.numpy(), "gram": tf.linalg.matmul(V, V, transpose_b=True).numpy(),
                "output_bound": np.array(bound)}

    def factors(self, L: tf.Tensor, sums: Dict[str, np.ndarray], reference: bool = True) -> Factors:
        """``L_B`` and the reference coordinates ``R`` at the training inputs (``reference=False``: no
        ``R``) from the summed chunk summaries (public)."""
        eye = tf.eye(self.m, dtype=tf.float64)
        LB = tf.linalg.cholesky(eye + tf.constant(sums["inner"]))
        R = reference_from_gram(self.readout_gram(LB, tf.constant(sums["gram"]))) if reference else None
        return Factors(L, LB, None if R is None else output_map(R, self.num_outputs))

    @check_shapes("X: [c, D]", "return: [Mp, cp]")
    def columns(self, X: np.ndarray, factors: Factors) -> tf.Tensor:
        """``R B[:, chunk]`` (or ``B[:, chunk]`` without ``R``): the released map's columns (public). P > 1
        outputs: ``R (I_P kron B[:, chunk])`` [mP, cP], ``R`` the stacked ``I_P kron R_1``."""
        B = output_map(self.latent_columns(X, factors), self.num_outputs)
        return B if factors.R is None else tf.linalg.matmul(factors.R, B)

    @check_shapes("X: [c, D]", "T: [r, Mp]", "return: [r, cp]")
    def transformed_columns(self, X: np.ndarray, factors: Factors, T: np.ndarray) -> tf.Tensor:
        """``T C[:, chunk]`` for a public ``T`` (r x m): :meth:`latent_product` of ``T R`` (public); P > 1
        outputs (``T`` r x mP): one :meth:`latent_product` per output's block of ``T R``, side by side."""
        left = tf.constant(T)
        if factors.R is not None:
            left = tf.linalg.matmul(left, factors.R)  # [r, M] (P outputs: [r, M P])
        if self.num_outputs == 1:
            return self.latent_product(X, factors, left)
        m = self.m
        return tf.concat([self.latent_product(X, factors, left[:, p * m:(p + 1) * m]) for p in range(self.num_outputs)],
                         axis=1)

    def check_outputs(self, Y: np.ndarray) -> None:
        """PRIVATE: refuse outputs the model cannot hold, without any statistic of them in the error
        (nothing to check here: outputs are clipped)."""

    def centred_outputs(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """PRIVATE: the chunk's outputs (checked by :meth:`check_outputs`) clipped to the public bounds,
        minus the public prior mean [c] (P outputs: ``Y`` [c, P], each clipped to its bounds, stacked output
        by output [c P]). ``Y`` must hold exactly the model's P columns ([c] or [c, 1] for one output), else
        ``ValueError`` (its shape is public): never broadcast against the per-output bounds."""
        Y = np.asarray(Y, dtype=np.float64)
        rows, columns = int(np.shape(X)[0]), output_columns(Y.shape)  # exactly: never broadcast to the bounds
        if Y.shape[0] != rows or columns != self.num_outputs:
            raise ValueError(f"the chunk has outputs of shape {list(Y.shape)} for {rows} rows: {columns} output "
                             f"column(s) per row, the model {self.num_outputs}")
        self.check_outputs(Y)
        if not np.all(np.isfinite(Y)):
            raise ValueError("the private outputs are not all finite")
        clipped = clip_outputs(Y.reshape(rows, self.num_outputs), self.y_bounds)
        return (clipped - self._mean_function(tf.constant(X)).numpy()).T.reshape(-1)

    # -- the model's own maths -------------------------------------------------------------------
    @abc.abstractmethod
    def inner(self, X: np.ndarray, V: tf.Tensor) -> tf.Tensor:
        """The chunk's share [M, M] of the m x m sum whose ``chol(I + sum)`` is ``L_B`` (public)."""

    def readout_gram(self, LB: tf.Tensor, G: tf.Tensor) -> tf.Tensor:
        """The readout's Gram ``a^T a`` at the training inputs [M, M] from ``G = V V^T`` summed (public);
        ``G`` itself when the readout there is ``V^T``."""
        return G

    @check_shapes("X: [c, D]", "return: [M, c]")
    @abc.abstractmethod
    def latent_columns(self, X: np.ndarray, factors: Factors) -> tf.Tensor:
        """``B[:, chunk]`` [M, c]: the map from the chunk's centred outputs to the latent values (public)."""

    @check_shapes("X: [c, D]", "left: [r, M]", "return: [r, c]")
    @abc.abstractmethod
    def latent_product(self, X: np.ndarray, factors: Factors, left: tf.Tensor) -> tf.Tensor:
        """``left B[:, chunk]`` [r, c] for a public ``left`` (r x m), with the m x m factors applied to
        ``left`` (solves on r x m, by associativity) so that the chunk costs one r x m x c product (public)."""

    @abc.abstractmethod
    def readout(self, factors: Factors) -> PublicReadout:
        """The frozen public readout the in-memory model's ``public_readout`` gives (no ``B`` in it)."""
