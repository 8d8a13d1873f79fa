"""Release a sparse model's latent values without holding its m x n map: :func:`release_function`.

The same release as :meth:`~dpgp_gpflow.models.DPSGPR.release_function` (and ``DPGPRFITC``'s, and
``DPSparseLaplaceGPC.release``'s first Newton step of its SoR weights): same
contract, same rank rule, same optimiser, same exact sampler, same accounting. What changes is only
where the numbers come from: the m x m factors from chunk sums, the column space from a tall-skinny
QR, the rank rule's biases, the optimiser's leverages and certificate, the sensitivity and the
whitened query from reductions over row chunks (:mod:`dpgp_gpflow.streaming.solver`), supplied by
:class:`ChunkedRelease` to the one sequence every cloaking release runs
(:func:`~dpgp_gpflow.mechanisms.cloaking.plan_cloaking`) and published by the one check, draw and spend
(:func:`~dpgp_gpflow.mechanisms.publish_cloaking`). Memory is
O(m^2 + m c + r |work|) for chunks of c rows, plus the inputs themselves (which may be a memory map
or a Dask array).

Privacy assumption: as for :func:`dpgp_gpflow.pipeline.release_function`: the inputs, ``Z``, the
kernel, the noise variance and the prior mean are public; each output lies in ``y_bounds`` (clipped
per chunk before anything is computed from it) and moves by at most ``data_sensitivity`` between
neighbours. The chunking is public. With persons (the model's ``groups``) the persons are the ids the source
carries of its own rows, checked against the model's (:func:`~dpgp_gpflow.streaming.chunks.source_persons`),
never the source's row order. The noise is drawn once, here, from :mod:`dpgp_gpflow.sampling`.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional

import numpy as np
import tensorflow as tf
from sklearn.cluster import MiniBatchKMeans

from ..accounting import PrivacyAccountant, Reservation
from ..noise_planning import DEFAULT_TOL, candidate_rtols
from ..noise_planning.rank import bias_rounding, projection_bias
from ..contract import check_release_hyperparameters
from ..pipeline import recorded_bounds, reference_coordinates, shaped
from ..mechanisms import (ReleaseRequest, check_noise_condition, publish_cloaking, release_request,
                          safe_sensitivity)
from ..mechanisms.cloaking import (checked_noise, factor_in_basis, optimiser_scale, plan_cloaking, release_record,
                                  whitened_sensitivity_of_norms)
from ..measurement import Measurement, measure, running_path
from ..neighbours import model_outputs, sensitivity_path
from ..released import PrivateFunction, PrivatePrediction
from ..validation import as_inputs, require_float64
from ..provenance import mark_data_derived
from .chunks import DEFAULT_CHUNK_SIZE, ChunkSource, LocalChunks, check_source_shape, person_starts, source_persons
from .dask_chunks import DaskChunks
from .persons import ChunkPersons
from .solver import (
    StreamedMap,
    StreamedQuery,
    column_spaces,
    optimise_noise_covariance,
    projection_rows,
    sensitivities,
)
from .terms import ChunkTerms, Factors, add_summaries

__all__ = ["minibatch_kmeans_inducing_inputs", "predict", "release_function"]  # cloak_function: internal


def minibatch_kmeans_inducing_inputs(X: Any, num_inducing: int, *, seed: int = 0,
                                     chunk_size: int = DEFAULT_CHUNK_SIZE) -> np.ndarray:
    """Inducing inputs by scikit-learn's ``MiniBatchKMeans``, fed the public inputs a chunk at a time
    (``partial_fit``), so ``X`` may be a memory map or a Dask array. Seeded, deterministic.

    Privacy assumption: ``X`` is public; the outputs are never used. The centres are marked as computed from
    the inputs (:func:`~dpgp_gpflow.provenance.mark_data_derived`): a model whose inputs are private
    refuses them.
    """
    n = int(np.shape(X)[0])
    if not (isinstance(num_inducing, (int, np.integer)) and 1 <= num_inducing <= n):
        raise ValueError(f"num_inducing must be an integer in [1, {n}], got {num_inducing!r}")
    step = max(int(chunk_size), 3 * int(num_inducing))
    km = MiniBatchKMeans(n_clusters=int(num_inducing), random_state=seed, batch_size=min(step, 4096), n_init=3)
    for start in range(0, n, step):
        chunk = np.asarray(X[start:start + step], dtype=np.float64)
        if chunk.shape[0] < num_inducing:  # a short last chunk: partial_fit needs >= k rows only at first
            chunk = np.asarray(X[max(0, n - step):n], dtype=np.float64)
        km.partial_fit(chunk)
    centres = np.asarray(km.cluster_centers_, dtype=np.float64)
    mark_data_derived(centres)
    return centres


def _summary_chunk(X, start, terms, L):
    return terms.summaries(X, L)


def streamed_map(model: Any, source: Optional[ChunkSource] = None, *, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 reference_inputs: Any = None) -> StreamedMap:
    """The released map of ``model.release_function`` (``R B``, or ``B``) as a :class:`StreamedMap`.

    ``source``: where the rows live (default: the model's Dask rows in their own chunks, on the active
    Dask client's cluster if any; or ``model.data`` in chunks of ``chunk_size``; either carrying the model's
    ``groups``); a source of other input columns or outputs per row than the model's: ``ValueError``.
    ``reference_inputs``: None for the training inputs when ``model.reference_training_inputs`` (as
    the in-memory release), ``False`` for the latents themselves, or public inputs.
    With the model's public ``groups`` (persons) the persons are the ids the source carries of its own rows
    (:func:`~dpgp_gpflow.streaming.chunks.source_persons`: the model's row for row, each person's rows
    consecutive, else ``ValueError``); the chunks are recut to end where a person starts, and the map carries
    the persons' neighbour map
    (:class:`~dpgp_gpflow.streaming.persons.ChunkPersons`); so does a model of P > 1 outputs per row, whose
    rows (or persons) hold P entries each. Public.
    """
    terms = ChunkTerms.from_model(model)
    source = _model_source(model, terms, source, chunk_size)
    persons = None
    # the source's own ids, never its order; its inputs the model's row for row where the model holds them
    ids = source_persons(source, getattr(model, "groups", None), model_inputs(model))
    if ids is not None:  # public: the chunks are recut between persons from the groups alone
        source = source.between_persons(person_starts(ids, source.n))
    P = model_outputs(model)
    if P != terms.num_outputs:
        raise ValueError(f"the model has {P} outputs per row, its chunk terms {terms.num_outputs}")
    if ids is not None or P > 1:  # a row of P outputs: a person of P entries
        persons = ChunkPersons(np.arange(source.n) if ids is None else ids, source.chunk_bounds(),
                               model.output_sensitivities if P > 1 else None)
    L = terms.kuu_cholesky()
    sums = source.map_inputs(_summary_chunk, add_summaries, terms, L)
    training = reference_inputs is None and bool(getattr(model, "reference_training_inputs", True))
    factors = terms.factors(L, sums, reference=training)
    if reference_inputs is not None and reference_inputs is not False:
        Xref = tf.constant(as_inputs("reference_inputs", reference_inputs, int(terms.Z.shape[1])))
        factors = Factors(factors.L, factors.LB, reference_coordinates(terms.readout(factors).readout(Xref)))
    object.__setattr__(terms, "output_bound", float(sums["output_bound"]))
    return StreamedMap(source, terms, factors, persons)


def rows_source(model: Any, source: Optional[ChunkSource] = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> ChunkSource:
    """Where a streamed release reads ``model``'s rows: ``source`` (a :class:`ChunkSource`, else ``TypeError``),
    else the model's Dask rows (on the active Dask client's cluster, if any) or its in-memory ``data`` in
    chunks of ``chunk_size``, carrying the model's ``groups`` (its own rows' person ids). Public."""
    if source is not None:
        if not isinstance(source, ChunkSource):
            raise TypeError(f"source must be a dpgp_gpflow.streaming.ChunkSource, got {type(source).__name__}")
        return source
    groups = getattr(model, "groups", None)
    if getattr(model, "dask_rows", None) is not None:
        return DaskChunks(*model.dask_rows, groups=groups)
    X, Y = model.data
    return LocalChunks(np.asarray(X), np.asarray(Y), chunk_size, groups=groups)


def model_inputs(model: Any) -> Optional[np.ndarray]:
    """``model``'s public inputs [n, D] when it holds them in memory (None for a model built from Dask rows),
    which a streamed release with persons checks its source against (:func:`~.chunks.source_persons`)."""
    if getattr(model, "dask_rows", None) is not None:
        return None
    return np.asarray(model.data[0], dtype=np.float64)


def _model_source(model: Any, terms: ChunkTerms, source: Optional[ChunkSource], chunk_size: int) -> ChunkSource:
    """:func:`rows_source`, checked against the model's input columns and outputs per row
    (:func:`~dpgp_gpflow.streaming.chunks.check_source_shape`). Public."""
    source = rows_source(model, source, chunk_size)
    check_source_shape(source, int(terms.Z.shape[1]), terms.num_outputs)
    return source


def release_function(
    model: Any,
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
    max_iter: int = 2000,
    source: Optional[ChunkSource] = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    stats: Optional[Dict[str, Any]] = None,
) -> PrivateFunction:
    """``model.release_function(...)`` for a ``DPGPRFITC`` or ``DPSGPR`` (``model.release(...)`` for a
    ``DPSparseLaplaceGPC``), streamed over row chunks.

    Same arguments and result as :func:`dpgp_gpflow.pipeline.release_function` (``reference_inputs``:
    see :func:`streamed_map`), plus ``source`` (a :class:`~dpgp_gpflow.streaming.chunks.ChunkSource`,
    e.g. :class:`~dpgp_gpflow.distributed.DaskChunks`; default: the model's rows, see :func:`streamed_map`;
    for a model with ``groups`` the source must carry the person ids of its own rows, ``groups=``, the model's
    row for row, else ``ValueError`` before anything is reserved), ``chunk_size`` and
    ``stats`` (a dict receiving the optimiser's rounds, distinct columns and whether its start was
    exact). With the same seed the result equals the in-memory release up to floating-point summation
    order and the sign convention of the noise's eigenvectors (the noise covariance, the noise std and
    the mean before noise agree; see ``docs/guides/scaling.md``). Privacy assumptions: see the module docstring.
    """
    require_float64()
    request = release_request(epsilon, delta, calibration=calibration, objective=objective, seed=seed,
                              rtol=rtol, tol=tol)  # once, rtol and tol included, before anything is reserved
    terms = ChunkTerms.from_model(model)  # the supported models only, before anything else
    source = _model_source(model, terms, source, chunk_size)  # its shape against the model's, nothing reserved
    # the persons: the source's own ids, the model's row for row, each person's rows consecutive (else one line),
    # before anything is reserved
    source_persons(source, getattr(model, "groups", None), model_inputs(model))
    check_release_hyperparameters(model, hyperparameters_public)

    def draw(reservation: Reservation) -> PrivateFunction:  # cloak_function commits the one event
        return cloak_function(model, request, reservation, reference_inputs=reference_inputs, rtol=rtol, tol=tol,
                              max_iter=max_iter, source=source, chunk_size=chunk_size, stats=stats)

    path = sensitivity_path(model)  # the relation is checked against it before anything is reserved
    pieces = (model.kernel, getattr(model, "mean_function", None))  # the function's file holds them
    return measure(Measurement(request, path.relation(), draw, path=path, file_pieces=pieces),
                   accountant)  # the one reservation


def cloak_function(
    model: Any,
    request: ReleaseRequest,
    reservation: Reservation,
    *,
    reference_inputs: Any = None,
    rtol: Optional[float] = None,
    tol: float = DEFAULT_TOL,
    max_iter: int = 2000,
    source: Optional[ChunkSource] = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    stats: Optional[Dict[str, Any]] = None,
) -> PrivateFunction:
    """The streamed release of ``model``'s latent values under a validated ``request``
    (:func:`~dpgp_gpflow.mechanisms.release_request`: its epsilon, delta, calibration, objective, multiplier
    and seed are used as they are) and a held ``reservation`` (:func:`~dpgp_gpflow.accounting.reserve`),
    into which it commits exactly one event, after the draw: the streamed counterpart of
    :func:`dpgp_gpflow.pipeline.cloak_outputs`, and the body of :func:`release_function`.

    Internal: it runs inside :func:`~dpgp_gpflow.measurement.measure` only (``RuntimeError`` otherwise, before
    any pass over the chunks), whose measurement validates the privacy parameters, checks the leak guard
    (:func:`~dpgp_gpflow.contract.check_release_hyperparameters`) and the file pieces and reserves:
    :func:`release_function`, and the multiclass streamed release (one per class, all committed into one
    reservation), which it does not repeat. It refuses, before any draw, what streaming does not support (a model
    without ``chunk_terms()``, persons whose rows are not consecutive, a ``source`` that does not carry the
    model's person ids, :func:`~dpgp_gpflow.streaming.chunks.source_persons`) and a noise that cannot be
    guaranteed; a refusal before the draw commits nothing. ``reservation`` must be one
    :func:`~dpgp_gpflow.accounting.reserve` issued, holding ``request``'s event as its next uncommitted one
    (:meth:`~dpgp_gpflow.accounting.Reservation.expect`: else ``TypeError`` / ``ValueError``). Keywords as for
    :func:`release_function`; returns ``model.function_type`` (default
    :class:`~dpgp_gpflow.released.PrivateFunction`) of the release, the frozen readout and ``R``.
    Privacy assumptions: see the module docstring.
    """
    reservation.expect((request.event(),))  # the package's, holding this request's event next: before anything
    running_path()  # fail-fast (RuntimeError) before the passes over the chunks (public inputs, but minutes on a
    # cluster); the rule itself is the commit's (Reservation.commit) and publish_cloaking's check_covered
    multiplier, seed = request.multiplier, request.seed
    objective = request.objective
    if objective is None:
        raise ValueError("a streamed cloaking release needs the request's objective ('mse' or 'entropy')")
    rtols = candidate_rtols(objective, rtol)  # the tolerances the rank rule tries
    stats = {} if stats is None else stats
    cmap = streamed_map(model, source, chunk_size=chunk_size, reference_inputs=reference_inputs)
    # output_bound: set on the terms by streamed_map from the chunks' summaries
    d, b = float(model.data_sensitivity), float(cmap.terms.output_bound)  # type: ignore[attr-defined]
    columns = ChunkedRelease(cmap, rtols, objective, d, b, tol=float(tol), max_iter=int(max_iter), stats=stats)
    planned = plan_cloaking(columns, multiplier, d, b)
    m = int(planned.noise_factor.shape[0])  # P outputs: the m P latents, stacked output by output
    # the outputs are read once, chunk by chunk (clipped first), where publish_cloaking checks the shift: z = W y
    rel = publish_cloaking(  # the latents' offset is 0
        noise_factor=planned.noise_factor, whitening=planned.whitening, y_centred=None, offset=np.zeros(m),
        variance=np.zeros(m), sensitivity=planned.sensitivity, multiplier=multiplier, output_bound=b,
        reservation=reservation, seed=seed, **release_record(request, d, planned.chosen, recorded_bounds(model)))
    if cmap.persons is not None:  # the relation protected, shaped [m, P] for P outputs, as in memory
        rel = shaped(model, rel)
    function_type = getattr(model, "function_type", PrivateFunction)
    return function_type(rel, cmap.terms.readout(cmap.factors), cmap.factors.R)


class _StreamedNoise(NamedTuple):
    """A column space's noise, optimised by chunks (:func:`~dpgp_gpflow.streaming.solver.optimise_noise_covariance`)."""

    factor: tf.Tensor  #: [r, r] in basis coordinates (unit multiplier)
    sensitivity: float  #: the Mahalanobis sensitivity against ``factor`` (safety factors included)
    certificate: Any  #: the optimiser's certificate
    largest: float  #: ``max_i ||w_i||`` (persons: ``max_j ||W A_j||``) of ``W = factor^{-1} basis^T C``
    total: float  #: ``sum_i ||w_i||``


class ChunkedRelease:
    """The chunked provider of the one cloaking sequence (:func:`~dpgp_gpflow.mechanisms.cloaking.plan_cloaking`):
    the column operations of the released map ``cmap`` by reductions over its chunks: the candidate spaces
    (a tall-skinny QR) and their rank-rule terms (one pass for all), the noise optimiser over
    :class:`~dpgp_gpflow.streaming.solver.StreamedColumns`, the sensitivity and ``W``'s norms (one pass), and
    the whitened query (:class:`~dpgp_gpflow.streaming.solver.StreamedQuery`). Public: nothing here reads an
    output but the query, which :func:`~dpgp_gpflow.mechanisms.publish_cloaking` checks and draws for."""

    def __init__(self, cmap: StreamedMap, rtols, objective: str, data_sensitivity: float, output_bound: float, *,
                 tol: float, max_iter: int, stats: Dict[str, Any]) -> None:
        self.cmap, self.objective, self.d = cmap, objective, float(data_sensitivity)
        self.tol, self.max_iter, self.stats = tol, max_iter, stats
        self.spaces = column_spaces(cmap, rtols)
        self._rows, self._coordinate_max = projection_rows(cmap, self.spaces)
        self._rounding = bias_rounding(*self._rows[0], float(output_bound))
        self._output_bound = float(output_bound)

    @property
    def candidate_count(self) -> int:
        return len(self.spaces)

    def ratio_and_bias(self, i):
        return projection_bias(*self._rows[int(i)], self._output_bound, self.d, self._rounding)

    def noise(self, i):
        space = self.spaces[int(i)]
        basis = space.basis.numpy()  # [m, r]
        scale = optimiser_scale(space.singular_values, self.objective).numpy()
        noise = optimise_noise_covariance(self.cmap, (basis * scale[None, :]).T, self.objective, tol=self.tol,
                                          max_iter=self.max_iter, stats=self.stats,
                                          rowmax=self._coordinate_max[:basis.shape[1]] * scale)
        factor_u, condition = factor_in_basis(noise.factor, scale)  # [r, r] in basis coordinates
        check_noise_condition(float(condition))  # before the pass over the chunks
        qmax, largest, total = sensitivities(self.cmap, basis, noise.factor.numpy(), scale, factor_u.numpy())
        sensitivity = checked_noise(condition, safe_sensitivity(self.d, qmax, condition))
        return space, _StreamedNoise(factor_u, sensitivity, noise.certificate, largest, total)

    def whiten(self, space, noise, multiplier, data_sensitivity, output_bound):
        sensitivity = float(whitened_sensitivity_of_norms(noise.sensitivity, noise.largest, noise.total,
                                                          self.cmap.num_entries, space.rank, data_sensitivity,
                                                          output_bound, multiplier))
        return sensitivity, StreamedQuery(self.cmap, space.basis.numpy(), noise.factor.numpy(),
                                          multiplier * sensitivity)


def predict(function: PrivateFunction, Xnew: Any, chunk_size: int = DEFAULT_CHUNK_SIZE) -> PrivatePrediction:
    """``function.predict(Xnew)`` a chunk of rows at a time (post-processing: spends nothing)."""
    n = int(np.shape(Xnew)[0])
    parts = [function.predict(np.asarray(Xnew[i:i + chunk_size], dtype=np.float64)) for i in range(0, n, chunk_size)]
    return PrivatePrediction(*(np.concatenate([getattr(p, f) for p in parts]) for f in PrivatePrediction._fields))
