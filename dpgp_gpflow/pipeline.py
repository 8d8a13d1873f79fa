"""The one release path: model contract -> release terms -> noise plan -> draw -> spend.

:func:`release` publishes a :class:`~dpgp_gpflow.contract.PrivateModel`'s predictions at given
inputs; :func:`release_function` publishes a :class:`~dpgp_gpflow.contract.FactoredPrivateModel`'s
m latent values once, so that predictions anywhere are free. Every model's ``release`` and
``release_function`` methods are these functions; a model of your own that meets the contract
can call them directly.

Order of work, the same for every mechanism: validate the privacy parameters and the seed once, into a
frozen :class:`~dpgp_gpflow.mechanisms.ReleaseRequest` (:func:`~dpgp_gpflow.mechanisms.release_request`), check
the leak guard, read the public terms from the model (refused unless finite), then run the release through
:func:`~dpgp_gpflow.measurement.measure`: the one reservation of the budget (nothing private has been computed
yet), then the mechanism (:func:`~dpgp_gpflow.mechanisms.cloak`, :func:`~dpgp_gpflow.mechanisms.standard`), which
neither validates nor reserves: it plans the noise, draws it (:mod:`dpgp_gpflow.sampling`), commits the
one event and returns. A classifier's releases (:class:`~dpgp_gpflow.models.DPLaplaceGPC`'s Newton steps
too, through :func:`cloak_outputs`) leave here marked as a classifier's latent values (:func:`_marked`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, NamedTuple, Optional, Protocol, Tuple, cast, runtime_checkable

import tensorflow as tf
from check_shapes import check_shapes

from .accounting import PrivacyAccountant, Reservation
from .noise_planning import DEFAULT_TOL
from .contract import (
    FactoredPrivateModel,
    PrivateModel,
    PublicReadout,
    ReleaseTerms,
    check_release_hyperparameters,
    dense_map,
    latent_terms_and_readout,
    unstacked,
)
from .mechanisms import ReleaseRequest, cloak, release_request
from .mechanisms.standard import standard
from .measurement import Measurement, measure
from .neighbours import model_neighbours, model_outputs, relation, sensitivity_path
from .released import PrivateFunction, PrivateRelease, clipped_by_default
from .validation import (
    RELEASE_MECHANISMS,
    as_inputs,
    per_output,
    require_float64,
    validate_public_terms,
)

__all__ = ["RELEASE_MECHANISMS", "release", "release_function"]

Mechanism = Literal["cloaking", "standard"]


class StandardTerms(NamedTuple):
    """What Hall et al.'s mechanism needs beyond the release terms (public)."""

    prior_covariance: tf.Tensor  #: [k, k] the GP prior covariance at the test inputs
    unit_sensitivity: tf.Tensor  #: RKHS sensitivity of the mean for a unit change of one output


@runtime_checkable
class SupportsStandardMechanism(Protocol):
    """A :class:`~dpgp_gpflow.contract.PrivateModel` that also offers the standard mechanism."""

    def standard_terms(self, Xnew: tf.Tensor) -> StandardTerms:
        """Prior covariance at ``Xnew`` and the unit RKHS sensitivity (``docs/mechanisms.md#standard-mechanism``)."""


@check_shapes("readout: [K, M]", "return: [M, M]")
def reference_coordinates(readout: tf.Tensor) -> tf.Tensor:
    """Upper-triangular ``R`` (m x m) with ``R^T R = A^T A + ridge I`` for a public readout ``A`` (k x m).

    A factored release publishes ``v = R u`` instead of the m latent values ``u``: then the "mse"
    objective measures the squared error of the predictions ``A u`` at the reference inputs. The
    ridge (``1e-8 tr(A^T A) / m``) keeps ``R`` invertible when the reference inputs barely see some
    directions; mapping back by ``R^{-1}`` is public post-processing.
    """
    m = int(readout.shape[1])
    G = tf.linalg.matmul(readout, readout, transpose_a=True)  # [m, m]
    ridge = 1e-8 * tf.linalg.trace(G) / m
    return tf.transpose(tf.linalg.cholesky(G + ridge * tf.eye(m, dtype=G.dtype)))


def _contract(model: Any, protocol: type = PrivateModel) -> None:
    require_float64()
    if not isinstance(model, protocol):
        raise TypeError(f"{type(model).__name__} does not meet the {protocol.__name__} contract "
                        "(see dpgp_gpflow.contract)")


def recorded_bounds(model: PrivateModel) -> Optional[Tuple[float, float]]:
    """The model's bounds for the mechanism's record: its pair, or None for one pair per output
    (:func:`shaped` records those; the model validated each output's sensitivity against its own)."""
    if per_output(model.y_bounds):
        return None
    lo, hi = model.y_bounds
    return float(lo), float(hi)


def shaped(model: Any, rel: PrivateRelease) -> PrivateRelease:
    """``rel`` recording the neighbouring relation it protects (:func:`~dpgp_gpflow.neighbours.relation`)
    and, for a model of P > 1 outputs per row, shaped as the user reads it: ``mean``, ``variance`` and
    ``noise_std`` [k, P] (unstacked, :func:`~dpgp_gpflow.contract.unstacked`), ``noise_factor`` [kP, r]
    kept stacked output by output, ``y_bounds`` the model's (a pair or one per output)."""
    P = model_outputs(model)
    if P == 1:
        return dataclasses.replace(rel, neighbours=relation(model))
    return dataclasses.replace(rel, mean=unstacked(rel.mean, P), variance=unstacked(rel.variance, P),
                               noise_std=unstacked(rel.noise_std, P), y_bounds=model.y_bounds,
                               neighbours=relation(model))


def _marked(model: Any, rel: PrivateRelease) -> PrivateRelease:
    """``rel`` marked ``classifier_latent`` when ``model`` is a classifier (its ``classifier_latent`` is
    True: the labels' bounds do not bound the latents, so the release refuses :meth:`~PrivateRelease.clipped`).
    The one place a model's release learns it holds a classifier's latent values; every mechanism call of
    this module returns through it."""
    if getattr(model, "classifier_latent", False) is True:
        return dataclasses.replace(rel, classifier_latent=True)
    return rel


def cloak_outputs(model: PrivateModel, request: ReleaseRequest, reservation: Reservation, C: Any, offset: Any,
                  variance: Any, **options: Any) -> PrivateRelease:
    """:func:`~dpgp_gpflow.mechanisms.cloak` of ``offset + C y_c`` for ``model``'s private centred outputs
    ``y_c``, with its public data sensitivity, output bound and bounds; ``request`` validated and
    ``reservation`` taken by the caller (one event committed into it after the draw). Options:
    ``rtol``, ``tol``, ``max_iter``. Marked as a classifier's release when the model is one. The model's
    optional public ``groups`` (persons) are read here, the one place every cloaking release of a model
    passes (:func:`~dpgp_gpflow.neighbours.model_neighbours`): the release protects every person's outputs.
    A model of P > 1 outputs per row releases them stacked (``C`` the stacked map), each row's P outputs one
    person's; the release leaves shaped [k, P] (:func:`shaped`)."""
    y_centred = model.centred_outputs()
    neighbours = model_neighbours(model, int(tf.size(y_centred)))
    return _marked(model, shaped(model, cloak(request, reservation, C, y_centred, offset, variance,
                                               data_sensitivity=model.data_sensitivity,
                                               output_bound=model.output_bound, y_bounds=recorded_bounds(model),
                                               neighbours=neighbours, **options)))


def release(
    model: PrivateModel,
    Xnew: Any,
    *,
    epsilon: float,
    delta: float,
    objective: str = "mse",
    calibration: str = "analytic",
    seed: Optional[int] = None,
    accountant: Optional[PrivacyAccountant] = None,
    mechanism: str = "cloaking",
    hyperparameters_public: bool = False,
    rtol: Optional[float] = None,
    tol: float = DEFAULT_TOL,
) -> PrivateRelease:
    """Release ``model``'s predictive mean at ``Xnew`` with an (epsilon, delta)-DP guarantee.

    Privacy assumptions: everything the contract calls public is (inputs, ``Xnew``,
    hyperparameters, prior mean, inducing inputs); each private output lies in ``model.y_bounds``
    and neighbouring datasets differ in one output by at most ``model.data_sensitivity`` (with the
    model's public ``groups``: in every output of one person, each by at most that; with P > 1 outputs
    per row: in all P outputs of one row, output p by at most its ``d_p``, or of one person's rows with
    ``groups``; the standard mechanism refuses both).
    ``mechanism="cloaking"`` optimises the noise covariance for ``objective`` ("mse": least
    expected squared error; "entropy": the papers' log det); ``mechanism="standard"`` is Hall et
    al.'s GP-prior noise (models that offer :class:`SupportsStandardMechanism`). The budget is
    checked before and charged after (``accountant`` or the innermost ``with PrivacyAccountant``).
    The mean comes back clipped to the model's public ``y_bounds`` (post-processing, free; not a
    classifier's latents); ``.unclipped()`` gives the raw DP mean.
    """
    _contract(model)
    if mechanism not in RELEASE_MECHANISMS:
        raise ValueError(f"mechanism must be one of {RELEASE_MECHANISMS}, got {mechanism!r}")
    if mechanism == "standard" and model_outputs(model) > 1:
        raise NotImplementedError("the standard mechanism does not support several outputs (Y [N, P]) yet: "
                                  "use mechanism='cloaking'")
    if mechanism == "standard" and not isinstance(model, SupportsStandardMechanism):
        raise NotImplementedError(f"{type(model).__name__} has no standard (Hall et al.) mechanism")
    request = release_request(epsilon, delta, calibration=calibration, objective=objective, seed=seed,
                              rtol=rtol, tol=tol)  # rtol and tol too: all refused before anything is reserved
    Xnew = tf.constant(as_inputs("Xnew", Xnew, int(model.input_dim)))
    check_release_hyperparameters(model, hyperparameters_public)
    # the public terms, checked finite before any budget is reserved (a refusal draws and spends nothing)
    terms = model.release_terms(Xnew)
    more = {"variance": terms.variance}
    if mechanism == "standard":
        standard_terms = cast(SupportsStandardMechanism, model).standard_terms(Xnew)
        more.update(prior_covariance=standard_terms.prior_covariance, unit_sensitivity=standard_terms.unit_sensitivity)
    C = dense_map(terms.map)
    validate_public_terms(f"{mechanism} release", C, terms.offset, model.output_bound, **more)
    if model_neighbours(model, int(C.shape[1])) is not None and mechanism == "standard":  # groups checked here too
        raise NotImplementedError("the standard mechanism does not support groups= (person-level privacy) yet: "
                                  "use mechanism='cloaking'")

    def draw(reservation: Reservation) -> PrivateRelease:  # the mechanism commits its one event
        if mechanism == "standard":
            mean = terms.offset + tf.linalg.matvec(dense_map(terms.map), model.centred_outputs())
            return _marked(model, standard(request._replace(objective=None), reservation, mean, terms.variance,
                                           standard_terms.prior_covariance,
                                           sensitivity=float(standard_terms.unit_sensitivity) * model.data_sensitivity,
                                           data_sensitivity=model.data_sensitivity, y_bounds=recorded_bounds(model)))
        return cloak_outputs(model, request, reservation, terms.map, terms.offset, terms.variance, rtol=rtol, tol=tol)

    path = sensitivity_path(model)  # the relation is checked against it; the card's is the measurement's
    rel = measure(Measurement(request, path.relation(), draw, path=path), accountant)  # the one reservation
    return clipped_by_default(rel)  # post-processing, free: rel.unclipped() is the raw DP mean


def _latent_variance(covariance: Optional[tf.Tensor], R: Optional[tf.Tensor], m: int) -> tf.Tensor:
    """Public variance [m] of the released coordinates ``R u`` from the latents' covariance (or
    variances, [m], usable only without ``R``); zeros where the model reports none."""
    if covariance is None or (R is not None and covariance.shape.rank == 1):
        return tf.zeros([m], dtype=tf.float64)
    if covariance.shape.rank == 1:
        return covariance
    if R is None:
        return tf.linalg.diag_part(covariance)
    return tf.reduce_sum(tf.linalg.matmul(R, covariance) * R, axis=1)  # diag(R S R^T)


def release_function(
    model: FactoredPrivateModel,
    *,
    epsilon: float,
    delta: float,
    objective: str = "mse",
    calibration: str = "analytic",
    seed: Optional[int] = None,
    accountant: Optional[PrivacyAccountant] = None,
    hyperparameters_public: bool = False,
    reference_inputs: Any = None,
    rtol: Optional[float] = None,
    tol: float = DEFAULT_TOL,
    function_type: type = PrivateFunction,
) -> PrivateFunction:
    """Release ``model``'s m latent values once; the returned function predicts anywhere for free.

    ``reference_inputs=None`` releases the latents ``u = B y_c`` themselves. With public
    ``reference_inputs`` the release is of ``R u`` (:func:`reference_coordinates` of the readout
    there), so ``objective="mse"`` minimises the expected squared error of the predictions at the
    reference inputs; ``"entropy"`` is the same either way (invariant to invertible maps). Privacy
    assumptions as for :func:`release`; the readout is a frozen copy of public pieces, so training
    the model afterwards does not change what was published. A model of P > 1 outputs per row releases
    its latents stacked output by output (its latent map and readout stacked alike: ``mean`` [m, P],
    ``noise_factor`` [mP, r]). A regression function predicts means clipped to the public ``y_bounds``
    (post-processing, free: :class:`~dpgp_gpflow.released.PrivateFunction`'s default); ``.unclipped()``
    predicts the raw ones.
    """
    _contract(model, FactoredPrivateModel)
    request = release_request(epsilon, delta, calibration=calibration, objective=objective, seed=seed,
                              rtol=rtol, tol=tol)  # rtol and tol too: all refused before anything is reserved
    check_release_hyperparameters(model, hyperparameters_public)
    # the public terms, checked finite before any budget is reserved (a refusal draws and spends nothing)
    latent, readout = latent_terms_and_readout(model)
    latent = latent._replace(map=dense_map(latent.map))  # B [m, n], formed once
    validate_public_terms("latent release", latent.map, latent.offset, model.output_bound, variance=latent.variance)
    model_neighbours(model, int(dense_map(latent.map).shape[1]))  # groups checked before anything is reserved
    _check_reference_offset(model, latent.offset, reference_inputs)

    def draw(reservation: Reservation) -> PrivateFunction:  # the mechanism commits its one event
        return function_type(*_latent_release(model, request, reservation, latent=latent, readout=readout,
                                              reference_inputs=reference_inputs, rtol=rtol, tol=tol))

    path = sensitivity_path(model)
    # the function's file holds the kernel and mean function: measure refuses one its file cannot hold
    pieces = (getattr(model, "kernel", None), getattr(model, "mean_function", None))
    return measure(Measurement(request, path.relation(), draw, path=path, file_pieces=pieces),
                   accountant)  # the one reservation


def _check_reference_offset(model: Any, offset: Any, reference_inputs: Any) -> None:
    """``ValueError`` when a release in reference coordinates would carry a non-zero latent offset.

    With ``reference_inputs`` the release is ``R B y_c`` plus the latents' offset as is, which is the
    offset of ``R u = R (offset + B y_c)`` only when that offset is 0. Every model's is (the streamed
    release and :func:`dpgp_gpflow.privacy_audit.audit` assume the same); a model whose is not is refused
    here, from public terms, before any budget is reserved."""
    if reference_inputs is not None and bool(tf.reduce_any(tf.convert_to_tensor(offset, tf.float64) != 0.0)):
        raise ValueError(f"{type(model).__name__}'s latents have a non-zero offset: a release in reference "
                         "coordinates (reference_inputs) assumes the latents' offset is 0 (it would be released "
                         "unmapped by R); release without reference_inputs")


def _latent_release(model: FactoredPrivateModel, request: ReleaseRequest, reservation: Reservation, *,
                    latent: ReleaseTerms, readout: PublicReadout, reference_inputs: Any,
                    **options: Any) -> Tuple[PrivateRelease, Any, Optional[tf.Tensor]]:
    """The release of ``R u`` (or ``u``), the frozen readout and ``R``; ``latent`` and ``readout``: the
    model's :meth:`latent_terms` (with a dense map, checked by the caller) and :meth:`public_readout`;
    ``request`` validated and ``reservation`` taken by the caller. In reference coordinates the release is
    ``R B y_c`` with the latents' offset as is: the caller has checked that offset is 0
    (:func:`_check_reference_offset`)."""
    B = tf.convert_to_tensor(latent.map)  # [m, n]: dense (the caller formed it)
    m = int(B.shape[0])
    R = None
    if reference_inputs is not None:
        Xref = tf.constant(as_inputs("reference_inputs", reference_inputs, int(model.input_dim)))
        R = reference_coordinates(readout.readout(Xref))  # [m, m] upper triangular
        B = tf.linalg.matmul(R, B)
    variance = _latent_variance(latent.variance, R, m)
    rel = cloak_outputs(model, request, reservation, B, latent.offset, variance, **options)
    return rel, readout, R
