"""Classification with private inputs: the first Newton step of the sparse Laplace classifiers from the whole-row
statistics (docs/whole_rows.md#classification).

With labels ``t in {-1, +1}`` and the logistic likelihood, the first Newton step from ``f = 0`` has the constant
``W = 1/4`` and the gradient ``t / 2``: it is GP regression on the pseudo-targets ``2 t`` with noise variance
``1 / W = 4``. With unit-scale features ``phi`` (:mod:`.features`) and kernel variance ``sigma_f^2`` (the kernel's
public bound ``k_max``) the step's latent is

    f1(x) = phi(x)^T (lambda I + S)^{-1} (2 b),   lambda = 4 / sigma_f^2,   S = sum phi phi^T,   b = sum phi t,

the SoR first step of :class:`~dpgp_gpflow.models.DPSparseLaplaceGPC`, and its SoR variance is
``4 phi^T (lambda I + S)^{-1} phi``. So the step needs the whole-row statistics of the rows with the labels as
outputs in the bounds ``(-1, +1)`` (``q = n`` is public: :data:`CLASSIFICATION_SHARES` gives it a negligible
share). One-vs-rest with K classes: class ``a``'s labels ``t_a = +1`` where the label is ``a``, ``-1`` elsewhere;
the K blocks ``(S, b_a, q)`` are released together as one vector (:class:`~.statistics.GridStatistics`, one
pass, one Gaussian draw, one ledger event) with sensitivity ``sqrt(K J)``: a changed row moves ``S`` in every
block and every class's ``b_a`` (docs/whole_rows.md#classification derives the joint bound). The K released
copies of ``S`` are averaged (post-processing), which gives ``S`` the noise of a single block's release.

Only one Newton step: a second step needs ``W`` at the first step's latents on the private inputs, which are not
in the released statistics (a second release would be needed); ``steps > 1`` is refused.

Privacy assumption: as every whole-row release (:mod:`.release`): neighbours differ in one whole row (its input
anywhere in the public box, its label any label), or with ``groups`` in all the rows of one person; the kernel
(variance and lengthscales), ``Z``, the box and the jitter are public.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from ..contract import check_release_hyperparameters
from ..exceptions import PrivacyLeakError
from ..io.card import LABEL_BOUNDS, whole_rows_summary
from ..io.writing import register, whole_rows_classifier_content
from ..measurement import measure
from ..models.base import inducing_inputs
from ..models.laplace import validate_labels
from ..models.one_vs_rest import one_vs_rest_probabilities, validate_class_labels
from ..released import Released, probit_approximation
from ..streaming.chunks import DEFAULT_CHUNK_SIZE, ChunkSource
from ..streaming.one_vs_rest_chunks import check_labels
from ..validation import as_inputs
from .design import check_public_inducing_inputs, clip_private_inputs
from .features import FeatureMap, feature_map, kernel_bound
from .mechanism import NoisedStatistics, relation, statistics_measurement
from .posterior import WeightPosterior, predictive_terms, regularised_release, weight_posterior
from .release import model_rows, public_setup, unset_lengthscales
from .released import StatisticsRelease
from .statistics import GridStatistics, RowStatistics

__all__: list[str] = []  # internal: the models import these names by name

#: The labels as outputs: ``t in {-1, +1}`` inside the bounds ``(-1, +1)`` (width d = 2, midpoint 0): LABEL_BOUNDS,
#: defined with the release file's checks (:mod:`dpgp_gpflow.io.card`, TensorFlow-free), which recompute the noise.
#: Squared shares of ``(S, b, q)``: ``q = sum t^2 = n`` is public, so it gets a negligible share (it is released,
#: with a huge noise, and never read). The regression split's ``S`` share, the rest to ``b``: in NumPy simulations
#: of the released statistics (toy 2-D problems, n = 2000, M = 16, epsilon 1 and 3) the held-out accuracy moved by
#: less than 0.01 between ``w_S^2`` = 0.1 and 0.6 (design-time runs, docs/whole_rows.md#classification).
CLASSIFICATION_SHARES = (0.30, 0.70, 1e-6)
#: The logistic likelihood's ``W`` at ``f = 0`` is ``1/4``: the first Newton step is regression with noise
#: variance ``1 / W`` on the pseudo-targets ``f0 + W^{-1} grad = 4 (t / 2) = 2 t``.
STEP_NOISE_VARIANCE = 4.0
STEP_TARGET_SCALE = 2.0


# ---------------------------------------------------------------------------------------------
# The rows: private inputs and labels.


class LabelStatistics(RowStatistics):
    """:class:`~.statistics.RowStatistics` of labelled rows: the chunk's labels are checked and mapped to
    ``t in {-1, +1}`` (binary: labels given as -1 / +1; ``label`` of ``num_classes``: integer labels, ``+1`` for
    ``label``, ``-1`` for the rest), the outputs of the regression statistics with bounds ``(-1, +1)``.
    Picklable (Dask workers). The checks' errors carry no statistic of the labels."""

    def __init__(self, features: FeatureMap, x_bounds: Any, *, label: Optional[int] = None,
                 num_classes: Optional[int] = None, clip_inputs: bool = True) -> None:
        super().__init__(features, x_bounds, LABEL_BOUNDS, clip_inputs=clip_inputs)
        if (label is None) != (num_classes is None):
            raise ValueError("give both label and num_classes (one class of several), or neither (binary labels)")
        self.label = None if label is None else int(label)
        self.num_classes = None if num_classes is None else int(num_classes)

    def signs(self, Y: np.ndarray) -> np.ndarray:
        """The chunk's labels as ``t`` [c] in {-1, +1}."""
        return label_signs(Y, self.label, self.num_classes)

    def __call__(self, X: np.ndarray, Y: np.ndarray, start: int) -> Dict[str, Any]:
        return super().__call__(X, self.signs(Y), start)


def label_signs(Y: Any, label: Optional[int], num_classes: Optional[int]) -> np.ndarray:
    """A chunk's labels checked and as ``t`` [c] in {-1, +1}: binary (``num_classes`` None) labels -1 / +1, else
    integers ``0 .. num_classes - 1``, ``+1`` for ``label``. The errors carry no statistic of the labels."""
    Y = np.asarray(Y)
    if num_classes is None:
        return validate_labels(Y.reshape(-1, 1))[:, 0]
    labels = validate_class_labels(Y, num_classes, int(Y.shape[0]))
    return np.where(labels == label, 1.0, -1.0)


class OneVsRestStatistics(GridStatistics):
    """The per-chunk function of the K one-vs-rest blocks (one :class:`LabelStatistics` per class, in order):
    every block's sums ``(S, b_a, q)`` of one chunk with the features computed once (``S`` and ``q = c`` are the
    same in every block; ``b_a = Phi^T t_a``). Equal to the blocks' own sums (:class:`GridStatistics`), K times
    cheaper. Picklable (Dask workers)."""

    blocks_are = "classes"

    def __init__(self, rows: Sequence[LabelStatistics]) -> None:
        super().__init__(rows)
        classes = [(r.label, r.num_classes) for r in self.rows]
        if not all(isinstance(r, LabelStatistics) for r in self.rows) or classes != [
                (a, len(classes)) for a in range(len(classes))]:
            raise ValueError("OneVsRestStatistics takes the LabelStatistics of classes 0 .. K-1, in order")

    def __call__(self, X: np.ndarray, Y: np.ndarray, start: int) -> Dict[str, Any]:
        """Every class's sums of one chunk (PRIVATE values, public shapes)."""
        first = self.rows[0]
        Y = np.asarray(Y)
        labels = validate_class_labels(Y, len(self.rows), int(Y.shape[0]))
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != first.features.input_dim or X.shape[0] != labels.shape[0]:
            raise ValueError(f"a chunk must hold [c, {first.features.input_dim}] inputs and c labels, got "
                             f"{list(X.shape)} and {list(Y.shape)}")
        if not np.all(np.isfinite(X)):  # no count: a statistic of private values
            raise ValueError("the private rows are not all finite (nan or inf in the inputs)")
        X, outside = clip_private_inputs(X, first.box, first.clip_inputs)
        phi = first.features(X)  # [c, M] once for every class, each row of norm <= 1
        signs = np.where(labels[:, None] == np.arange(len(self.rows))[None, :], 1.0, -1.0)  # [c, K]: t_a, t^2 = 1
        b = tf.linalg.matmul(phi, tf.constant(signs), transpose_a=True).numpy()  # [M, K]
        shared = {"S": tf.linalg.matmul(phi, phi, transpose_a=True).numpy(), "q": float(X.shape[0]),
                  "n": int(X.shape[0]), "clipped_inputs": outside, "clipped_outputs": 0}
        return {"blocks": tuple({**shared, "b": b[:, a]} for a in range(len(self.rows)))}



def public_inputs_refused(model: Any) -> None:
    """``PrivacyLeakError`` for a classifier of private inputs on a release path that treats the inputs as public
    (its maps and readouts read the training inputs), before anything is reserved."""
    raise PrivacyLeakError(
        f"this {type(model).__name__} was built with private_inputs=True: a release that treats the inputs as public "
        "would leak them; release the whole rows with model.release(epsilon=..., delta=...) and predict from what "
        "it returns")


def check_one_step(steps: int) -> None:
    """``NotImplementedError`` (one line) for ``steps > 1`` with private inputs (``steps`` checked by the model)."""
    if steps != 1:
        raise NotImplementedError(
            "with private inputs only the first Newton step is released (steps=1): a second step needs W at the "
            "first step's latents on the private inputs, which the released statistics do not hold")


# ---------------------------------------------------------------------------------------------
# What the release returns.


def classifier_posteriors(statistics: Dict[str, Any], noise_std: Dict[str, Any], kernel_variance: float,
                          blocks: int) -> Tuple[float, float, tf.Tensor, Tuple[WeightPosterior, ...]]:
    """``(offdiag_std, floor, S^, the weights' posterior of each block)`` of a whole-row classifier's released
    statistics and their noise std (``blocks`` blocks, stacked along axis 0 when more than one): the blocks' mean
    ``S~`` regularised (its K copies' independent noise: 1 / sqrt(K) of one), then one Newton step from ``f = 0``
    on the pseudo-targets ``2 b~`` at ``kernel_variance`` (the kernel's bound) and noise variance
    :data:`STEP_NOISE_VARIANCE`. Post-processing (public); the one place the classifier's and its audit's
    posteriors are computed."""
    m = int(np.shape(statistics["b"])[-1])
    S_std = np.reshape(noise_std["S"], (blocks, m, m))[0]
    offdiag_std, _, floor, S_hat = regularised_release(
        np.mean(np.reshape(statistics["S"], (blocks, m, m)), axis=0), S_std, copies=blocks)
    b_std = STEP_TARGET_SCALE * float(np.reshape(noise_std["b"], (blocks, m))[0, 0])  # of the pseudo-targets' 2 b~
    posteriors = tuple(
        weight_posterior(S_hat, tf.constant(STEP_TARGET_SCALE * b), kernel_variance=kernel_variance,
                         noise_variance=STEP_NOISE_VARIANCE, b_std=b_std, offdiag_std=offdiag_std)
        for b in np.reshape(statistics["b"], (blocks, m)))
    return offdiag_std, floor, S_hat, posteriors


class WholeRowsClassifier(StatisticsRelease, Released):
    """A DP release of the whole-row statistics of labelled rows and the sparse Laplace classifier (the first
    Newton step from ``f = 0``) they define: binary (``num_classes`` None, labels -1 / +1) or one-vs-rest of
    ``num_classes`` classes.

    ``predict_f(Xnew)``: the latent means and variances, [k, 1] (binary) or [k, K], NumPy: the SoR first step's
    mean ``phi^T (lambda I + S^)^{-1} 2 b~_a`` and variance ``4 phi^T (lambda I + S^)^{-1} phi`` plus the
    first-order variance the DP noise adds (:func:`~.posterior.predictive_terms`). ``predict_y``: the probability
    of class +1 [k, 1] (probit approximation) or the class probabilities [k, K]
    (:func:`~dpgp_gpflow.models.one_vs_rest.one_vs_rest_probabilities`), and ``P (1 - P)``. ``statistics`` /
    ``statistics_noise_std``: what was released, ``S`` [M, M], ``b`` [M], ``q`` [] for binary labels and one
    block per class ``S`` [K, M, M], ``b`` [K, M], ``q`` [K] for several. Post-processing only: free to query."""

    def __init__(self, noised: Sequence[NoisedStatistics], features: FeatureMap, *, x_bounds: np.ndarray,
                 num_classes: Optional[int], epsilon: float, delta: float, calibration: str) -> None:
        blocks = tuple(noised)
        if (num_classes is None and len(blocks) != 1) or (num_classes is not None and len(blocks) != num_classes):
            raise ValueError(f"{len(blocks)} released blocks for num_classes={num_classes}")
        self.num_classes = None if num_classes is None else int(num_classes)
        stack = (lambda key, part: blocks[0].__getattribute__(part)[key]) if num_classes is None else (
            lambda key, part: np.stack([getattr(b, part)[key] for b in blocks]))
        self._statistics = {k: np.array(stack(k, "statistics"), dtype=np.float64) for k in ("S", "b", "q")}
        self._noise_std = {k: np.array(stack(k, "noise_std"), dtype=np.float64) for k in ("S", "b", "q")}
        first = blocks[0]
        self.features = features
        self.num_data = int(first.num_data)
        self._epsilon, self._delta, self.calibration = float(epsilon), float(delta), str(calibration)
        self.noise_multiplier, self.sensitivity = float(first.multiplier), float(first.sensitivity)
        self.shares = tuple(first.shares)
        self.person_rows = int(first.person_rows)
        self.chunking = (int(first.chunking[0]), int(first.chunking[1]))
        self._reproducible = bool(first.reproducible)
        self.x_bounds = np.array(x_bounds, dtype=np.float64, copy=True)
        #: sigma_f^2: the kernel's variance (its public bound on k(x, x)); the step's lambda is 4 / sigma_f^2
        self.kernel_variance = float(features.k_max)
        # offdiag_std: the std of an off-diagonal entry's noise of the averaged ``S`` (public)
        self.offdiag_std, self.floor, self._S_hat, posteriors = classifier_posteriors(
            self._statistics, self._noise_std, self.kernel_variance, len(blocks))
        #: the weights' posterior of each class (one for binary labels), from the released statistics
        self.posteriors: Tuple[WeightPosterior, ...] = posteriors

    # -- what was released ----------------------------------------------------------------------------
    @property
    def statistics(self) -> Dict[str, np.ndarray]:
        """The released (noised) statistics at unit kernel scale, the labels as outputs (copies)."""
        return {k: v.copy() for k, v in self._statistics.items()}

    @property
    def clip_to_bounds(self) -> bool:
        """False: a classifier's latents are not bounded by its labels' bounds."""
        return False

    @property
    def neighbours(self) -> str:
        """``"row (inputs and outputs)"`` (a row's input and label), or the person relation with ``groups``."""
        return relation(self.person_rows)

    # -- predictions ---------------------------------------------------------------------------------
    def _terms(self, Xnew: Any) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Latent means, SoR variances and DP noise variances, [k, C] each (C = 1 binary, else K)."""
        phi = self.features(tf.constant(as_inputs("Xnew", Xnew, self.features.input_dim)))  # [k, M]
        sor = tf.reduce_sum(tf.square(phi), axis=1)  # prior = |phi|^2: no Nystrom residual (SoR)
        columns = [predictive_terms(p, phi, sor) for p in self.posteriors]
        return tuple(np.stack([c[i].numpy() for c in columns], axis=1) for i in range(3))  # type: ignore[return-value]

    def predict_f(self, Xnew: Any) -> Tuple[np.ndarray, np.ndarray]:
        """DP latent means and variances (the SoR variance plus the DP noise's, first order), [k, 1] or [k, K]."""
        mean, model, noise = self._terms(Xnew)
        return mean, model + noise

    def predict_y(self, Xnew: Any) -> Tuple[np.ndarray, np.ndarray]:
        """Probability of class +1 [k, 1] (binary; probit approximation) or class probabilities [k, K], and
        ``P (1 - P)``, NumPy."""
        mean, var = (tf.constant(a) for a in self.predict_f(Xnew))
        P = (probit_approximation(mean, var) if self.num_classes is None else one_vs_rest_probabilities(mean, var))
        P = P.numpy()
        return P, P * (1.0 - P)

    def predict_class(self, Xnew: Any) -> np.ndarray:
        """Binary: labels in {-1, +1} [k, 1] (the sign of the latent mean); several classes: the most probable
        class [k] (int64)."""
        if self.num_classes is None:
            return np.where(self.predict_f(Xnew)[0] >= 0.0, 1.0, -1.0)
        return np.argmax(self.predict_y(Xnew)[0], axis=1).astype(np.int64)

    # -- card --------------------------------------------------------------------------------------
    def privacy_card(self) -> Dict[str, Any]:
        """The guarantee and what was released, as plain values."""
        return {"epsilon": self.epsilon, "delta": self.delta, "reproducible": self.reproducible,
                "clip_to_bounds": False, "neighbours": self.neighbours,
                "mechanism": "gaussian (whole-row statistics, labels)", "calibration": self.calibration,
                "noise_multiplier": self.noise_multiplier, "sensitivity": self.sensitivity,
                "shares": list(self.shares), "x_bounds": self.x_bounds.tolist(), "num_data": self.num_data,
                "num_inducing": self.features.m, "num_classes": self.num_classes, "person_rows": self.person_rows,
                "chunking": list(self.chunking), "kernel_variance": self.kernel_variance, "newton_steps": 1}

    def __repr__(self) -> str:
        return whole_rows_summary(self.privacy_card())  # as ``dpgp show`` prints it from the file's card


register(WholeRowsClassifier, whole_rows_classifier_content)  # its file: dpgp_gpflow.io.writing


# ---------------------------------------------------------------------------------------------
# The release.


def release_classifier_rows(source: ChunkSource, kernel: Any, inducing_inputs: Any, *, x_bounds: Any,
                            epsilon: float, delta: float, num_classes: Optional[int] = None,
                            calibration: str = "analytic", seed: Optional[int] = None, accountant: Any = None,
                            shares: Any = CLASSIFICATION_SHARES, clip_inputs: bool = True,
                            checks: Sequence[Callable[[], Any]] = (), groups: Any = "source") -> WholeRowsClassifier:
    """Release the whole-row statistics of ``source``'s labelled rows once (one Gaussian draw, one ledger event)
    and return the :class:`WholeRowsClassifier` of the first Newton step. ``num_classes`` None: labels -1 / +1;
    else integer labels ``0 .. K-1``, the K one-vs-rest blocks released together (sensitivity ``sqrt(K J)``).
    ``kernel``: public, with a bound on ``k(x, x)``; its variance is the step's ``sigma_f^2``. ``inducing_inputs``
    and ``x_bounds``: public (from the box alone). ``groups``, ``checks``, ``shares``, ``seed``, ``accountant``,
    ``calibration`` as for :func:`~dpgp_gpflow.whole_rows.release_rows`. Every label is checked in a pass over
    ``source`` before anything is reserved (a malformed label: ``ValueError``, nothing reserved or drawn)."""
    request, groups, Z, box = public_setup(source, kernel, inducing_inputs, x_bounds, epsilon, delta, calibration,
                                           seed, groups)
    if num_classes is not None:
        validate_class_labels(np.zeros(0, np.int64), num_classes, 0)  # num_classes alone
    features = feature_map(kernel, Z, box)  # a model's repeated releases reuse the public map
    classes = [None] if num_classes is None else list(range(int(num_classes)))
    blocks = [LabelStatistics(features, box, label=a, num_classes=num_classes, clip_inputs=clip_inputs)
              for a in classes]
    rows = blocks[0] if num_classes is None else OneVsRestStatistics(blocks)

    def released(noised: Any) -> WholeRowsClassifier:  # post-processing, after the commit
        return WholeRowsClassifier(noised if num_classes is not None else (noised,), features, x_bounds=box,
                                   num_classes=num_classes, epsilon=request.epsilon, delta=request.delta,
                                   calibration=request.calibration)

    # Every chunk's labels, before anything is reserved (a refusal spends nothing). It reads the private labels only
    # to check them, as a model's constructor does: a refusal says that some label is malformed, no count or value.
    def labels() -> None:
        if int(getattr(source, "num_outputs", 1)) == 1:  # else refused by the release's own checks
            check_labels(source, label_signs, 0, num_classes)

    public = (lambda: kernel_bound(kernel, box), lambda: check_public_inducing_inputs(Z))
    measurement = statistics_measurement(request, source, rows, shares=shares, then=released,
                                         checks=(*public, *checks, labels), groups=groups)
    return measure(measurement, accountant)


def release_classifier_model(model: Any, *, epsilon: float, delta: float, calibration: str = "analytic",
                             seed: Optional[int] = None, accountant: Any = None, hyperparameters_public: bool = False,
                             source: Optional[ChunkSource] = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
                             shares: Any = CLASSIFICATION_SHARES, lengthscales: Optional[str] = None,
                             **options: Any) -> WholeRowsClassifier:
    """``model.release(...)`` of a sparse Laplace classifier built with ``private_inputs=True``
    (:class:`~dpgp_gpflow.models.DPSparseLaplaceGPC`, or :class:`~dpgp_gpflow.models.DPSparseMulticlassLaplaceGPC`
    with its ``num_classes``): its rows (``source``, else its Dask rows or its data in chunks of ``chunk_size``)
    released by :func:`release_classifier_rows` with its kernel, inducing inputs, box, input clipping and persons,
    its leak guard (every problem's) checked before anything is reserved. ``lengthscales`` None: the kernel's own,
    refused when they were left at GPflow's default 1.0 (read as none given; no private grid here, unlike
    ``DPSGPR``); ``"kernel"``: the kernel's own, a deliberate 1.0 included (as ``DPSGPR``'s)."""
    if options:
        raise TypeError(f"{sorted(options)} do not apply to a whole-row classifier (private inputs): it releases "
                        "its statistics once, with no residual releases, noise optimiser or reference inputs")
    problems = getattr(model, "problems", (model,))
    num_classes = getattr(model, "num_classes", None)
    first = problems[0]
    if lengthscales is not None and not (isinstance(lengthscales, str) and lengthscales == "kernel"):
        raise ValueError(f"lengthscales must be None or 'kernel' (the kernel's own) for a private-inputs classifier, "
                         f"got {lengthscales!r}: it has no private lengthscale grid (DPSGPR has); give them from "
                         "public knowledge in the kernel")
    if lengthscales is None and unset_lengthscales(first.kernel):  # (DPSGPR chooses them from a grid; no grid here)
        raise ValueError("the kernel's lengthscales are all 1.0, GPflow's default, read as none given: a "
                         "private-inputs classifier has no private grid to choose them (DPSGPR has): give them from "
                         "public knowledge (e.g. a fraction of the box's width), or release(..., "
                         "lengthscales='kernel') if 1.0 is intended")
    rows, groups = model_rows(model, source, chunk_size)

    def leak_guard() -> None:  # every problem's, before anything is reserved
        for problem in problems:
            check_release_hyperparameters(problem, hyperparameters_public)

    return release_classifier_rows(
        rows, first.kernel, first.inducing_variable.Z.numpy(), x_bounds=first.x_bounds, epsilon=epsilon, delta=delta,
        num_classes=num_classes, calibration=calibration, seed=seed, accountant=accountant, shares=shares,
        clip_inputs=first.clip_inputs, groups=groups,
        checks=(leak_guard,))
