"""The contract every private model meets, and the one function that reads a cloaking matrix from it.

A private model's released quantity is *linear* in its clipped, publicly centred private outputs
``y_c = clip(y) - m(X)``:

    released = offset + C y_c + noise,          C = A B  (optionally factored),

where ``C``, ``offset`` and the posterior ``variance`` are public: functions of the public inputs,
hyperparameters and inducing inputs only (``docs/mechanisms.md#the-private-linear-release``).
:class:`PrivateModel` is that contract; release (:mod:`dpgp_gpflow.pipeline`), private
hyperparameter selection (:mod:`dpgp_gpflow.selection`) and the standard mechanism consume only it.
:class:`FactoredPrivateModel` adds what a model needs to release its m latent values once and
predict anywhere from them (:class:`PublicReadout`).

A model of your own meets the contract by providing these members; mixing in
:class:`~dpgp_gpflow.models.PrivateModelMixin` then gives it ``release`` (and ``release_function``
if it is factored), and :func:`~dpgp_gpflow.selection.select_hyperparameters` works on it unchanged.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Protocol, Tuple, Union, runtime_checkable

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from .leak_guard import validate_declaration
from .validation import reading_once, validate_hyperparameter_magnitudes

__all__ = [
    "FactoredPrivateModel", "PrivateModel", "PublicReadout", "ReleaseMap", "ReleaseTerms", "cloaking_matrix",
]

#: A k x n cloaking matrix ``C``, or its factors ``(A, B)`` (k x m and m x n) with ``C = A B``.
ReleaseMap = Union[tf.Tensor, Tuple[tf.Tensor, tf.Tensor]]


class ReleaseTerms(NamedTuple):
    """The public terms of a linear release ``offset + C y_c``: nothing here depends on the outputs."""

    map: ReleaseMap  #: ``C`` [k, n], or ``(A, B)`` with ``C = A B``
    offset: tf.Tensor  #: [k] the released value when every centred output is 0
    #: [k] public posterior variance of the released values (for latent terms: [m], or the full [m, m]
    #: covariance, or None when the model reports none)
    variance: Optional[tf.Tensor] = None


@runtime_checkable
class PublicReadout(Protocol):
    """Frozen public pieces that map m released latent values to predictions anywhere.

    Predictions at ``Xnew`` are ``offset(Xnew) + readout(Xnew) u`` with public posterior variance
    ``variance(Xnew)``. Privacy assumption: it holds copies of public quantities only (kernel,
    inducing inputs, factorisations of public matrices), never the outputs, and nothing in it
    changes when the model it came from is trained later.
    """

    input_dim: int

    def readout(self, Xnew: tf.Tensor) -> tf.Tensor:
        """``A(Xnew)`` [k, m]."""

    def offset(self, Xnew: tf.Tensor) -> tf.Tensor:
        """The public prior mean at ``Xnew`` [k]."""

    def variance(self, Xnew: tf.Tensor) -> tf.Tensor:
        """The public posterior variance at ``Xnew`` [k] (without the DP noise)."""

    # Optional: ``readout_and_variance(Xnew)``, both at once where they share work
    # (:func:`readout_and_variance`); ``num_outputs`` (P, default 1): a readout of P outputs sharing one
    # readout ``a(x)`` maps the latents stacked output by output, ``readout(Xnew)`` being ``I_P kron a(Xnew)``
    # [kP, mP], ``offset`` and ``variance`` [kP] stacked alike (:func:`output_map`, :func:`stacked`).


def readout_and_variance(readout: PublicReadout, Xnew: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """``(readout.readout(Xnew), readout.variance(Xnew))``, computed together where the readout offers
    ``readout_and_variance`` (the sparse readouts solve the same m x k systems for both)."""
    both = getattr(readout, "readout_and_variance", None)
    return both(Xnew) if both is not None else (readout.readout(Xnew), readout.variance(Xnew))


@runtime_checkable
class PrivateModel(Protocol):
    """What release, selection and the audits need from a private model; every member but
    :meth:`centred_outputs` is public.

    * ``y_bounds``: public bounds ``(lo, hi)`` of each private output; ``data_sensitivity``: how far
      one output may move between neighbours (``d <= hi - lo``).
    * ``output_bound``: a public bound on ``|y_c,i|`` for every centred output.
    * ``input_dim``: the number of input columns.
    * :meth:`release_terms`: the linear map from the centred outputs to the released values at ``Xnew``.
    * :meth:`split_terms`: the same map for a (train, test) split of the training points, from the
      centred outputs at ``train`` to the centred predictions at ``test`` (for cross-validation).
    * :meth:`check_hyperparameters_public`: raises ``PrivacyLeakError`` when the hyperparameters may
      have been fitted on the outputs and ``declared`` does not say otherwise (the leak guard).
    """

    y_bounds: Tuple[float, float]
    data_sensitivity: float

    @property
    def output_bound(self) -> float:
        """Public bound on ``|y_i - m(x_i)|``."""

    @property
    def input_dim(self) -> int:
        """Number of input columns."""

    def centred_outputs(self) -> tf.Tensor:
        """PRIVATE: the clipped outputs minus the public prior mean, [n]."""

    def release_terms(self, Xnew: tf.Tensor) -> ReleaseTerms:
        """The public map, offset and posterior variance of the predictions at ``Xnew`` [k, D]."""

    def split_terms(self, train: np.ndarray, test: np.ndarray) -> ReleaseTerms:
        """The public map from ``y_c[train]`` to the centred predictions at the points ``test``."""

    def check_hyperparameters_public(self, declared: bool) -> None:
        """Raise ``PrivacyLeakError`` unless the hyperparameters are public (or ``declared`` so)."""

    # Optional: ``check_undeclared_hyperparameters()``, called before releases
    # (:func:`check_release_hyperparameters`): raises for values it cannot tell from fitted ones.


@runtime_checkable
class FactoredPrivateModel(PrivateModel, Protocol):
    """A :class:`PrivateModel` whose predictions anywhere go through m latent values ``u = B y_c``.

    * :meth:`latent_terms`: ``B`` [m, n] with the latents' public offset and posterior variance.
    * :meth:`public_readout`: a frozen :class:`PublicReadout` mapping ``u`` to predictions anywhere.
    """

    def latent_terms(self) -> ReleaseTerms:
        """``B`` [m, n], offset [m] and variance [m] of the latent values."""

    def public_readout(self) -> PublicReadout:
        """A frozen copy of the public pieces that turn released latents into predictions."""

    # Optional: ``latent_terms_and_readout()``, both at once where they share work
    # (:func:`latent_terms_and_readout`).


def latent_terms_and_readout(model: FactoredPrivateModel) -> Tuple[ReleaseTerms, PublicReadout]:
    """``(model.latent_terms(), model.public_readout())``, computed together where the model offers
    ``latent_terms_and_readout`` (the sparse models factor the same m x n matrices for both)."""
    both = getattr(model, "latent_terms_and_readout", None)
    return both() if both is not None else (model.latent_terms(), model.public_readout())


def check_release_hyperparameters(model: PrivateModel, declared: bool) -> None:
    """The leak guard before a release: ``model.check_hyperparameters_public(declared)`` (raises), then,
    unless ``declared``, the optional ``model.check_undeclared_hyperparameters()`` (values given at
    construction and never declared public: fitted elsewhere on the same outputs, they would leak; raises
    ``PrivacyLeakError``, or warns inside ``with dpgp_gpflow.allow_undeclared_hyperparameters():``). Each
    parameter is read once for all of them (:func:`~dpgp_gpflow.validation.reading_once`)."""
    declared = validate_declaration(declared)  # a truthy string must not declare everything public
    with reading_once():
        model.check_hyperparameters_public(declared)
        check = getattr(model, "check_undeclared_hyperparameters", None)
        if not declared and check is not None:
            check()
        # and their magnitudes: beyond +-MAX_MAGNITUDE (or a positive scale below its reciprocal) the release
        # overflows
        validate_hyperparameter_magnitudes(model)


def dense_map(map_: ReleaseMap) -> tf.Tensor:
    """``C`` itself, or ``A B`` for a factored map."""
    if isinstance(map_, (tuple, list)):
        A, B = map_
        return tf.linalg.matmul(A, B)
    return tf.convert_to_tensor(map_, dtype=tf.float64)


# -- several outputs per row: the stacking convention (docs/guides/multi_output.md) -------------------


@check_shapes("values: [N, P]", "return: [NP]")
def stacked(values: Any) -> tf.Tensor:
    """``vec`` of an [N, P] array, output by output: all N rows of output 1, then of output 2, ...
    (entry ``p N + i`` is row i's output p). The one order every release of several outputs uses."""
    return tf.reshape(tf.transpose(tf.convert_to_tensor(values, tf.float64)), [-1])


def unstacked(values: Any, num_outputs: int) -> np.ndarray:
    """The [k, P] array of a stacked vector of ``k P`` values (:func:`stacked`'s inverse); P = 1: unchanged."""
    values = np.asarray(values)
    if num_outputs == 1:
        return values
    return values.reshape(int(num_outputs), -1).T.copy()


@check_shapes("C: [K, N]", "return: [KP, NP]")
def output_map(C: tf.Tensor, num_outputs: int) -> tf.Tensor:
    """``I_P kron C`` (kP x NP): the map of ``P = num_outputs`` outputs sharing ``C``, rows and columns
    stacked output by output (:func:`stacked`); ``C`` itself for P = 1. Public."""
    if num_outputs == 1:
        return C
    P = int(num_outputs)
    k, n = tf.shape(C)[0], tf.shape(C)[1]  # also traced with an unknown number of rows (a SavedModel)
    return tf.reshape(tf.einsum("pq,kn->pkqn", tf.eye(P, dtype=C.dtype), C), [P * k, P * n])


@check_shapes("offset: [K, Q]", "return: [KP]")
def output_offset(offset: tf.Tensor, num_outputs: int) -> tf.Tensor:
    """The offset [k, 1] (every output's) or [k, P] of ``P = num_outputs`` outputs stacked output by output
    (:func:`stacked`): [kP]; ``offset[:, 0]`` for P = 1. Public."""
    if num_outputs == 1:
        return offset[:, 0]
    return stacked(tf.broadcast_to(offset, [tf.shape(offset)[0], int(num_outputs)]))


@check_shapes("C: [K, N]", "offset: [K, Q]", "variance: [K]")
def output_terms(C: tf.Tensor, offset: tf.Tensor, variance: Optional[tf.Tensor], num_outputs: int) -> ReleaseTerms:
    """The release terms of ``P = num_outputs`` outputs sharing one map ``C`` (a shared kernel and
    likelihood): ``offset`` [k, 1] or [k, P], ``variance`` [k] (or None: none reported). P = 1:
    ``(C, offset[:, 0], variance)``; P > 1: the stacked release ``(I_P kron C) vec(Y_c)``, i.e. the
    block-diagonal map (kP x NP, :func:`output_map`), the offset stacked and the variance repeated per
    output (:func:`stacked`). Public."""
    if num_outputs == 1:
        return ReleaseTerms(C, offset[:, 0], variance)
    P = int(num_outputs)
    stacked_variance = None if variance is None else tf.tile(variance, [P])
    return ReleaseTerms(output_map(C, P), output_offset(offset, P), stacked_variance)


@check_shapes("return: [M, N]")
def cloaking_matrix(model: Any, Xnew: Any) -> tf.Tensor:
    """The k x n cloaking matrix ``C`` of any :class:`PrivateModel` at ``Xnew``: how its released
    predictions move when one centred output moves (for the classifiers, the latent mean at ``Xnew``
    after the first Newton step from zero). Public.

    For a model of P > 1 outputs per row (``DPGPR``, ``DPSGPR`` or ``DPGPRFITC`` with ``Y`` [N, P]) it is
    the stacked map ``I_P kron C`` (kP x NP): rows and columns output by output (all k predictions of output 1, then
    output 2, ...; all N rows of output 1, then output 2, ...), so ``mean = offset + C vec(Y_c)`` with
    the release's [k, P] mean and ``Y_c`` [N, P] stacked the same way (:func:`stacked`).
    """
    if isinstance(model, PrivateModel):
        Xnew = tf.convert_to_tensor(Xnew, dtype=tf.float64)
        return dense_map(model.release_terms(Xnew).map)
    raise TypeError(
        f"{type(model).__name__} has no cloaking matrix: it does not meet the dpgp_gpflow.contract.PrivateModel "
        "contract (y_bounds, data_sensitivity, output_bound, input_dim, centred_outputs, release_terms, "
        "split_terms, check_hyperparameters_public)"
    )
