"""DP Laplace GP classification of several classes, one-vs-rest (docs/mechanisms.md#several-classes,
docs/guides/multiclass.md).

Labels are integers ``0 .. K-1`` and private; inputs, kernel hyperparameters and inducing inputs are
public. Neighbouring datasets differ in one row's label, moved from a class ``a`` to a class ``b``; with
public ``groups`` (persons, docs/guides/groups.md) in the labels of all of one person's rows, each row's
label moved to any class (each row its own move).

The model holds K binary problems on the same public ``X`` and kernel, ``y_a = +1`` where the label is
``a`` and ``-1`` elsewhere (the binary models' convention, d = 2): :class:`DPMulticlassLaplaceGPC` on
:class:`~dpgp_gpflow.models.DPLaplaceGPC` (T cloaked Newton steps each), :class:`DPSparseMulticlassLaplaceGPC`
on :class:`~dpgp_gpflow.models.DPSparseLaplaceGPC` (SoR, one step; also from streamed rows,
:meth:`DPSparseMulticlassLaplaceGPC.release_streamed`). A label move ``a -> b`` changes exactly
two problems, ``y_a`` and ``y_b``, each in one row by d; the other K - 2 problems are identical.

Privacy (Gaussian DP): each binary release is T Gaussian mechanisms whose whitened shift is at most
``1 / s_step`` (checked where each is drawn, the exact sampler's rounding included), so a neighbour moves
2T mechanisms by at most ``1 / s_step`` each and the rest not at all: together ``sqrt(2T) / s_step``-GDP.
With persons of up to g rows each binary problem protects a person's whole box (its labels' changes are
in ``{-2, 0, 2}^g``), and a person's change touches at most ``m = min(K, 2g)`` problems (the classes its rows
leave and join; :func:`classes_moved`): ``sqrt(m T) / s_step``-GDP. (``sqrt(2T)`` is not enough for
persons: docs/mechanisms.md#several-classes.) With ``s_step = sqrt(m T) s(epsilon, delta)``
(:func:`multiclass_step_request`; ``s`` the analytic calibration) that is ``1 / s``-GDP, i.e.
(epsilon, delta)-DP. The release validates once
(:func:`~dpgp_gpflow.mechanisms.release_request`), reserves ONE ledger event ``(epsilon, delta, "gaussian",
mu = 1/s)`` and commits it once after all K x T draws; a refusal before the first draw charges nothing,
one after some draws charges the whole event (what was drawn is charged). Only ``calibration="analytic"``.

This module holds the models and their release (:func:`multiclass_step_request`, through
:func:`~dpgp_gpflow.measurement.measure` and :func:`~dpgp_gpflow.measurement.stepwise`); the
label rules and the persons' maths are :mod:`dpgp_gpflow.models.one_vs_rest`, the released classifier
:mod:`dpgp_gpflow.models.multiclass_classifier`, its release file's reading
:mod:`dpgp_gpflow.models.multiclass_file` and the streamed rows' chunk source
:mod:`dpgp_gpflow.streaming.one_vs_rest_chunks` (their public names are importable from here too).
"""

from __future__ import annotations

import dataclasses
from numbers import Integral
from typing import Any, Callable, List, Optional, Tuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.base import MeanAndVariance
from gpflow.models import BayesianModel, InternalDataTrainingLossMixin

from ..accounting import PrivacyAccountant, Reservation
from ..noise_planning import DEFAULT_TOL
from ..composition import gdp_step_request
from ..contract import check_release_hyperparameters, dense_map, latent_terms_and_readout
from ..io.card import MulticlassGuarantee
from ..measurement import Measurement, StepDraws, measure, stepwise
from ..mechanisms import ReleaseRequest, release_request
from ..neighbours import relation, sensitivity_path
from ..pipeline import cloak_outputs
from ..released import PrivateClassifier
from ..streaming import DEFAULT_CHUNK_SIZE, ChunkSource, rows_source
from ..streaming.release import cloak_function, model_inputs
from ..streaming.chunks import check_source_shape, source_persons
from ..streaming.one_vs_rest_chunks import OneVsRestChunks, check_class_labels
from ..validation import as_inputs, is_dask_array, require_float64, validate_groups, validate_public_terms
from ..whole_rows import classification as whole_row_classes
from ..whole_rows.inputs import private_input_data, refuse_full_gp
from .base import split_dask_rows
from .dp_laplace import DPLaplaceGPC, DPSparseLaplaceGPC, PrivateSparseClassifier, check_steps
from .multiclass_classifier import PrivateMulticlassClassifier
from .one_vs_rest import (
    OneVsRestModel,
    class_relation,
    class_seed,
    classes_moved,
    largest_person,
    multiclass_step_multiplier,
    one_vs_rest_labels,
    one_vs_rest_probabilities,
    validate_class_labels,
)
from .sgpr_base import kmeans_inducing_inputs

__all__ = ["DPMulticlassLaplaceGPC", "DPSparseMulticlassLaplaceGPC", "PrivateMulticlassClassifier"]


# ---------------------------------------------------------------------------------------------
# The request of every step, and the draws it commits.


def multiclass_step_request(request: ReleaseRequest, steps: int, moved: int = 2) -> ReleaseRequest:
    """The request of every Newton step of a multi-class release of the validated ``request``: multiplier
    :func:`multiclass_step_multiplier` (``moved`` problems changed by a neighbour, x ``steps``), composed by
    the one step rule :func:`~dpgp_gpflow.composition.gdp_step_request` (Gaussian DP; each step records its own
    guarantee at ``request.delta``; only the analytic calibration, ``NotImplementedError`` otherwise)."""
    return gdp_step_request(request, multiclass_step_multiplier(request.multiplier, steps, moved))


# ---------------------------------------------------------------------------------------------
# The models.


StepRelease = Callable[[int, Any, ReleaseRequest, Reservation], PrivateClassifier]


class _OneVsRest(OneVsRestModel, BayesianModel, InternalDataTrainingLossMixin):
    """K binary problems on one public ``X`` and kernel: the non-private one-vs-rest predictions, the
    training objective (sum of the K Laplace marginal likelihoods; evaluating it marks every problem, the
    leak guard) and the one release of all classes."""

    def __init__(self, X: np.ndarray, labels: np.ndarray, kernel: gpflow.kernels.Kernel, num_classes: int,
                 make_problem: Callable[[np.ndarray, Optional[np.ndarray]], Any], groups: Any = None) -> None:
        super().__init__()
        self.kernel = kernel
        self.num_classes = int(num_classes)
        self._X = X
        self._labels = labels
        ids = validate_groups(groups, int(X.shape[0]))
        object.__setattr__(self, "_dp_groups", ids)
        self.problems = tuple(make_problem(y, ids) for y in one_vs_rest_labels(labels, self.num_classes))

    @property
    def groups(self) -> Optional[np.ndarray]:
        """Public person identifiers [N] (a copy; rows with the same value belong to one person), or None: one
        row per person. Every problem holds the same; fixed at construction."""
        groups = self.__dict__.get("_dp_groups")
        return None if groups is None else groups.copy()

    @property
    def person_rows(self) -> int:
        """The most rows of one person (public; 1 without groups)."""
        return largest_person(self.__dict__.get("_dp_groups"))

    @property
    def classes_moved(self) -> int:
        """``m = min(K, 2 g)``: the most problems one neighbour changes (:func:`classes_moved`)."""
        return classes_moved(self.num_classes, self.person_rows)

    @property
    def data(self) -> Tuple[np.ndarray, np.ndarray]:
        """``(X, labels)``: the public inputs and the private integer labels."""
        return self._X, self._labels

    def maximum_log_likelihood_objective(self) -> tf.Tensor:
        """Sum of the K binary Laplace log marginal likelihoods (reads the labels; marks every problem)."""
        return tf.add_n([p.maximum_log_likelihood_objective() for p in self.problems])

    @check_shapes("Xnew: [N, D]", "return[0]: [N, K]", "return[1]: [N, K]")
    def predict_f(self, Xnew: Any) -> MeanAndVariance:
        """Non-private latent means and variances [k, K] of the K binary Laplace models (they read the labels)."""
        pairs = [p.predict_f(Xnew) for p in self.problems]
        return tf.concat([m for m, _ in pairs], axis=1), tf.concat([v for _, v in pairs], axis=1)

    @check_shapes("Xnew: [N, D]", "return[0]: [N, K]", "return[1]: [N, K]")
    def predict_y(self, Xnew: Any) -> MeanAndVariance:
        """Non-private class probabilities [k, K] (:func:`one_vs_rest_probabilities`) and ``P (1 - P)``."""
        P = one_vs_rest_probabilities(*self.predict_f(Xnew))
        return P, P * (1.0 - P)

    def _request(self, epsilon: Any, delta: Any, steps: Any, calibration: Any, objective: Any, seed: Any,
                 hyperparameters_public: bool, rtol: Any, tol: Any) -> Tuple[int, ReleaseRequest, ReleaseRequest]:
        """``(steps, request, step request)``: the one validation (``rtol`` and ``tol`` included), then the
        leak guard of every problem."""
        steps = check_steps(steps)
        request = release_request(epsilon, delta, calibration=calibration, objective=objective, seed=seed,
                                  rtol=rtol, tol=tol)
        step_request = multiclass_step_request(request, steps, self.classes_moved)
        for problem in self.problems:
            check_release_hyperparameters(problem, hyperparameters_public)
        return steps, request, step_request

    def _release_classes(self, step_release: StepRelease, request: ReleaseRequest, step_request: ReleaseRequest,
                         steps: int, accountant: Optional[PrivacyAccountant]) -> PrivateMulticlassClassifier:
        """Reserve the one event, release every class (``step_release(class, problem, request, draws)``), commit."""
        description = (f"one-vs-rest Laplace release of {self.num_classes} classes x {steps} Newton step(s) "
                       f"({class_relation(self.person_rows)})")

        def classes(draws: StepDraws) -> List[PrivateClassifier]:  # every class's K x T steps commit into draws
            return [step_release(a, problem, step_request._replace(seed=class_seed(request.seed, self.num_classes, a)),
                                 draws)
                    for a, problem in enumerate(self.problems)]

        # the one reservation of the one event; committed after the last draw (or after a failed draw). The path:
        # persons of the model's rows, each label moved between classes (checked before the reservation)
        path = sensitivity_path(self)
        classifiers = measure(Measurement(request, path.relation(), stepwise(classes, step_request.event(), description),
                                          description=description, path=path,
                                          file_pieces=tuple(p.kernel for p in self.problems)),  # the file holds them
                              accountant)
        # its relation recorded from the measurement's path (class_relation of its persons' rows)
        return PrivateMulticlassClassifier(classifiers, epsilon=request.epsilon, delta=request.delta,
                                           mu=1.0 / request.multiplier, steps=steps, person_rows=path.person_rows)


def _unpack(data: Any, num_classes: Any) -> Tuple[np.ndarray, np.ndarray]:
    require_float64()
    try:
        X, labels = data
    except (TypeError, ValueError) as exc:
        raise TypeError("data must be a pair (X, labels)") from exc
    X = as_inputs("X", X)
    return X, validate_class_labels(labels, num_classes, int(X.shape[0]))


class DPMulticlassLaplaceGPC(_OneVsRest):
    """One-vs-rest DP Laplace GP classifier of ``num_classes`` classes (full GP).

    ``DPMulticlassLaplaceGPC((X, labels), kernel, num_classes=K)``: integer labels ``0 .. K-1`` ([N] or
    [N, 1]); ``problems[a]`` is a :class:`~dpgp_gpflow.models.DPLaplaceGPC` of label ``a`` against the rest
    (labels ``+1`` / ``-1``), all sharing ``X`` and ``kernel``. ``predict_f`` / ``predict_y`` are the
    non-private one-vs-rest Laplace predictions (they read the labels): publish only what :meth:`release`
    returns. For two classes use :class:`~dpgp_gpflow.models.DPLaplaceGPC` (one problem, less noise).

    Privacy assumption: ``X`` and the kernel hyperparameters are public (leak guard as the binary model's);
    neighbouring datasets differ in one label, moved from one class to another. ``groups`` (public integers
    [N], default None): rows with the same value belong to one person, and neighbours differ in the labels
    of all of a person's rows, each moved to any class (docs/guides/multiclass.md#persons); every problem
    protects the person's box and the steps are calibrated for the ``min(K, 2g)`` problems a person of g
    rows can change.
    """

    def __init__(self, data: Any, kernel: gpflow.kernels.Kernel, *, num_classes: int, max_iter: int = 100,
                 tol: float = 1e-10, hyperparameters_public: bool = False, groups: Any = None,
                 private_inputs: bool = False) -> None:
        refuse_full_gp(private_inputs, "the full-GP classifiers release",
                       "DPSparseLaplaceGPC / DPSparseMulticlassLaplaceGPC")
        X, labels = _unpack(data, num_classes)
        super().__init__(X, labels, kernel, int(num_classes), lambda y, ids: DPLaplaceGPC(
            (X, y), kernel, max_iter=max_iter, tol=tol, hyperparameters_public=hyperparameters_public, groups=ids),
            groups)

    def release(self, *, epsilon: float, delta: float, steps: int = 1, objective: str = "mse",
                calibration: str = "analytic", seed: Optional[int] = None,
                accountant: Optional[PrivacyAccountant] = None, hyperparameters_public: bool = False,
                rtol: Optional[float] = None, tol: float = DEFAULT_TOL) -> PrivateMulticlassClassifier:
        """Release ``steps`` cloaked Newton steps of each of the K problems; (epsilon, delta)-DP in total.

        Each step of each class is released at noise multiplier ``sqrt(m steps) s(epsilon, delta)``, ``m = 2``
        (with ``groups``: ``min(K, 2g)``, :func:`classes_moved`; :func:`multiclass_step_request`) through
        :meth:`DPLaplaceGPC.release_steps` (class ``a`` at seed
        :func:`class_seed`); one ledger event ``(epsilon, delta, mu = 1/s)`` is reserved before anything
        is computed and committed after the K x steps draws. Keywords as for :meth:`DPLaplaceGPC.release`;
        only ``calibration="analytic"``.
        """
        steps, request, step_request = self._request(epsilon, delta, steps, calibration, objective, seed,
                                                     hyperparameters_public, rtol, tol)
        # step 1's public terms, the same for every class, checked finite before anything is reserved
        first = self.problems[0].first_step()
        return self._release_classes(
            lambda a, problem, req, draws: problem.release_steps(req, draws, steps, first, rtol=rtol, tol=tol),
            request, step_request, steps, accountant)


class DPSparseMulticlassLaplaceGPC(_OneVsRest):
    """One-vs-rest DP Laplace GP classifier of ``num_classes`` classes, subset of regressors.

    ``DPSparseMulticlassLaplaceGPC((X, labels), kernel, inducing_variable, num_classes=K)``: as
    :class:`DPMulticlassLaplaceGPC` with ``problems[a]`` a :class:`~dpgp_gpflow.models.DPSparseLaplaceGPC`;
    ``inducing_variable`` an array [M, D], ``InducingPoints`` or an integer m (k-means on ``X``, seed 0,
    computed once for all classes). Its release is the first Newton step of the m SoR weights of every
    class (``steps=1``; ``reference_inputs`` is not offered): :meth:`release` in memory, or
    :meth:`release_streamed` over row chunks (a chunk source of ``(X, labels)``, or the model's own rows,
    which may then be Dask arrays: ``X`` [N, D] and ``labels`` [N] or [N, 1], with the inducing inputs given
    as an array).

    Privacy assumption: ``X``, ``Z`` and the kernel hyperparameters are public; ``groups`` (persons) as for
    :class:`DPMulticlassLaplaceGPC` (with Dask rows an in-memory array beside them; the streamed release cuts
    its chunks between persons, whose rows must be consecutive; a given source carries its rows' ids).

    ``private_inputs=True`` with ``x_bounds`` (and ``clip_inputs``): whole rows private, as for
    :class:`~dpgp_gpflow.models.DPSparseLaplaceGPC` (every problem is built so); :meth:`release` releases the K
    classes' whole-row statistics together once (docs/whole_rows.md#classification) and returns a
    :class:`~dpgp_gpflow.whole_rows.classification.WholeRowsClassifier`.
    """

    def __init__(self, data: Any, kernel: gpflow.kernels.Kernel, inducing_variable: Any, *, num_classes: int,
                 max_iter: int = 100, tol: float = 1e-10, hyperparameters_public: bool = False,
                 groups: Any = None, private_inputs: bool = False, x_bounds: Any = None,
                 clip_inputs: bool = True) -> None:
        if private_inputs is True:  # clipped once here (one warning); the problems check the rest again
            data, x_bounds = private_input_data(data, kernel, inducing_variable, x_bounds, clip_inputs)
        private = {"private_inputs": private_inputs, "x_bounds": x_bounds, "clip_inputs": clip_inputs}
        X, labels, dask_rows = split_dask_rows(data)
        if dask_rows is None:
            X, labels = _unpack(data, num_classes)
            if isinstance(inducing_variable, Integral) and not isinstance(inducing_variable, bool):
                inducing_variable = kmeans_inducing_inputs(X, int(inducing_variable))
        else:  # the labels stay on the cluster: checked chunk by chunk where they are read (release_streamed)
            validate_class_labels(np.zeros(0, np.int64), num_classes, 0)  # num_classes alone
            if is_dask_array(groups):
                raise TypeError("with Dask rows, give groups= as an in-memory array of the N public person ids "
                                "(e.g. groups.compute()): the streamed release cuts its chunks between persons from it")
        object.__setattr__(self, "_dp_dask_rows", dask_rows)
        super().__init__(X, labels, kernel, int(num_classes), lambda y, ids: DPSparseLaplaceGPC(
            (X, y), kernel, inducing_variable, max_iter=max_iter, tol=tol,
            hyperparameters_public=hyperparameters_public, groups=ids, **private), groups)

    @property
    def dask_rows(self) -> Optional[Tuple[Any, Any]]:
        """The ``(X, labels)`` Dask arrays the model was built from (labels [N, 1]), or None in memory."""
        return self.__dict__.get("_dp_dask_rows")

    @property
    def private_inputs(self) -> bool:
        """True when the inputs are private too (whole rows; every problem is built so)."""
        return bool(self.problems[0].private_inputs)

    def release(self, *, epsilon: float, delta: float, steps: int = 1, objective: str = "mse",
                calibration: str = "analytic", seed: Optional[int] = None,
                accountant: Optional[PrivacyAccountant] = None, hyperparameters_public: bool = False,
                rtol: Optional[float] = None, tol: float = DEFAULT_TOL, **whole_rows: Any) -> PrivateMulticlassClassifier:
        """Release the first Newton step ``w1 = C_w y_a`` of each class's m SoR weights; (epsilon, delta)-DP
        in total, each at multiplier ``sqrt(m) s(epsilon, delta)`` (``m = 2``, with groups ``min(K, 2g)``; one
        ledger event, as
        :meth:`DPMulticlassLaplaceGPC.release`). ``steps=1`` only; only ``calibration="analytic"``.

        With ``private_inputs=True``: the whole-row release of every class's first Newton step, one draw and one
        ledger event (:func:`~dpgp_gpflow.whole_rows.classification.release_classifier_model`; ``source``,
        ``chunk_size`` and ``shares`` as there); ``objective``, ``rtol`` and ``tol`` do not apply."""
        if self.private_inputs:
            whole_row_classes.check_one_step(check_steps(steps))
            if objective != "mse" or rtol is not None or tol != DEFAULT_TOL:
                raise TypeError("objective, rtol and tol do not apply to a whole-row release (private inputs): it "
                                "releases the statistics once, with no noise optimiser")
            return whole_row_classes.release_classifier_model(  # type: ignore[return-value]
                self, epsilon=epsilon, delta=delta, calibration=calibration, seed=seed, accountant=accountant,
                hyperparameters_public=hyperparameters_public, **whole_rows)
        if whole_rows:
            raise TypeError(f"unexpected keyword argument(s) {sorted(whole_rows)}")
        if check_steps(steps) != 1:
            raise NotImplementedError("DPSparseMulticlassLaplaceGPC releases the first Newton step only (steps=1)")
        if self.dask_rows is not None:
            raise TypeError("this DPSparseMulticlassLaplaceGPC's rows are Dask arrays and stay on the cluster: release "
                            "it with model.release_streamed(epsilon=..., delta=...)")
        steps, request, step_request = self._request(epsilon, delta, steps, calibration, objective, seed,
                                                     hyperparameters_public, rtol, tol)
        # the public latent terms and readout, the same for every class, checked finite before anything is reserved
        latent, readout = latent_terms_and_readout(self.problems[0])
        B = dense_map(latent.map)  # [m, n]
        validate_public_terms("latent release", B, latent.offset, self.problems[0].output_bound,
                              variance=latent.variance)
        covariance = tf.convert_to_tensor(latent.variance, tf.float64)  # [m, m]: the weights' public covariance
        variance = tf.linalg.diag_part(covariance) if covariance.shape.rank == 2 else covariance

        def one_class(a: int, problem: Any, req: ReleaseRequest, draws: Reservation) -> PrivateClassifier:
            rel = cloak_outputs(problem, req, draws, B, latent.offset, variance, rtol=rtol, tol=tol)
            return PrivateSparseClassifier(rel, readout)

        return self._release_classes(one_class, request, step_request, steps, accountant)

    def release_streamed(self, *, epsilon: float, delta: float, objective: str = "mse", calibration: str = "analytic",
                         seed: Optional[int] = None, accountant: Optional[PrivacyAccountant] = None,
                         hyperparameters_public: bool = False, rtol: Optional[float] = None, tol: float = DEFAULT_TOL,
                         max_iter: int = 2000, source: Optional[ChunkSource] = None,
                         chunk_size: int = DEFAULT_CHUNK_SIZE) -> PrivateMulticlassClassifier:
        """:meth:`release` streamed over row chunks, without the m x n map: each class's first Newton step is
        :func:`dpgp_gpflow.streaming.release.cloak_function` of its problem over :class:`OneVsRestChunks` of the rows,
        at the same multiplier ``sqrt(m) s(epsilon, delta)`` (``m = 2``, with groups ``min(K, 2g)``), all under
        one reservation and one ledger event (as :meth:`release`).

        ``source``: a :class:`~dpgp_gpflow.streaming.ChunkSource` of ``(X, labels)`` with integer labels
        ``0 .. K-1`` (e.g. ``LocalChunks(X, labels)`` over memory maps, or ``DaskChunks(X, labels)``); default:
        the model's Dask rows, or its rows in chunks of ``chunk_size``. Every label is read and checked
        (``ValueError``, no statistic of the labels) before anything is reserved. With ``groups`` (persons) the
        source must carry the person ids of its own rows (``LocalChunks(X, labels, groups=ids)``; the model's
        own rows carry its groups), the model's row for row, and each person's rows must be consecutive in the
        source's row order (else ``ValueError``, nothing reserved;
        :func:`~dpgp_gpflow.streaming.chunks.source_persons`): every class's chunks are recut between persons
        and protect each person's box, as in memory. The
        classical calibration is refused (``NotImplementedError``). Keywords as for
        :func:`dpgp_gpflow.streaming.release_function` (``max_iter``, ``chunk_size``). With the same seed each
        class equals the in-memory release up to floating-point summation order and the signs of the noise's
        eigenvectors (docs/guides/scaling.md). Privacy assumptions as for :meth:`release`; the chunking is public.
        With ``private_inputs=True``: refused (``PrivacyLeakError``); :meth:`release` streams (``source=``)."""
        if self.private_inputs:
            whole_row_classes.public_inputs_refused(self)
        steps, request, step_request = self._request(epsilon, delta, 1, calibration, objective, seed,
                                                     hyperparameters_public, rtol, tol)
        rows = rows_source(self, source, chunk_size)
        # public shapes: the model's input columns and one column of labels, before anything is reserved
        check_source_shape(rows, int(self.problems[0].inducing_variable.Z.shape[1]), 1, outputs="label")
        # public: the persons are the source's own ids, the model's row for row, each person's rows consecutive
        # (else one line), nothing reserved
        source_persons(rows, self.groups, model_inputs(self))
        check_class_labels(rows, self.num_classes)  # every label, before anything is reserved

        def one_class(a: int, problem: Any, req: ReleaseRequest, draws: Reservation) -> PrivateClassifier:
            function = cloak_function(problem, req, draws, source=OneVsRestChunks(rows, a, self.num_classes),
                                      rtol=rtol, tol=tol, max_iter=max_iter, chunk_size=chunk_size)
            # recorded as the in-memory release records it (the streamed one records persons only)
            rel = dataclasses.replace(function.release, neighbours=relation(problem))
            return PrivateSparseClassifier(rel, function.readout, function.coordinates)

        return self._release_classes(one_class, request, step_request, steps, accountant)
