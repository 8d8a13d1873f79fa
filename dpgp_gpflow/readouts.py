"""The frozen public readouts of a released function (as GPflow keeps its posteriors in ``posteriors.py``).

A readout turns m released latent values into predictions at any inputs: ``offset(x) + A(x) u~``, with the
public posterior variance beside them (:class:`~dpgp_gpflow.contract.PublicReadout`). Each holds frozen copies
of the public pieces it needs (kernel, mean function, inputs or inducing inputs, Cholesky factors), so that
changing or training the model later changes nothing that was published:

* :class:`SparseReadout` (with the factors :class:`SparseTerms`) and its two models' readouts
  :class:`SGPRReadout` and :class:`FITCReadout`;
* :class:`LaplaceReadout` (full-GP Laplace classifier) and :class:`SoRReadout` (sparse Laplace classifier).

Each hands its public state to a release file with ``release_state()`` and registers what that state holds
with ``release_spec()``; :mod:`dpgp_gpflow.io` writes and parses the file (``docs/release_file.md#readouts``)
and builds the readout back with ``from_file_pieces``. Privacy assumption: everything here is public (inputs,
inducing inputs, hyperparameters, factors of them); no output, label or statistic of them is held.
"""

from __future__ import annotations

import abc
from typing import Any, Dict, NamedTuple, Optional, Tuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from . import linalg
from .contract import output_map, output_offset, output_terms
from .io.gpflow_specs import kernel_spec, mean_function_spec
from .io.readouts import ReadoutPieces, ReadoutSpec

__all__: list[str] = []  # internal: the package imports these names by name


class SparseTerms(NamedTuple):
    """Public factors of a sparse regression model (functions of the inputs, ``Z`` and the
    hyperparameters only)."""

    L: tf.Tensor  #: [M, M] Cholesky of K_uu (with GPflow's default jitter)
    LB: tf.Tensor  #: [M, M] Cholesky of I + the model's m x m sum
    B: Optional[tf.Tensor]  #: [M, N] the map from the centred outputs to the latent values (None in a readout)


class SparseReadout(abc.ABC):
    """Frozen public pieces of a sparse model: the readout ``a(x)`` of its latent values, the prior
    mean and the posterior variance, from frozen copies of the kernel and mean function and constants
    for ``Z``, ``L`` and ``L_B`` (all public), so that training the model later changes nothing here.

    ``num_outputs`` (P, default 1): a model of P outputs sharing the kernel reads its mP latents stacked
    output by output: :meth:`readout` is ``I_P kron a(x)`` [kP, mP], :meth:`offset` and :meth:`variance`
    [kP] stacked alike (:func:`~dpgp_gpflow.contract.output_terms`, the one convention).

    A subclass gives :meth:`readout_at` and :meth:`single_readout_and_variance` (one output's), and the
    names of ``L`` and ``L_B`` in a release file (:attr:`factor_names`, ``docs/release_file.md#readouts``).
    """

    #: the names of ``L`` and ``L_B`` among a release file's arrays
    factor_names: Tuple[str, str] = ("L", "LB")

    def __init__(self, kernel: gpflow.kernels.Kernel, mean_function: gpflow.functions.MeanFunction,
                 Z: tf.Tensor, terms: SparseTerms, num_outputs: int = 1) -> None:
        self._kernel = gpflow.utilities.freeze(kernel)
        self._mean_function = gpflow.utilities.freeze(mean_function)
        self._Z = tf.constant(Z)
        self._L = tf.constant(terms.L)
        self._LB = tf.constant(terms.LB)
        self.input_dim = int(self._Z.shape[1])
        #: P: the number of outputs read from the stacked latents (public)
        self.num_outputs = int(num_outputs)

    @staticmethod
    @abc.abstractmethod
    def readout_at(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, LB: tf.Tensor,
                   Xnew: tf.Tensor) -> tf.Tensor:
        """The readout ``a(Xnew)`` [K, M] of the model with these factors (public)."""

    @abc.abstractmethod
    def single_readout_and_variance(self, Xnew: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        """One output's readout ``a(Xnew)`` [K, M] and the posterior variance of f at ``Xnew`` [K] (public)."""

    def readout(self, Xnew: tf.Tensor) -> tf.Tensor:
        """``a(Xnew)`` [K, M] (P outputs: ``I_P kron a(Xnew)`` [KP, MP])."""
        return output_map(self.readout_at(self._kernel, self._Z, self._L, self._LB, Xnew), self.num_outputs)

    def offset(self, Xnew: tf.Tensor) -> tf.Tensor:
        """The prior mean at ``Xnew`` [K] (P outputs: [KP], stacked)."""
        return output_offset(self._mean_function(Xnew), self.num_outputs)

    def variance(self, Xnew: tf.Tensor) -> tf.Tensor:
        return self.readout_and_variance(Xnew)[1]

    def readout_and_variance(self, Xnew: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        """:meth:`readout` and :meth:`variance` from the same solves."""
        A, variance = self.single_readout_and_variance(Xnew)
        if self.num_outputs == 1:
            return A, variance
        terms = output_terms(A, tf.zeros_like(A[:, :1]), variance, self.num_outputs)
        return terms.map, terms.variance

    def release_state(self) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
        """``(content, arrays)`` of a release file (``docs/release_file.md#readouts``): the kernel and mean
        function as specifications (and ``outputs``: P, for P > 1 outputs), ``Z``, ``L`` and ``L_B`` as
        arrays. All public; no outputs.

        ``NotImplementedError`` when the kernel or mean function is not one a release file holds.
        """
        content = {"input_dim": self.input_dim, "kernel": kernel_spec(self._kernel),
                   "mean_function": mean_function_spec(self._mean_function)}
        if self.num_outputs > 1:
            content["outputs"] = self.num_outputs
        L_name, LB_name = self.factor_names
        return content, {"Z": self._Z.numpy(), L_name: self._L.numpy(), LB_name: self._LB.numpy()}

    @classmethod
    def release_spec(cls) -> ReadoutSpec:
        """What :meth:`release_state` writes, for :func:`dpgp_gpflow.io.readouts.readout_from_state` to read."""
        return ReadoutSpec(points="Z", squares=cls.factor_names, mean_function=True, outputs=True)

    @classmethod
    def from_file_pieces(cls, pieces: ReadoutPieces) -> "SparseReadout":
        """The readout of a release file's parsed state (:func:`dpgp_gpflow.io.readouts.readout_from_state`),
        with exactly the saved values."""
        L_name, LB_name = cls.factor_names
        a = pieces.arrays
        return cls(pieces.kernel, pieces.mean_function, a["Z"], SparseTerms(a[L_name], a[LB_name], None), pieces.outputs)


# ---------------------------------------------------------------------------------------------
# SGPR (Titsias 2009) and FITC readouts.


def _sgpr_solves(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, LB: tf.Tensor, Xnew: tf.Tensor):
    """``L^{-1} k(Z, Xnew)`` and ``L_B^{-1} L^{-1} k(Z, Xnew)`` ([M, K] each). ``k(Z, Xnew)`` directly (what
    ``Kuf`` of ``InducingPoints`` computes), so that this traces in ``tf.function`` (SavedModel export)
    without creating a variable per call."""
    tmp1 = linalg.triangular_solve(L, kernel(Z, Xnew), lower=True)
    return tmp1, linalg.triangular_solve(LB, tmp1, lower=True)


@check_shapes("Xnew: [K, D]", "Z: [M, D]", "L: [M, M]", "LB: [M, M]", "return[0]: [K, M]", "return[1]: [K]")
def sgpr_readout_and_variance(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, LB: tf.Tensor,
                              Xnew: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """:func:`sgpr_readout` and :func:`sgpr_variance` from the same two solves (public)."""
    tmp1, tmp2 = _sgpr_solves(kernel, Z, L, LB, Xnew)
    variance = kernel(Xnew, full_cov=False) + tf.reduce_sum(tf.square(tmp2), 0) - tf.reduce_sum(tf.square(tmp1), 0)
    return tf.transpose(tmp2), variance


@check_shapes("Xnew: [K, D]", "Z: [M, D]", "L: [M, M]", "LB: [M, M]", "return: [K, M]")
def sgpr_readout(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, LB: tf.Tensor, Xnew: tf.Tensor) -> tf.Tensor:
    """``a(Xnew) = (L_B^{-1} L^{-1} k(Z, Xnew))^T``: maps the latent values ``c`` to predictions (public)."""
    return tf.transpose(_sgpr_solves(kernel, Z, L, LB, Xnew)[1])


@check_shapes("Xnew: [K, D]", "Z: [M, D]", "L: [M, M]", "LB: [M, M]", "return: [K]")
def sgpr_variance(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, LB: tf.Tensor, Xnew: tf.Tensor) -> tf.Tensor:
    """SGPR posterior variance of f: ``k(x, x) + |L_B^{-1} L^{-1} k(Z, x)|^2 - |L^{-1} k(Z, x)|^2`` (public)."""
    return sgpr_readout_and_variance(kernel, Z, L, LB, Xnew)[1]


class SGPRReadout(SparseReadout):
    """Frozen public pieces of an SGPR model: ``a(x) = (L_B^{-1} L^{-1} k(Z, x))^T``, the prior mean,
    and the SGPR posterior variance."""

    factor_names = ("L", "LB")

    @staticmethod
    def readout_at(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, LB: tf.Tensor,
                   Xnew: tf.Tensor) -> tf.Tensor:
        return sgpr_readout(kernel, Z, L, LB, Xnew)

    def single_readout_and_variance(self, Xnew: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        """One output's readout and variance from the same two solves."""
        return sgpr_readout_and_variance(self._kernel, self._Z, self._L, self._LB, Xnew)


@check_shapes("Xnew: [K, D]", "Z: [M, D]", "Luu: [M, M]", "return: [K, M]")
def fitc_readout(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, Luu: tf.Tensor, Xnew: tf.Tensor) -> tf.Tensor:
    """``A(Xnew) = k(Xnew, Z) L_uu^{-T}``: maps the inducing values to predictions (public).

    ``k(Z, Xnew)`` directly (what ``Kuf`` of ``InducingPoints`` computes) rather than through a fresh
    ``InducingPoints``, whose variable would make this untraceable by ``tf.function`` (SavedModel export).
    """
    kus = kernel(Z, Xnew)  # [M, K]
    return tf.transpose(linalg.triangular_solve(Luu, kus))


class FITCReadout(SparseReadout):
    """Frozen public pieces of a FITC model: ``A(x) = k(x, Z) L_uu^{-T}``, the prior mean, and the
    FITC posterior variance ``k(x, x) - |w|^2 + |L_B^{-1} w|^2`` with ``w = L_uu^{-1} k(Z, x)``
    (a release file names ``L_uu`` ``Luu``)."""

    factor_names = ("Luu", "LB")

    @staticmethod
    def readout_at(kernel: gpflow.kernels.Kernel, Z: tf.Tensor, L: tf.Tensor, LB: tf.Tensor,
                   Xnew: tf.Tensor) -> tf.Tensor:
        return fitc_readout(kernel, Z, L, Xnew)

    def single_readout_and_variance(self, Xnew: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        """One output's readout and variance from one solve with ``L_uu``."""
        A = fitc_readout(self._kernel, self._Z, self._L, Xnew)  # [K, M]
        iA = linalg.triangular_solve(self._LB, tf.transpose(A))
        return A, self._kernel(Xnew, full_cov=False) - tf.reduce_sum(tf.square(A), 1) + tf.reduce_sum(tf.square(iA), 0)


# ---------------------------------------------------------------------------------------------
# Laplace classifiers (GPML Alg. 3.2 from released latents; SoR from released weights).


def b_cholesky(K: tf.Tensor, sqrt_w: tf.Tensor) -> tf.Tensor:
    """Lower Cholesky factor of ``B = I + W^1/2 K W^1/2``; ``sqrt_w`` is [N, 1]."""
    n = tf.shape(K)[0]
    B = tf.eye(n, dtype=K.dtype) + sqrt_w * K * tf.transpose(sqrt_w)  # [N, N]
    return tf.linalg.cholesky(B)


def weight_precision_cholesky(Phi: tf.Tensor, W_diag: tf.Tensor) -> tf.Tensor:
    """Cholesky factor of ``I + Phi^T W Phi`` [M, M]."""
    m = tf.shape(Phi)[1]
    A = tf.eye(m, dtype=Phi.dtype) + tf.matmul(Phi, W_diag[:, None] * Phi, transpose_a=True)
    return tf.linalg.cholesky(A)


class LaplaceReadout:
    """Frozen public pieces of a full-GP Laplace prediction from released training latents ``f~``:
    ``E[f*] = k*^T K^{-1} f~`` (``K^{-1}`` by a Cholesky solve of ``K + jitter I``, factored once) and
    ``V[f*] = k** - k*^T (K + W^{-1})^{-1} k*`` with the public ``W`` (see :func:`predict_from_latent`).

    Privacy assumption: ``X``, the kernel and ``W`` are public (``W = I/4`` from ``f0 = 0``, or ``W``
    at a released latent vector).
    """

    def __init__(self, kernel: gpflow.kernels.Kernel, X: tf.Tensor, W_diag: tf.Tensor, jitter: float) -> None:
        self._kernel = gpflow.utilities.freeze(kernel)
        self._X = tf.constant(X)
        self.W_diag = tf.constant(tf.reshape(tf.convert_to_tensor(W_diag, dtype=self._X.dtype), [-1]))  # [N]
        self.input_dim = int(self._X.shape[1])
        K = self._kernel(self._X)
        n = int(self._X.shape[0])
        self._Lk = tf.linalg.cholesky(K + float(jitter) * tf.eye(n, dtype=K.dtype))  # [N, N]
        self._sqrt_w = tf.sqrt(self.W_diag)[:, None]  # [N, 1]
        self._LB = b_cholesky(K, self._sqrt_w)  # [N, N]

    def readout(self, Xnew: tf.Tensor) -> tf.Tensor:
        return tf.transpose(tf.linalg.cholesky_solve(self._Lk, self._kernel(self._X, Xnew)))  # [K, N]

    def offset(self, Xnew: tf.Tensor) -> tf.Tensor:
        return tf.zeros([tf.shape(Xnew)[0]], dtype=Xnew.dtype)

    def variance(self, Xnew: tf.Tensor) -> tf.Tensor:
        v = tf.linalg.triangular_solve(self._LB, self._sqrt_w * self._kernel(self._X, Xnew), lower=True)  # [N, K]
        return self._kernel(Xnew, full_cov=False) - tf.reduce_sum(tf.square(v), 0)

    def release_state(self) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
        """``(content, arrays)`` of a release file (``docs/release_file.md#readouts``): the kernel as a
        specification; the public training inputs ``X``, ``W`` and the Cholesky factors ``Lk`` (of
        ``K + jitter I``) and ``LB`` as arrays. ``X`` is needed to predict (``k(X*, X)``); it is public,
        and no label or statistic of the labels is saved.

        ``NotImplementedError`` when the kernel is not one a release file holds.
        """
        content = {"input_dim": self.input_dim, "kernel": kernel_spec(self._kernel)}
        return content, {"X": self._X.numpy(), "W_diag": self.W_diag.numpy(), "Lk": self._Lk.numpy(),
                         "LB": self._LB.numpy()}

    @staticmethod
    def release_spec() -> ReadoutSpec:
        """What :meth:`release_state` writes, for :func:`dpgp_gpflow.io.readouts.readout_from_state` to read."""
        return ReadoutSpec(points="X", squares=("Lk", "LB"), vectors=("W_diag",), nonnegative=("W_diag",))

    @classmethod
    def from_file_pieces(cls, pieces: ReadoutPieces) -> "LaplaceReadout":
        """The readout of a release file's parsed state (:func:`dpgp_gpflow.io.readouts.readout_from_state`),
        with exactly the saved factors."""
        a = pieces.arrays
        readout = cls.__new__(cls)  # the factors as saved: nothing recomputed
        readout._kernel = pieces.kernel
        readout._X = tf.constant(a["X"])
        readout.W_diag = tf.constant(a["W_diag"])
        readout.input_dim = int(a["X"].shape[1])
        readout._Lk = tf.constant(a["Lk"])
        readout._sqrt_w = tf.sqrt(readout.W_diag)[:, None]
        readout._LB = tf.constant(a["LB"])
        return readout


class SoRReadout:
    """Frozen public pieces of a SoR Laplace prediction from released weights ``w~``: features
    ``Phi* = k(X*, Z) L_ZZ^{-T}`` (``L_ZZ`` factored once) and the variance
    ``diag(Phi* (I + Phi^T W Phi)^{-1} Phi*^T)`` at ``W = I/4`` (the first step from ``w0 = 0``).

    Privacy assumption: ``X``, ``Z`` and the kernel are public.
    """

    def __init__(self, kernel: gpflow.kernels.Kernel, Z: tf.Tensor, X: tf.Tensor) -> None:
        self._kernel = gpflow.utilities.freeze(kernel)
        self.Z = tf.constant(Z)
        self.input_dim = int(self.Z.shape[1])
        m = int(self.Z.shape[0])
        Kmm = self._kernel(self.Z)
        self._Lmm = tf.linalg.cholesky(Kmm + gpflow.config.default_jitter() * tf.eye(m, dtype=Kmm.dtype))
        Phi = self.readout(tf.convert_to_tensor(X, dtype=Kmm.dtype))  # [N, M]
        self._La = weight_precision_cholesky(Phi, tf.fill([tf.shape(Phi)[0]], tf.constant(0.25, dtype=Phi.dtype)))

    def readout(self, Xnew: tf.Tensor) -> tf.Tensor:
        return tf.transpose(tf.linalg.triangular_solve(self._Lmm, self._kernel(self.Z, Xnew), lower=True))  # [K, M]

    def offset(self, Xnew: tf.Tensor) -> tf.Tensor:
        return tf.zeros([tf.shape(Xnew)[0]], dtype=Xnew.dtype)

    def variance(self, Xnew: tf.Tensor) -> tf.Tensor:
        v = tf.linalg.triangular_solve(self._La, tf.transpose(self.readout(Xnew)), lower=True)  # [M, K]
        return tf.reduce_sum(tf.square(v), axis=0)

    def release_state(self) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
        """``(content, arrays)`` of a release file (``docs/release_file.md#readouts``): the kernel as a
        specification; ``Z`` and the Cholesky factors ``Lmm`` and ``La`` as arrays (the training inputs
        are not needed once ``La`` is factored).

        ``NotImplementedError`` when the kernel is not one a release file holds.
        """
        content = {"input_dim": self.input_dim, "kernel": kernel_spec(self._kernel)}
        return content, {"Z": self.Z.numpy(), "Lmm": self._Lmm.numpy(), "La": self._La.numpy()}

    @staticmethod
    def release_spec() -> ReadoutSpec:
        """What :meth:`release_state` writes, for :func:`dpgp_gpflow.io.readouts.readout_from_state` to read."""
        return ReadoutSpec(points="Z", squares=("Lmm", "La"))

    @classmethod
    def from_file_pieces(cls, pieces: ReadoutPieces) -> "SoRReadout":
        """The readout of a release file's parsed state (:func:`dpgp_gpflow.io.readouts.readout_from_state`),
        with exactly the saved factors."""
        a = pieces.arrays
        return cls.from_factors(pieces.kernel, a["Z"], a["Lmm"], a["La"])

    @classmethod
    def from_factors(cls, kernel: gpflow.kernels.Kernel, Z: Any, Lmm: Any, La: Any) -> "SoRReadout":
        """The readout with the given factors ``Lmm = chol(K_ZZ + jitter I)`` and ``La = chol(I + Phi^T
        Phi / 4)`` (e.g. summed over row chunks), nothing recomputed. Public."""
        readout = cls.__new__(cls)
        readout._kernel = gpflow.utilities.freeze(kernel)
        readout.Z = tf.constant(Z)
        readout.input_dim = int(readout.Z.shape[1])
        readout._Lmm = tf.constant(Lmm)
        readout._La = tf.constant(La)
        return readout
