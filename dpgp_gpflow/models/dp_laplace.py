"""DP Laplace GP binary classification by cloaking Newton steps (JMLR section 4; docs/mechanisms.md#laplace-classification).

Labels ``y in {-1, +1}`` are private; inputs, kernel hyperparameters and inducing inputs are public.
Neighbouring datasets differ in one label, so one label moves by at most ``d = 2``. With public
``groups`` (persons, docs/guides/groups.md) they differ in all the labels of one person, each by up to
``d``: every Newton step (and the sparse release) protects every corner of each person's box, through
the one path every release takes (:func:`~dpgp_gpflow.pipeline.cloak_outputs` reads the model's groups).

* :class:`DPLaplaceGPC` (full GP): a Newton step of the Laplace mode search from a *public* latent
  vector ``f`` is affine in the labels, ``f_new = C y + b`` with ``C = 1/2 (K^{-1} + W)^{-1}`` and
  ``b`` functions of ``K`` and ``f`` only (:func:`~dpgp_gpflow.models.laplace.newton_step_cloaking`).
  Step 1 starts at ``f0 = 0`` (``W = I/4``, ``b = 0``); step ``t + 1`` starts from the *released*
  ``f~_t``. Each step is one cloaking release of the n training latents (d = 2).
* :class:`DPSparseLaplaceGPC` (subset of regressors, weight space ``f = Phi w``): the first Newton
  step ``w1 = C_w y`` (m x n) is released once; predictions anywhere are post-processing.

Both meet the :class:`~dpgp_gpflow.contract.PrivateModel` contract (labels centred at the public
constant 0, bounds (-1, +1), d = 2; ``release_terms(Xnew)``: the latent mean at ``Xnew`` after the
first Newton step from zero) and return a :class:`~dpgp_gpflow.released.PrivateClassifier`:
predictions at any inputs from the released vector and frozen public pieces only (they never read
the labels), latent variance plus the DP noise variance propagated to the prediction (the papers
left it out). Predictions cost no privacy budget.

Composition over Newton steps (``steps = T``): the one step rule of every multi-step release
(:func:`~dpgp_gpflow.composition.gdp_step_request`, as the multi-class classifiers): each step is released at
noise multiplier ``sqrt(T) s(epsilon, delta)``, so the T Gaussian steps compose exactly, in Gaussian DP, to
``mu = sqrt(T (1 / (sqrt(T) s))^2) = 1 / s``: one release ``(epsilon, delta)``-DP
(docs/mechanisms.md#laplace-classification).
Only ``calibration="analytic"`` composes so: ``steps > 1`` with ``"classical"`` raises ``NotImplementedError``
before anything is reserved. As every release of the pipeline (:mod:`dpgp_gpflow.pipeline`),
:meth:`DPLaplaceGPC.release` validates the privacy parameters once
(:func:`~dpgp_gpflow.mechanisms.release_request`) and reserves ONE Gaussian event ``(epsilon, delta, mu = 1/s)``
before the first step (a budget too small draws nothing); each step's mechanism
(:func:`~dpgp_gpflow.pipeline.cloak_outputs`) neither validates nor reserves and counts its draw
(:func:`~dpgp_gpflow.measurement.stepwise`); the event is committed after the last draw. A refusal before the
first draw charges nothing; one at step ``t + 1`` (computed from the released latents of step ``t``) charges
the whole event once: what was drawn is bounded by it. Files of releases made before this rule (each step at
``(epsilon / T, delta / T)``, basic composition) still load.

The loop over the Newton steps is :meth:`DPLaplaceGPC.release_steps` (for a validated request and a
reservation taken by the caller), used by :meth:`DPLaplaceGPC.release` and by the one-vs-rest release of
several classes (:mod:`dpgp_gpflow.models.multiclass`, which calibrates and charges the steps itself).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import inherit_check_shapes
from gpflow.base import InputData, MeanAndVariance

from ..accounting import PrivacyAccountant, Reservation
from ..noise_planning import DEFAULT_TOL
from ..contract import ReleaseTerms, check_release_hyperparameters, dense_map
from ..pipeline import cloak_outputs
from ..composition import gdp_composition, gdp_step_multiplier, gdp_step_request
from ..io.card import LABEL_BOUNDS
from ..measurement import Measurement, StepDraws, measure, stepwise
from ..mechanisms import ReleaseRequest, release_request
from ..neighbours import sensitivity_path
from ..readouts import LaplaceReadout, SoRReadout
from ..released import PrivateClassifier, PrivateRelease
from ..streaming.terms import Factors
from ..whole_rows import classification as whole_row_classes
from ..whole_rows.inputs import PrivateInputsMixin, private_input_data, refuse_full_gp, refuse_private_input_options
from ..validation import as_inputs, is_dask_array, require_float64, validate_public_terms
from .base import DaskRowsMixin, FactoredModelMixin, PrivateModelMixin, inducing_inputs, split_dask_rows
from .fitc import FITCChunkTerms
from .gpr import gpr_cloaking_matrix_and_variance
from .laplace import (
    LaplaceGPC,
    LaplaceMode,
    first_newton_step_cloaking,
    laplace_mode,
    newton_step_cloaking,
    sor_features,
    sor_first_step_cloaking,
    sor_predict_from_weights,
    validate_labels,
)
from .sgpr_base import kmeans_inducing_inputs

__all__ = [
    "DPLaplaceGPC", "DPSparseLaplaceGPC", "PrivateClassifier", "PrivateLaplaceClassifier",
    "PrivateSparseClassifier",
]

#: How far one private label can move: from -1 to +1.
LABEL_SENSITIVITY = 2.0


# ---------------------------------------------------------------------------------------------
# The released classifiers (post-processing only).


class PrivateLaplaceClassifier(PrivateClassifier):
    """Full-GP released classifier from the last released training latents ``f~``
    (:class:`~dpgp_gpflow.readouts.LaplaceReadout`): ``E[f*] = k*^T K^{-1} f~``,
    ``V[f*] = k** - k*^T (K + W^{-1})^{-1} k*`` plus the DP noise ``k*^T K^{-1} F`` propagated."""

    _composed: Optional[Tuple[float, float, float]] = None  #: (epsilon, delta, mu) of steps composed in Gaussian DP

    def __init__(self, releases: List[PrivateRelease], readout: LaplaceReadout, *,
                 composed: Optional[Tuple[float, float, float]] = None) -> None:
        super().__init__(releases[-1], readout, releases=releases)
        self._composed = composed

    def composed(self, epsilon: float, delta: float, mu: float) -> "PrivateLaplaceClassifier":
        """This classifier as one release of its steps composed in Gaussian DP: ``(epsilon, delta)`` and ``mu``
        of the whole (:meth:`DPLaplaceGPC.release` of several steps; a file's card checked by
        :func:`~dpgp_gpflow.io.card.laplace_releases`). Without it the steps compose by basic composition."""
        self._composed = (float(epsilon), float(delta), float(mu))
        return self

    @property
    def epsilon(self) -> float:
        """The epsilon of the whole release: Gaussian-DP composition of its steps when :meth:`composed`, else
        the sum of theirs (one step, a one-vs-rest class, or a file written before the step rule)."""
        return super().epsilon if self._composed is None else self._composed[0]

    @property
    def delta(self) -> float:
        return super().delta if self._composed is None else self._composed[1]

    def privacy_card(self) -> Dict[str, Any]:
        """:meth:`Released.privacy_card`, and for steps composed in Gaussian DP ``composition="gaussian-dp"``,
        the whole's ``mu`` and ``steps``."""
        card = super().privacy_card()
        if self._composed is not None:
            card.update(composition="gaussian-dp", mu=self._composed[2], steps=len(self.releases))
        return card

    def audited_mu(self, model: Any, mus: Sequence[float]) -> Optional[float]:
        """``sqrt(sum mu_t^2)`` of the steps' audited ``mu`` for steps composed in Gaussian DP (a neighbour
        moves every step); None (each step against its own claim) otherwise."""
        return None if self._composed is None else gdp_composition(mus)

    @property
    def latent(self) -> np.ndarray:
        """The released training latents ``f~`` (the last Newton step), [N, 1]."""
        return self.release.mean

    @property
    def W_diag(self) -> np.ndarray:
        """The public ``W`` used for the variance (at the last step's linearisation point), [N]."""
        return cast(LaplaceReadout, self.readout).W_diag.numpy()  # the readout it was built with


class PrivateSparseClassifier(PrivateClassifier):
    """SoR released classifier (:class:`~dpgp_gpflow.readouts.SoRReadout`): ``E[f*] = Phi* w~``,
    ``V[f*] = Phi* (I + Phi^T W Phi)^{-1} Phi*^T`` plus the DP noise ``Phi* F_w`` propagated. The SoR
    variance shrinks to 0 far from the inducing inputs (a property of SoR, not of the mechanism)."""

    @property
    def weights(self) -> np.ndarray:
        """The released SoR weights ``w~`` (in the ``Phi`` basis), [M, 1]."""
        return self._latent.numpy()

    @property
    def weight_noise_factor(self) -> np.ndarray:
        """Factor ``F_w`` of the DP noise covariance of ``w~``, [M, r]."""
        return self._latent_noise.numpy()

    @property
    def inducing_inputs(self) -> np.ndarray:
        return cast(SoRReadout, self.readout).Z.numpy()  # a sparse classifier's readout


# ---------------------------------------------------------------------------------------------
# Shared pieces.


def check_steps(steps: Any) -> int:
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    return int(steps)


def _step_seed(seed: Optional[int], step: int) -> Optional[int]:
    """Seed of step ``step`` (0-based): ``seed`` itself for the first, fresh derived seeds after."""
    if seed is None or step == 0:
        return seed
    return int(np.random.SeedSequence([int(seed), int(step)]).generate_state(1, dtype=np.uint32)[0])


def _step_request(request: ReleaseRequest, steps: int) -> ReleaseRequest:
    """The request of each of ``steps`` Newton steps composing, in Gaussian DP, to the validated ``request``
    (:func:`~dpgp_gpflow.composition.gdp_step_request` at multiplier ``sqrt(steps) s``); ``request`` itself for
    one step. ``NotImplementedError`` for several steps at ``calibration="classical"``."""
    return gdp_step_request(request, gdp_step_multiplier(request.multiplier, steps))


def _unpack(data: Any) -> Tuple[np.ndarray, Any]:
    require_float64()
    try:
        X, Y = data
    except (TypeError, ValueError) as exc:
        raise TypeError("data must be a pair (X, Y)") from exc
    return as_inputs("X", X), Y


def _fixed(name: str) -> property:
    def refuse(self: Any, value: Any) -> None:
        raise AttributeError(f"{name} is fixed for labels in {{-1, +1}} (the privacy guarantee is computed from it)")

    value = {"y_bounds": LABEL_BOUNDS, "data_sensitivity": LABEL_SENSITIVITY}[name]
    return property(lambda self: value, refuse, doc=f"{name} of labels in {{-1, +1}} (fixed).")


class _LabelContract:
    """The contract's constants for labels in {-1, +1}: bounds (-1, +1), d = 2, prior mean 0."""

    y_bounds = _fixed("y_bounds")
    data_sensitivity = _fixed("data_sensitivity")
    #: Its releases hold a classifier's latent values, which the labels' bounds do not bound: the
    #: pipeline marks each one ``classifier_latent`` (never clipped; :mod:`dpgp_gpflow.pipeline`).
    classifier_latent = True


# ---------------------------------------------------------------------------------------------
# Full GP.


class DPLaplaceGPC(_LabelContract, PrivateModelMixin, LaplaceGPC):
    """:class:`~dpgp_gpflow.models.LaplaceGPC` with DP releases of cloaked Newton steps.

    ``DPLaplaceGPC((X, Y), kernel)``: labels in {-1, +1} (labels in {0, 1} are rejected with a hint),
    zero prior mean. ``predict_f`` / ``predict_y`` are the non-private Laplace predictions (they read
    the labels): publish only what :meth:`release` returns.

    Privacy assumption: ``X`` and the kernel hyperparameters are public. Evaluating the training
    objective (the Laplace marginal likelihood) marks the model; :meth:`release` then refuses unless
    ``hyperparameters_public=True``. Kernel values given here that are not GPflow's defaults make it
    refuse too (:class:`~dpgp_gpflow.PrivacyLeakError`) unless the constructor's
    ``hyperparameters_public=True`` declares them chosen without the labels.

    ``groups`` (public integers [N], default None): rows with the same value belong to one person, and
    every Newton step protects all of a person's labels at once, each flipping (docs/guides/groups.md);
    None: one row per person (the per-row release, unchanged).
    """

    def __init__(self, data: Any, kernel: gpflow.kernels.Kernel, *, max_iter: int = 100, tol: float = 1e-10,
                 hyperparameters_public: bool = False, groups: Any = None, private_inputs: bool = False) -> None:
        refuse_full_gp(private_inputs, "the full-GP classifiers release",
                       "DPSparseLaplaceGPC / DPSparseMulticlassLaplaceGPC")
        X, Y = _unpack(data)
        self._hold_groups(groups, X.shape[0])
        super().__init__((X, Y), kernel, max_iter=max_iter, tol=tol)
        self._guard_construction(hyperparameters_public)  # the leak guard: values as given

    def maximum_log_likelihood_objective(self) -> tf.Tensor:
        self._mark_private_objective()
        return super().maximum_log_likelihood_objective()

    def release_terms(self, Xnew: tf.Tensor) -> ReleaseTerms:
        """The latent at ``Xnew`` after the first Newton step from 0: ``2 K_*f (K + 4 I)^{-1} y`` and
        its public Laplace variance ``k** - k*^T (K + 4 I)^{-1} k*`` (``W = I/4``)."""
        X, _ = self.data
        C, variance = gpr_cloaking_matrix_and_variance(self.kernel, X, tf.constant(4.0, dtype=X.dtype), Xnew)
        return ReleaseTerms(2.0 * C, tf.zeros([int(C.shape[0])], dtype=C.dtype), variance[:, 0])

    def split_terms(self, train: Any, test: Any) -> ReleaseTerms:
        """The first-step latent at ``test`` from the labels at ``train`` (offset 0)."""
        Xtr, Xte = self._split_inputs(train, test)
        C, _ = gpr_cloaking_matrix_and_variance(self.kernel, Xtr, tf.constant(4.0, dtype=Xtr.dtype), Xte)
        return ReleaseTerms(2.0 * C, tf.zeros([int(C.shape[0])], dtype=C.dtype))

    def cloaking_matrix(self, Xnew: Any = None) -> tf.Tensor:
        """With ``Xnew``: the first-step latent's cloaking matrix there (k x n, as
        :func:`dpgp_gpflow.cloaking_matrix`). Without: ``C = 1/2 (K^{-1} + I/4)^{-1}`` (n x n) of the
        training latents ``f1 = C y`` that :meth:`release` publishes. Public."""
        X, _ = self.data
        if Xnew is None:
            return first_newton_step_cloaking(self.kernel(X))
        return dense_map(self.release_terms(tf.convert_to_tensor(Xnew, dtype=X.dtype)).map)

    def release_maps(self, releases: List[PrivateRelease]) -> List[tf.Tensor]:
        """The public cloaking matrix of each Newton step of a :meth:`release` (for an audit): the
        first from ``f0 = 0``, step ``t + 1`` linearised at the released latents of step ``t``. The
        neighbours they are audited over are the model's (its ``groups``, read by the audit)."""
        X, _ = self.data
        K = self.kernel(X)
        maps = [first_newton_step_cloaking(K)]
        for rel in releases[:-1]:
            maps.append(newton_step_cloaking(K, tf.constant(rel.mean))[0])
        return maps

    # a classifier releases its latents, not predictions at Xnew: no Xnew argument
    def release(  # type: ignore[override]
        self,
        *,
        epsilon: float,
        delta: float,
        steps: int = 1,
        objective: str = "mse",
        calibration: str = "analytic",
        seed: Optional[int] = None,
        accountant: Optional[PrivacyAccountant] = None,
        hyperparameters_public: bool = False,
        rtol: Optional[float] = None,
        tol: float = DEFAULT_TOL,
    ) -> PrivateLaplaceClassifier:
        """Release ``steps`` cloaked Newton steps from ``f0 = 0``; (epsilon, delta)-DP in total.

        Step 1 releases ``f1 = C y`` with ``C = 1/2 (K^{-1} + I/4)^{-1}``; step ``t + 1`` releases
        ``f_{t+1} = C_t y + b_t`` linearised at the released ``f~_t`` (public), with ``b_t`` as the
        public offset. Each step is a cloaking release of the n training latents with d = 2 at noise
        multiplier ``sqrt(steps) s(epsilon, delta)``, so the steps compose in Gaussian DP to ``mu = 1 / s``
        (:func:`~dpgp_gpflow.composition.gdp_step_request`): one Gaussian event ``(epsilon, delta)`` reserved
        before the first step and charged to ``accountant`` (or the innermost ``with PrivacyAccountant(...)``)
        after the last draw, or after a later step's refusal (what was drawn is charged). ``steps > 1`` needs
        ``calibration="analytic"`` (``NotImplementedError`` otherwise, before anything is reserved). An
        explicit ``seed`` makes every step reproducible (step
        ``t > 0`` uses a seed derived from ``(seed, t)``) and NOT private against its holder.

        Returns a :class:`PrivateLaplaceClassifier` predicting from the last released latents with
        ``W`` at the last step's linearisation point (``I/4`` for one step); its ``epsilon``, ``delta`` are the
        requested ones (with ``mu`` and ``steps`` on its card for several steps).
        """
        steps = check_steps(steps)
        request = release_request(epsilon, delta, calibration=calibration, objective=objective, seed=seed,
                                  rtol=rtol, tol=tol)
        step_request = _step_request(request, steps)
        check_release_hyperparameters(self, hyperparameters_public)
        # step 1's public terms, checked finite before any budget is reserved (a refusal draws and spends nothing)
        first = self.first_step()
        path = sensitivity_path(self)  # the relation checked before the reservation, recorded by every step
        if steps == 1:
            return measure(Measurement(request, path.relation(),
                                       lambda reservation: self.release_steps(request, reservation, 1, first,
                                                                              rtol=rtol, tol=tol), path=path,
                                       file_pieces=(self.kernel,)),  # the classifier's file holds it
                           accountant)
        description = f"Laplace release of {steps} Newton steps (Gaussian-DP composition)"

        def draw(draws: StepDraws) -> PrivateLaplaceClassifier:  # every step counts its draw into draws
            return self.release_steps(step_request, draws, steps, first, rtol=rtol, tol=tol)

        # the one reservation of the one event; committed after the last draw (or after a failed later step)
        classifier = measure(Measurement(request, path.relation(), stepwise(draw, step_request.event(), description),
                                         description=description, path=path, file_pieces=(self.kernel,)), accountant)
        return classifier.composed(request.epsilon, request.delta, 1.0 / request.multiplier)

    def first_step(self) -> Tuple[tf.Tensor, tf.Tensor]:
        """``(K, C)``: the public kernel matrix [N, N] and step 1's cloaking matrix
        ``C = 1/2 (K^{-1} + I/4)^{-1}`` (offset 0), checked finite (:func:`validate_public_terms`). Public."""
        X, _ = self.data
        K = self.kernel(X)  # [N, N] public
        C, b = first_newton_step_cloaking(K), tf.zeros([int(X.shape[0])], dtype=tf.float64)
        validate_public_terms("Newton step release", C, b, self.output_bound)
        return K, C

    def release_steps(self, request: ReleaseRequest, reservation: Reservation, steps: int,
                      first: Tuple[tf.Tensor, tf.Tensor], *, rtol: Optional[float] = None,
                      tol: float = DEFAULT_TOL) -> PrivateLaplaceClassifier:
        """The ``steps`` cloaked Newton steps of :meth:`release` (the one loop over them), each at ``request``
        (its multiplier and, for step ``t > 0``, a seed derived from ``(request.seed, t)``), from ``first``
        (:meth:`first_step`). For a caller that validated ``request`` and took ``reservation``: each step
        commits one event into ``reservation`` after its draw; nothing here validates or reserves.

        Privacy: each step is a Gaussian mechanism whose whitened shift between neighbouring labels (with
        ``groups``: over every corner of each person's box) is at most ``1 / request.multiplier`` (checked
        where it is drawn); step ``t + 1`` is linearised at the released latents of step ``t`` (public).
        The caller composes the steps: ``reservation`` must hold ``request``'s event as each of its next ``steps``
        uncommitted events (:meth:`~dpgp_gpflow.accounting.Reservation.expect`, checked before anything is drawn)."""
        reservation.expect((request.event(),) * int(steps))
        X, _ = self.data
        K, C = first
        n = int(X.shape[0])
        b = tf.zeros([n], dtype=tf.float64)
        W = tf.fill([n], tf.constant(0.25, dtype=tf.float64))
        releases: List[PrivateRelease] = []
        for t in range(steps):
            if t > 0:  # linearised at the released f~_t: public, as is everything computed from it
                f = tf.constant(releases[-1].mean)  # [n, 1]
                W = tf.reshape(tf.sigmoid(f) * tf.sigmoid(-f), [-1])
                C, b_col = newton_step_cloaking(K, f)
                b = tf.reshape(b_col, [-1])
                validate_public_terms("Newton step release", C, b, self.output_bound)
            releases.append(cloak_outputs(
                self, request._replace(seed=_step_seed(request.seed, t)), reservation, C, b,
                2.0 * tf.linalg.diag_part(C),  # public Laplace variance diag((K^{-1} + W)^{-1})
                rtol=rtol, tol=tol))
        return PrivateLaplaceClassifier(releases, LaplaceReadout(self.kernel, X, W, gpflow.config.default_jitter()))


# ---------------------------------------------------------------------------------------------
# Sparse (SoR) GP.


def _inducing_inputs(inducing_variable: Any, X: Any) -> np.ndarray:
    """:func:`~dpgp_gpflow.models.base.inducing_inputs`, or k-means on ``X`` for an integer m."""
    if isinstance(inducing_variable, (int, np.integer)) and not isinstance(inducing_variable, bool):
        if is_dask_array(X):
            raise TypeError("with Dask rows, give the inducing inputs as an array, e.g. "
                            "dpgp_gpflow.streaming.minibatch_kmeans_inducing_inputs(X, m)")
        inducing_variable = kmeans_inducing_inputs(X, int(inducing_variable))
    return inducing_inputs(inducing_variable, int(X.shape[1]))


def _sparse_rows(data: Any) -> Tuple[Any, Any, Optional[Tuple[Any, Any]]]:
    """``(X, Y, dask_rows)``: validated in-memory rows, or Dask rows (labels checked where they are
    read) with the empty placeholders GPflow's constructor gets instead (:class:`DaskRowsMixin`)."""
    X, Y, rows = split_dask_rows(data)
    if rows is not None:
        return X, np.zeros((0, 1)), rows
    X, Y = _unpack((X, Y))
    return X, Y, None


#: The SoR classifier's first Newton step from ``w0 = 0`` linearises the likelihood with ``W = 1/4``:
#: the variance its chunked terms use in place of FITC's ``nu``.
SOR_VARIANCE = 4.0


class SoRChunkTerms(FITCChunkTerms):
    """The first Newton step ``w1 = C_w y`` of :class:`DPSparseLaplaceGPC` on a chunk of rows: FITC's
    maths with ``nu = SOR_VARIANCE`` (the linearised likelihood's variance ``1/W``) and
    ``C_w = 2 (L_B L_B^T)^{-1} V / nu`` (gradient ``y / 2`` over ``W = 1/4``), ``V = Phi^T``; the labels
    are checked to be -1 or +1. Public (see :mod:`dpgp_gpflow.streaming.terms`)."""

    def nu(self, X: np.ndarray, V: tf.Tensor) -> Any:
        return self.noise_variance

    @inherit_check_shapes
    def latent_columns(self, X: np.ndarray, factors: Factors) -> tf.Tensor:
        return super().latent_columns(X, factors) * 2.0

    @inherit_check_shapes
    def latent_product(self, X: np.ndarray, factors: Factors, left: tf.Tensor) -> tf.Tensor:
        return super().latent_product(X, factors, left) * 2.0

    def check_outputs(self, Y: np.ndarray) -> None:
        validate_labels(np.asarray(Y).reshape(-1, 1))

    def readout(self, factors: Factors) -> SoRReadout:
        return SoRReadout.from_factors(self._kernel, self.Z, factors.L, factors.LB)


class DPSparseLaplaceGPC(_LabelContract, DaskRowsMixin, FactoredModelMixin, PrivateInputsMixin, LaplaceGPC):
    """Subset-of-regressors Laplace GP classifier with a one-shot DP release of its m weights.

    ``DPSparseLaplaceGPC((X, Y), kernel, inducing_variable)``: ``inducing_variable`` is an
    ``InducingPoints``, an array [M, D] or an integer m (then
    :func:`~dpgp_gpflow.models.kmeans_inducing_inputs` on ``X``, seed 0). The inducing inputs must be
    public (a function of ``X`` only); they are made non-trainable.

    The model is SoR in weight space: ``f = Phi w``, ``w ~ N(0, I)``, ``Phi = K_NM L_MM^{-T}``.
    ``predict_f`` / ``predict_y`` are the non-private SoR Laplace predictions (Newton to the mode with
    the Nystrom prior ``Phi Phi^T``; they read the labels); the training objective is the SoR Laplace
    marginal likelihood and marks the model (leak guard). Its latents are the weights after the
    first Newton step from ``w0 = 0``, ``w1 = C_w y``.

    Privacy assumption: ``X``, ``Z`` and the kernel hyperparameters are public;
    ``hyperparameters_public=True`` declares the kernel values given here chosen without the labels
    (otherwise non-default values make releases refuse, :class:`~dpgp_gpflow.PrivacyLeakError`).
    ``groups`` (public integers [N]): persons, as for :class:`DPLaplaceGPC`; with Dask rows an in-memory
    array beside them (the streamed release cuts its chunks between persons, whose rows must be consecutive).

    ``private_inputs=True`` (docs/whole_rows.md#classification): the inputs are private too, inside the public box
    ``x_bounds`` (clipped to it with a count warning, or refused with ``clip_inputs=False``); ``Z`` must come from
    the box alone and the kernel needs a public bound on ``k(x, x)``. :meth:`release` then releases the whole-row
    statistics of the first Newton step once and returns a
    :class:`~dpgp_gpflow.whole_rows.classification.WholeRowsClassifier`; every release that treats the inputs as
    public refuses (:class:`~dpgp_gpflow.PrivacyLeakError`).
    """

    function_type = PrivateSparseClassifier
    reference_training_inputs = False  # release the weights themselves unless reference inputs are given

    def __init__(
        self,
        data: Any,
        kernel: gpflow.kernels.Kernel,
        inducing_variable: Any,
        *,
        max_iter: int = 100,
        tol: float = 1e-10,
        hyperparameters_public: bool = False,
        groups: Any = None,
        private_inputs: bool = False,
        x_bounds: Any = None,
        clip_inputs: bool = True,
    ) -> None:
        if not isinstance(private_inputs, bool):
            raise TypeError(f"private_inputs must be True or False, got {private_inputs!r}")
        box = None
        if private_inputs:  # whole rows private (docs/whole_rows.md#classification); refusals before anything else
            data, box = private_input_data(data, kernel, inducing_variable, x_bounds, clip_inputs)
        else:
            refuse_private_input_options(x_bounds, clip_inputs)
        self._hold_private_inputs(box, clip_inputs)
        X, Y, dask_rows = _sparse_rows(data)
        if dask_rows is not None and is_dask_array(groups):
            raise TypeError("with Dask rows, give groups= as an in-memory array of the N public person ids "
                            "(e.g. groups.compute()): the streamed release cuts its chunks between persons from it")
        Z = _inducing_inputs(inducing_variable, X)
        self._hold_groups(groups, int(np.shape(X)[0]))
        if dask_rows is not None:
            X = np.zeros((0, Z.shape[1]))
        super().__init__((X, Y), kernel, max_iter=max_iter, tol=tol)
        self._hold_dask_rows(dask_rows)
        self.inducing_variable = gpflow.inducing_variables.InducingPoints(Z)
        gpflow.set_trainable(self.inducing_variable, False)  # public; never fitted on the labels
        self._guard_construction(hyperparameters_public, [".inducing_variable"])  # leak guard: values as given

    def maximum_log_likelihood_objective(self) -> tf.Tensor:
        self._mark_private_objective()
        return super().maximum_log_likelihood_objective()

    # -- whole rows private (private_inputs=True): whole_rows/classification.py ------------------
    def _public_inputs_only(self) -> None:
        if self.private_inputs:  # every path that treats the inputs as public reads one of the methods below
            whole_row_classes.public_inputs_refused(self)

    def centred_outputs(self) -> tf.Tensor:
        self._public_inputs_only()
        return super().centred_outputs()

    def release_function(self, **options: Any) -> Any:
        self._public_inputs_only()
        return super().release_function(**options)

    def features(self, Xnew: Any) -> tf.Tensor:
        """SoR features ``Phi = k(Xnew, Z) L_ZZ^{-T}`` [K, M] (public)."""
        Z = self.inducing_variable.Z
        Xnew = tf.convert_to_tensor(Xnew, dtype=Z.dtype)
        return sor_features(self.kernel(Z), self.kernel(Xnew, Z))

    @tf.autograph.experimental.do_not_convert
    def mode(self) -> LaplaceMode:
        """:func:`laplace_mode` with the SoR prior covariance ``Phi Phi^T`` (reads the labels)."""
        X, Y = self.data
        Phi = self.features(X)
        return laplace_mode(tf.matmul(Phi, Phi, transpose_b=True), Y, max_iter=self.max_iter, tol=self.tol)

    @inherit_check_shapes
    def predict_f(self, Xnew: InputData, full_cov: bool = False, full_output_cov: bool = False) -> MeanAndVariance:
        """Non-private SoR Laplace prediction: mean ``Phi* Phi^T a``, variance ``Phi* (I + Phi^T W Phi)^{-1} Phi*^T``."""
        if full_cov or full_output_cov:
            raise NotImplementedError("DPSparseLaplaceGPC.predict_f supports full_cov=False only")
        X, _ = self.data
        mode = self.mode()
        Phi = self.features(X)
        w_hat = tf.matmul(Phi, mode.a, transpose_a=True)  # [M, 1]: f_hat = Phi Phi^T a = Phi w_hat
        W = tf.reshape(tf.sigmoid(mode.f) * tf.sigmoid(-mode.f), [-1])
        return sor_predict_from_weights(Phi, self.features(Xnew), w_hat, W)

    def latent_terms(self) -> ReleaseTerms:
        """``C_w = 1/2 (I + Phi^T Phi / 4)^{-1} Phi^T`` (m x n) and the public weight covariance
        ``(I + Phi^T Phi / 4)^{-1}``."""
        self._public_inputs_only()
        X, _ = self.data
        Phi = self.features(X)  # [N, M]
        m = int(Phi.shape[1])
        La = tf.linalg.cholesky(tf.eye(m, dtype=tf.float64) + 0.25 * tf.matmul(Phi, Phi, transpose_a=True))
        covariance = tf.linalg.cholesky_solve(La, tf.eye(m, dtype=tf.float64))
        return ReleaseTerms(sor_first_step_cloaking(Phi), tf.zeros([m], dtype=tf.float64), covariance)

    def public_readout(self) -> SoRReadout:
        """A frozen :class:`~dpgp_gpflow.readouts.SoRReadout` (kernel, ``Z``, factors)."""
        self._public_inputs_only()
        X, _ = self.data
        return SoRReadout(self.kernel, self.inducing_variable.Z, X)

    def chunk_terms(self) -> SoRChunkTerms:
        """The first Newton step's public maths on a chunk of rows, for
        :func:`dpgp_gpflow.streaming.release_function` (kernel, ``Z``, ``SOR_VARIANCE``, label bounds)."""
        self._public_inputs_only()
        return SoRChunkTerms(self.kernel, self.mean_function, self.inducing_variable.Z.numpy(), SOR_VARIANCE,
                             self.y_bounds, gpflow.config.default_jitter())

    def split_terms(self, train: Any, test: Any) -> ReleaseTerms:
        """``(Phi(X_test), C_w(X_train))``: the SoR first-step latent at ``test`` (offset 0)."""
        self._public_inputs_only()
        Xtr, Xte = self._split_inputs(train, test)
        A = self.features(Xte)
        return ReleaseTerms((A, sor_first_step_cloaking(self.features(Xtr))), tf.zeros([int(A.shape[0])], dtype=A.dtype))

    def cloaking_matrix(self, Xnew: Any = None) -> tf.Tensor:
        """With ``Xnew``: the first-step latent's cloaking matrix there (k x n). Without: ``C_w`` (m x n),
        the first step ``w1 = C_w y`` that :meth:`release` publishes. Public."""
        if Xnew is None:
            return dense_map(self.latent_terms().map)
        X, _ = self.data
        return dense_map(self.release_terms(tf.convert_to_tensor(Xnew, dtype=X.dtype)).map)

    # a classifier releases its latents, not predictions at Xnew: no Xnew argument
    def release(self, *, steps: int = 1, **options: Any) -> PrivateSparseClassifier:  # type: ignore[override]
        """Release the first Newton step of the m SoR weights once, (epsilon, delta)-DP (d = 2).

        ``reference_inputs=None`` releases the weights ``w1 = C_w y`` themselves (``objective="mse"``
        then minimises the expected squared error of the weights). With public ``reference_inputs``
        (e.g. the training inputs ``X``), the release is of ``R w1`` with ``R^T R = Phi_ref^T Phi_ref``
        (plus a tiny ridge: :func:`~dpgp_gpflow.pipeline.reference_coordinates`), so ``"mse"``
        minimises the expected squared error of the latents at the reference inputs; the map back to
        ``w~`` is public post-processing. ``"entropy"`` is the same either way (it is
        invariant to invertible maps). Only one step is supported (``steps=1``). Keywords
        (``epsilon``, ``delta`` required) as for :func:`dpgp_gpflow.pipeline.release_function`.

        With ``private_inputs=True``: the whole-row release of the first Newton step
        (:func:`~dpgp_gpflow.whole_rows.classification.release_classifier_model`: ``epsilon``, ``delta``,
        ``calibration``, ``seed``, ``accountant``, ``hyperparameters_public``, ``source``, ``chunk_size``,
        ``shares``), returning a :class:`~dpgp_gpflow.whole_rows.classification.WholeRowsClassifier`.
        """
        if self.private_inputs:
            whole_row_classes.check_one_step(check_steps(steps))
            return whole_row_classes.release_classifier_model(self, **options)  # type: ignore[return-value]
        if check_steps(steps) != 1:
            raise NotImplementedError("DPSparseLaplaceGPC releases the first Newton step only (steps=1)")
        return cast(PrivateSparseClassifier, self.release_function(**options))  # function_type
