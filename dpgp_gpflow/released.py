"""What a private release hands back: one family of objects, every field safe to publish.

* :class:`PrivateRelease`: DP values at given inputs (the output of every Gaussian mechanism in
  :mod:`dpgp_gpflow.mechanisms`).
* :class:`PrivateFunction`: a release of m latent values plus a frozen :class:`~dpgp_gpflow.contract.PublicReadout`,
  queryable at any inputs at no further privacy cost (post-processing); :class:`PrivateClassifier`
  adds class probabilities. Each factors what it needs once, at construction.

All share :class:`Released`: the releases they are built from, their total ``(epsilon, delta)``
under basic composition, whether their means are clipped to the public bounds (``clip_to_bounds``:
post-processing, free; a regression model's ``release`` and ``release_function`` return them clipped,
:func:`clipped_by_default`; ``unclipped()`` gives the raw DP values, ``clipped()`` clips), a short repr
(mechanism, epsilon, delta, k, r, bounds; no arrays), a
privacy card (:meth:`Released.privacy_card`) and :meth:`Released.save` to a release file
(``docs/release_file.md``; read back with :func:`dpgp_gpflow.load`). A :class:`PrivateFunction` also
exports a TensorFlow SavedModel (:meth:`PrivateFunction.export_saved_model`) that plain TensorFlow serves.
Privacy assumption: none of them holds the private outputs or anything computed from them except
the released (noisy) values; every other piece is a copy of a public quantity.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, NamedTuple, Optional, Sequence, Tuple, Union, cast

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from .noise_planning import OptimiserCertificate, row_norms
from .contract import PublicReadout, readout_and_variance, stacked
from .io.card import RELEASE_FIELDS, ReleaseEntry
from .io.format import provenance, write_card
from .io.writing import VALUE_ARRAYS, function_content, register, releases_content, write_released
from .validation import Bounds, as_inputs, bound_columns

__all__ = ["PrivateClassifier", "PrivateFunction", "PrivatePrediction", "PrivateRelease"]


class Released:
    """What every released object shares: its releases, its total budget and a short repr."""

    @property
    def releases(self) -> Tuple["PrivateRelease", ...]:
        """Every release this object is built from, in order."""
        raise NotImplementedError

    # ``epsilon``, ``delta``, ``reproducible`` and ``clip_to_bounds``: fields of a PrivateRelease,
    # totals / attributes of a PrivateFunction.
    if TYPE_CHECKING:
        @property
        def epsilon(self) -> float: ...

        @property
        def delta(self) -> float: ...

        @property
        def reproducible(self) -> bool: ...

        @property
        def clip_to_bounds(self) -> bool: ...

    # -- the audit (dpgp_gpflow.privacy_audit.audit) --------------------------------------------------

    def audit_parts(self, model: Any) -> Tuple[Tuple["Released", Any], ...]:
        """The pairs ``(released object, model)`` whose releases :func:`dpgp_gpflow.privacy_audit.audit`
        recomputes one by one against that model's public maps: this object and ``model``. An object made of
        several models' releases (several classes) pairs each part with its model."""
        return ((self, model),)

    def audited_mu(self, model: Any, mus: Sequence[float]) -> Optional[float]:
        """The Gaussian-DP parameter of the whole from its releases' audited ``mus`` (in the order of
        :meth:`audit_parts`), for an object whose claim composes them in Gaussian DP; None (the default) when
        they compose by basic composition, each release audited against its own claim."""
        return None

    # -- the privacy card and the release file (docs/release_file.md) --------------------------------

    def privacy_card(self) -> Dict[str, Any]:
        """What was released and under which guarantee, as plain values (``docs/release_file.md#the-privacy-card``):
        the total ``epsilon``, ``delta`` (basic composition), ``reproducible``, ``clip_to_bounds`` (the
        released means are clipped to the public bounds) and one entry per release."""
        return {"epsilon": self.epsilon, "delta": self.delta, "reproducible": self.reproducible,
                "clip_to_bounds": self.clip_to_bounds, "releases": [r.release_card() for r in self.releases]}

    def save(self, path: Union[str, "os.PathLike[str]"], *, inputs: Any = None, **card_extras: Any) -> Path:
        """Write this object to a release file at ``path`` (one JSON file, ``docs/release_file.md``); read it
        back with :func:`dpgp_gpflow.load`. Saving is post-processing: it costs no privacy budget.

        The card records the privacy parameters of every release, the software versions, the creation
        time (UTC) and ``inputs_hash``: the SHA-256 (:func:`~dpgp_gpflow.io.format.inputs_hash`) of the
        public ``inputs`` the release was computed at when given (for a :class:`PrivateRelease` its
        ``Xnew``), or an ``inputs_hash=`` string passed as is. Other keywords are added to the card as
        they are (plain JSON values; the card's own keys are refused). ``NotImplementedError`` when a
        piece has no file form (a readout without ``release_state``, a kernel outside the supported list).
        The file's content is composed by :mod:`dpgp_gpflow.io.writing` from this object's public state.
        """
        return write_released(self, path, inputs=inputs, **card_extras)

    def __repr__(self) -> str:
        last = self.releases[-1]
        steps = len(self.releases)
        outputs = f", outputs={last.num_outputs}" if last.num_outputs > 1 else ""
        return (f"{type(self).__name__}(mechanism={last.mechanism!r}, epsilon={self.epsilon:.6g}, "
                f"delta={self.delta:.6g}, k={np.shape(last.mean)[0]}{outputs}, r={last.rank}, bounds={last.y_bounds}"
                + (f", releases={steps}" if steps > 1 else "")
                + (", clip_to_bounds=True" if self.clip_to_bounds else "")
                + (", reproducible=True)" if self.reproducible else ")"))


_CLASSIFIER_LATENT_CLIP = ("this release holds a classifier's latent values: its y_bounds (-1, +1) bound the labels, not "
                           "the latents, so clipping them to the bounds is meaningless (the classifier's probabilities "
                           "are in [0, 1] already)")


@dataclass(frozen=True, repr=False)
class PrivateRelease(Released):
    """A differentially private release of GP predictions; every field is safe to publish.

    It never holds the non-private mean. ``noise_factor`` (k x r) gives the DP noise covariance
    ``noise_factor @ noise_factor.T`` (public), so users can add it to their uncertainty.

    ``mean``, ``variance`` and ``noise_std`` are NumPy [k, P], as GPflow's predictions: [k, 1] for one
    output (a [k] array given to the constructor, as the mechanisms and release files of one output hold
    them, is stored as [k, 1]). Several outputs (``DPGPR`` with ``Y`` [N, P], docs/guides/multi_output.md):
    ``noise_factor`` [kP, r] factors the covariance of the mean stacked output by output (all k
    predictions of output 1, then output 2, ...: ``mean.T.reshape(-1)``); ``y_bounds`` is a pair for all
    outputs or a tuple of P pairs.

    With ``clip_to_bounds=True`` (:meth:`clipped`) ``mean`` is the released mean clipped to
    ``y_bounds``: post-processing of the DP output, no privacy cost; ``noise_std`` and
    ``noise_factor`` still describe the Gaussian noise added *before* clipping (the clipped mean's
    error is never larger at any point, since the outputs and hence the true predictive means of a
    regression lie in the bounds). A regression model's ``release`` returns it clipped
    (:func:`clipped_by_default`); :meth:`unclipped` gives the raw DP mean (what the auditor and the
    noise reported describe). For regression releases: a classifier's latent values are not
    bounded by its labels' bounds, and a release marked ``classifier_latent`` refuses to be clipped.
    """

    #: [k, P] ([k, 1] for one output) released (noisy) predictive mean (clipped if ``clip_to_bounds``; raw:
    #: :meth:`unclipped`)
    mean: np.ndarray
    variance: np.ndarray  #: [k, P] public posterior variance of f (does not depend on y)
    noise_std: np.ndarray  #: [k, P] std of the DP Gaussian noise at each point (before any clipping)
    noise_factor: np.ndarray  #: [k, r] ([kP, r], stacked output by output) factor of the DP noise covariance
    epsilon: float
    delta: float
    data_sensitivity: float  #: d: how far one private output may move
    #: Sensitivity in the Mahalanobis norm of the noise covariance's shape, d included: for cloaking
    #: ``d sqrt(max_i c_i^T M^+ c_i)`` with the optimised M; for the standard mechanism the RKHS bound
    #: ``d max_j sqrt([K^-1 Kff K^-1]_jj)`` against the prior covariance. The noise std along a
    #: neighbour's shift is ``noise_multiplier * sensitivity`` in both cases.
    sensitivity: float
    noise_multiplier: float  #: unit-sensitivity Gaussian multiplier s for (epsilon, delta)
    calibration: str
    objective: Optional[str]  #: "mse" / "entropy" for cloaking, None for the standard mechanism
    certificate: Optional[OptimiserCertificate]
    mechanism: str = "cloaking"
    rank: int = 0  #: r: number of directions that receive noise
    rtol: Optional[float] = None  #: singular-value tolerance that chose r
    bias_bound: float = 0.0  #: largest worst-case |bias| of any value from projecting the mean onto r directions
    reproducible: bool = False  #: True when the noise came from an explicit seed (not private)
    y_bounds: Optional[Bounds] = None  #: the public bounds of the private outputs (a pair, or one per output)
    clip_to_bounds: bool = False  #: ``mean`` is clipped to ``y_bounds`` (post-processing, free)
    #: ``mean`` holds a classifier's latent values, whose ``y_bounds`` are its labels' (-1, +1) and do not
    #: bound them: never clipped. Set on every release of a classifier model as it leaves the pipeline
    #: (:mod:`dpgp_gpflow.pipeline`, also at new inputs), and by :class:`PrivateClassifier` on its releases
    #: (also when loaded from a file, so the card does not record it).
    classifier_latent: bool = False
    #: the neighbouring relation the release protects, as the model's release records it
    #: (:func:`~dpgp_gpflow.neighbours.relation`: ``"row"``, ``"row (P outputs)"``, ``"person (groups, ...)"``);
    #: None when not recorded (a mechanism called directly, older files)
    neighbours: Optional[str] = None

    def __post_init__(self) -> None:
        for name in VALUE_ARRAYS:  # one output given as [k] (a mechanism's vector, a release file): [k, 1]
            if np.ndim(getattr(self, name)) == 1:
                object.__setattr__(self, name, np.reshape(getattr(self, name), (-1, 1)))
        for name in ("clip_to_bounds", "classifier_latent"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.clip_to_bounds:
            if self.classifier_latent:
                raise ValueError(_CLASSIFIER_LATENT_CLIP)
            if self.y_bounds is None:
                raise ValueError("clip_to_bounds needs the release's public y_bounds, and this release has none")
            object.__setattr__(self, "mean", np.clip(self.mean, *bound_columns(self.y_bounds)))
        # the raw DP mean of a clipped release is kept by clipped() alone, as "_raw_mean" (a release built or loaded
        # clipped, or copied by dataclasses.replace, has none: unclipped() refuses rather than return clipped values)

    def clipped(self) -> "PrivateRelease":
        """This release with its mean clipped to the public ``y_bounds`` (``clip_to_bounds=True``); the raw
        mean stays available from :meth:`unclipped`.

        Post-processing of a DP output: no privacy cost, nothing charged. ``noise_std`` still reports
        the std of the Gaussian noise added before clipping. ``ValueError`` without ``y_bounds`` or for
        a classifier's latent values (``classifier_latent``).
        """
        if self.classifier_latent:
            raise ValueError(_CLASSIFIER_LATENT_CLIP)
        if self.clip_to_bounds:
            return self
        clipped = dataclasses.replace(self, clip_to_bounds=True)
        object.__setattr__(clipped, "_raw_mean", self.mean)
        return clipped

    def unclipped(self) -> "PrivateRelease":
        """This release with its raw DP mean (noise included, not clipped; ``clip_to_bounds=False``): itself
        when not clipped. What ``noise_std``, ``noise_factor`` and :func:`dpgp_gpflow.audit` describe; values
        may lie outside ``y_bounds``. Free (the raw mean is as private as the clipped one). ``ValueError`` for
        a release whose raw mean was not kept: one read from a file saved clipped (the file holds the clipped
        mean; save ``release.unclipped()`` to publish the raw one)."""
        if not self.clip_to_bounds:
            return self
        raw = self.__dict__.get("_raw_mean")
        if raw is None:
            raise ValueError("this release was clipped when it was built or saved: its raw mean was not kept "
                             "(save release.unclipped() to keep the raw values in a file)")
        return dataclasses.replace(self, mean=raw, clip_to_bounds=False)

    @property
    def releases(self) -> Tuple["PrivateRelease", ...]:
        return (self,)

    def __repr__(self) -> str:
        return Released.__repr__(self)

    @property
    def num_outputs(self) -> int:
        """P: the number of outputs per row released (``mean`` [k, P])."""
        return int(np.shape(self.mean)[1])

    @property
    def total_variance(self) -> np.ndarray:
        """Posterior variance plus DP noise variance, per point."""
        return self.variance + self.noise_std**2

    @property
    def mu(self) -> float:
        """Gaussian-DP parameter of this release: sensitivity / noise std = 1 / noise_multiplier."""
        return 1.0 / self.noise_multiplier

    def release_card(self) -> Dict[str, Any]:
        """This release's entry in a privacy card: every scalar field (``certificate`` as a dict) and ``k``."""
        card: Dict[str, Any] = {name: getattr(self, name) for name in RELEASE_FIELDS}
        card["y_bounds"] = None if self.y_bounds is None else np.asarray(self.y_bounds, dtype=np.float64).tolist()
        card["certificate"] = None if self.certificate is None else {
            name: getattr(self.certificate, name) for name in OptimiserCertificate._fields}
        card["k"] = int(np.shape(self.mean)[0])
        if self.num_outputs > 1:
            card["outputs"] = self.num_outputs
        if self.neighbours is not None:
            card["neighbours"] = self.neighbours
        return card

    @classmethod
    def from_entry(cls, entry: ReleaseEntry) -> "PrivateRelease":
        """The release of a release file's card entry and arrays, checked for meaning by
        :func:`~dpgp_gpflow.io.card.release_entry` (``docs/release_file.md#what-loading-checks``)."""
        kwargs: Dict[str, Any] = {**entry.arrays, **entry.fields}
        if kwargs["certificate"] is not None:
            kwargs["certificate"] = OptimiserCertificate(**kwargs["certificate"])
        return cls(**kwargs)


class PrivatePrediction(NamedTuple):
    """DP predictions from a :class:`PrivateFunction` (all safe to publish), each NumPy [k, P] ([k, 1] for
    one output, as GPflow's)."""

    mean: np.ndarray
    variance: np.ndarray
    noise_std: np.ndarray


class PrivateFunction(Released):
    """A released set of m latent values and the public readout that predicts from them anywhere.

    ``release`` is the DP release of ``R u`` (``R``: public upper-triangular reference coordinates,
    or None for ``u`` itself); predictions at ``Xnew`` are ``offset(Xnew) + A(Xnew) u~`` with
    ``u~ = R^{-1} v~`` and the DP noise ``A(Xnew) R^{-1} F`` (both mapped back once, here). Free
    to query: post-processing of the release and of public pieces only.

    Several outputs (a sparse model of ``Y`` [N, P]): ``release.mean`` holds the [m, P] latents, read
    stacked output by output by a readout of ``num_outputs`` P (``I_P kron a(x)``); predictions are [k, P].

    ``clip_to_bounds`` clips every predicted mean to the release's public ``y_bounds`` (per output;
    post-processing, free; recorded in the privacy card); the reported ``noise_std`` is still the std of
    the Gaussian noise before clipping. Its default (None) clips when the release has bounds and this is
    not a classifier (:func:`clipped_by_default`; a classifier's latent values are not bounded by the labels'
    bounds); :meth:`unclipped` predicts the raw DP means, :meth:`clipped` clips.

    Predictions are NumPy, as GPflow's shapes: :meth:`predict_f` and :meth:`predict` [k, P] ([k, 1] for one
    output).
    """

    def __init__(self, release: PrivateRelease, readout: PublicReadout, coordinates: Optional[tf.Tensor] = None,
                 *, releases: Optional[Sequence[PrivateRelease]] = None,
                 clip_to_bounds: Optional[bool] = None) -> None:
        if not isinstance(readout, PublicReadout):
            raise TypeError(f"readout must be a PublicReadout, got {type(readout).__name__}")
        if release.clip_to_bounds:
            raise ValueError("a function's release holds latent values, which must not be clipped: "
                             "clip the function's predictions instead (clip_to_bounds=True or clipped())")
        releases = tuple(releases) if releases is not None else (release,)
        if isinstance(self, PrivateClassifier):  # mark its releases: a classifier's latents are never clipped
            marked = {id(r): dataclasses.replace(r, classifier_latent=True) for r in (*releases, release)}
            release, releases = marked[id(release)], tuple(marked[id(r)] for r in releases)
        self._clip_to_bounds = False
        self.release = release
        self._releases = releases
        self._readout = readout
        P = release.num_outputs  # P outputs: latents [m, P] read stacked (readout I_P kron a, [kP, mP])
        if int(getattr(readout, "num_outputs", 1)) != P:
            raise ValueError(f"the release holds latents of {P} output(s), the readout reads "
                             f"{int(getattr(readout, 'num_outputs', 1))}")
        self._outputs = P
        #: ``R`` (upper triangular, public) with ``release`` of ``R u``; None when ``u`` itself was released
        self.coordinates = None if coordinates is None else tf.constant(coordinates)
        latent = stacked(release.mean)[:, None]  # [M, 1]: the [m, P] latents stacked output by output
        noise = tf.constant(release.noise_factor)  # [M, r]
        if coordinates is not None:  # u~ = R^{-1} v~: public post-processing
            latent = tf.linalg.triangular_solve(coordinates, latent, lower=False)
            noise = tf.linalg.triangular_solve(coordinates, noise, lower=False)
        self._latent = latent
        self._latent_noise = noise
        if clip_to_bounds if clip_to_bounds is not None else _clips_by_default(release):
            self._set_clipping()

    def _set_clipping(self) -> None:
        if isinstance(self, PrivateClassifier):
            raise TypeError(f"a {type(self).__name__}'s latent values are not bounded by its labels' bounds: "
                            "clip_to_bounds is for regression")
        if self.release.y_bounds is None:
            raise ValueError("clip_to_bounds needs the release's public y_bounds, and this release has none")
        self._clip_to_bounds = True

    @property
    def clip_to_bounds(self) -> bool:
        """True when predicted means are clipped to the public ``y_bounds`` (:meth:`clipped`)."""
        return self._clip_to_bounds

    def clipped(self) -> "PrivateFunction":
        """This function with every predicted mean clipped to the release's public ``y_bounds``.

        Post-processing: no privacy cost. ``noise_std`` and ``dp_noise_variance`` still report the
        Gaussian noise before clipping. ``TypeError`` for a classifier, ``ValueError`` without bounds.
        """
        function = copy.copy(self)
        function._set_clipping()
        return function

    def unclipped(self) -> "PrivateFunction":
        """This function predicting the raw DP means (noise included, not clipped; ``clip_to_bounds=False``):
        what ``noise_std`` describes; values may lie outside ``y_bounds``. Post-processing: no privacy cost."""
        function = copy.copy(self)
        function._clip_to_bounds = False
        return function

    @property
    def releases(self) -> Tuple[PrivateRelease, ...]:
        return self._releases

    def recorded_as(self, relation: str) -> "PrivateFunction":
        """This function with each of its releases recording ``relation`` (its measurement's, set by
        :func:`~dpgp_gpflow.measurement.measure`): itself when they do. Metadata only."""
        if all(r.neighbours == relation for r in (self.release, *self._releases)):
            return self
        function = copy.copy(self)
        function.release = dataclasses.replace(self.release, neighbours=relation)
        function._releases = tuple(function.release if r is self.release else
                                   dataclasses.replace(r, neighbours=relation) for r in self._releases)
        return function

    @property
    def epsilon(self) -> float:
        """Total epsilon of the releases (basic composition)."""
        return math.fsum(r.epsilon for r in self._releases)

    @property
    def delta(self) -> float:
        """Total delta of the releases (basic composition)."""
        return math.fsum(r.delta for r in self._releases)

    @property
    def reproducible(self) -> bool:
        """True if any release drew its noise from an explicit seed (not private against its holder)."""
        return any(r.reproducible for r in self._releases)

    @property
    def readout(self) -> PublicReadout:
        """The frozen public pieces that turn the released latents into predictions."""
        return self._readout

    def _inputs(self, Xnew: Any) -> tf.Tensor:
        return tf.constant(as_inputs("Xnew", Xnew, self._readout.input_dim))

    def _terms(self, Xnew: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """``(DP mean [k, 1], public variance [k, 1], DP noise std [k, 1])`` ([k, P] each for P outputs)."""
        A, variance = readout_and_variance(self._readout, Xnew)  # [k, M], [k] (P outputs: [kP, mP], [kP])
        mean = self._readout.offset(Xnew)[:, None] + tf.linalg.matmul(A, self._latent)
        noise_std = row_norms(tf.linalg.matmul(A, self._latent_noise))  # [k]: no underflow far from the data
        P = self._outputs  # stacked output by output: [kP] -> [k, P] ([k, 1] for one output)
        mean, variance, noise_std = (tf.transpose(tf.reshape(t, [P, -1])) for t in (mean, variance, noise_std))
        if self._clip_to_bounds:  # post-processing of the DP mean (per output)
            lo, hi = bound_columns(self.release.y_bounds)  # clipping is refused without bounds
            mean = tf.clip_by_value(mean, tf.constant(lo, mean.dtype), tf.constant(hi, mean.dtype))
        return mean, variance, noise_std

    def dp_noise_variance(self, Xnew: Any) -> np.ndarray:
        """Variance [k, 1] ([k, P]) of the DP noise propagated to the prediction at ``Xnew`` (public), NumPy."""
        return tf.square(self._terms(self._inputs(Xnew))[2]).numpy()

    def predict(self, Xnew: Any) -> PrivatePrediction:
        """DP mean (clipped if ``clip_to_bounds``), public posterior variance and DP noise std at ``Xnew``,
        each NumPy [k, P] ([k, 1] for one output)."""
        mean, var, noise_std = (t.numpy() for t in self._terms(self._inputs(Xnew)))
        return PrivatePrediction(mean=mean, variance=var, noise_std=noise_std)

    def predict_f(self, Xnew: Any) -> Tuple[np.ndarray, np.ndarray]:
        """DP mean [k, 1] ([k, P]; clipped if ``clip_to_bounds``) and variance: the public posterior variance
        plus the DP noise variance; NumPy, as GPflow's ``predict_f`` shapes."""
        mean, var, noise_std = self._terms(self._inputs(Xnew))
        return mean.numpy(), (var + tf.square(noise_std)).numpy()

    # -- publishing -----------------------------------------------------------------------------

    def _serving_outputs(self, Xnew: tf.Tensor) -> Dict[str, tf.Tensor]:
        mean, var, noise_std = self._terms(Xnew)  # [k, P] each, as predict
        return {"mean": mean, "variance": var, "noise_std": noise_std}

    def export_saved_model(self, path: Union[str, "os.PathLike[str]"]) -> Path:
        """Write a TensorFlow SavedModel at ``path`` (a folder) that plain TensorFlow serves without
        dpgp_gpflow or GPflow installed (``docs/release_file.md#savedmodel-export``).

        Signature ``serving_default``: input ``X`` float64 [None, D]; outputs (each [None, P]; [None, 1] for
        one output and for a classifier) ``mean``,
        ``variance`` (public posterior variance) and ``noise_std`` (DP noise std) as :meth:`predict`,
        or for a :class:`PrivateClassifier` ``probability`` (of class +1), ``latent_mean`` and
        ``latent_variance`` (DP noise included) as :meth:`PrivateClassifier.predict_y` / ``predict_f``.
        The released values and public pieces are constants of the graph; the privacy card is written
        beside it, to ``assets.extra/privacy_card.json``. Post-processing: no privacy cost.

        ``NotImplementedError`` when the readout cannot be traced by ``tf.function`` (it creates
        variables on every call).
        """
        path = Path(path)
        outputs = self._serving_outputs
        serve = tf.function(lambda X: outputs(X), autograph=False,  # plain TF ops: nothing to convert
                            input_signature=[tf.TensorSpec([None, int(self._readout.input_dim)], tf.float64, name="X")])
        module = tf.Module()
        module.serve = serve
        try:
            concrete = serve.get_concrete_function()
        except ValueError as exc:
            if "tf.Variable" not in str(exc):
                raise
            raise NotImplementedError(
                f"cannot export {type(self._readout).__qualname__}: its methods create TensorFlow variables on every "
                "call (e.g. a GPflow InducingPoints), so tf.function cannot trace them into a SavedModel") from exc
        tf.saved_model.save(module, str(path), signatures={"serving_default": concrete})
        card = {**self.privacy_card(), **provenance()}
        extra = path / "assets.extra"
        extra.mkdir(exist_ok=True)
        write_card(extra / "privacy_card.json", type(self).__name__, card)
        return path


@check_shapes("mean: [M, 1]", "var: [M, 1]", "return: [M, 1]")
def probit_approximation(mean: tf.Tensor, var: tf.Tensor) -> tf.Tensor:
    """``E[sigmoid(f*)] ~= sigmoid(mean / sqrt(1 + pi var / 8))`` for ``f* ~ N(mean, var)``.

    MacKay's (1992) probit approximation of the logistic-Gaussian integral (GPML eq. 3.25
    discussion; Bishop PRML eq. 4.153): replace the sigmoid by ``Phi(sqrt(pi / 8) f)``, whose
    Gaussian integral is closed form. Error below about 0.02 in probability.
    """
    return tf.sigmoid(mean / tf.sqrt(1.0 + math.pi * var / 8.0))


class PrivateClassifier(PrivateFunction):
    """A released GP classifier (labels in {-1, +1}): :class:`PrivateFunction` on the latent ``f``.

    ``predict_f`` returns the latent mean and the latent variance *including* the DP noise variance;
    ``predict_y`` the probability of class +1 by the probit approximation on them and ``p (1 - p)``.
    """

    def predict_y(self, Xnew: Any) -> Tuple[np.ndarray, np.ndarray]:
        """Probability of class +1 [k, 1] (probit approximation) and its Bernoulli variance ``p (1 - p)``; NumPy."""
        mean, var = self.predict_f(Xnew)
        p = probit_approximation(tf.constant(mean), tf.constant(var)).numpy()
        return p, p * (1.0 - p)

    def predict_class(self, Xnew: Any) -> np.ndarray:
        """Predicted labels in {-1, +1} [k, 1]: the sign of the latent mean (p >= 1/2 gives +1)."""
        mean, _ = self.predict_f(Xnew)
        return np.where(mean >= 0.0, 1.0, -1.0)

    def _serving_outputs(self, Xnew: tf.Tensor) -> Dict[str, tf.Tensor]:
        mean, var, noise_std = self._terms(Xnew)
        latent_var = var + tf.square(noise_std)
        p = probit_approximation(mean, latent_var)
        return {"probability": p, "latent_mean": mean, "latent_variance": latent_var}  # [k, 1] each


# ---------------------------------------------------------------------------------------------
# What their release files hold (docs/release_file.md): composed by dpgp_gpflow.io.writing, read by dpgp_gpflow.io.

register(Released, releases_content)
register(PrivateFunction, function_content)


def _clips_by_default(release: PrivateRelease) -> bool:
    """The one rule for what a model's release returns clipped: regression values with public bounds
    (a classifier's latent values, ``classifier_latent``, are not bounded by its labels' bounds)."""
    return release.y_bounds is not None and not release.classifier_latent


def clipped_by_default(released: PrivateRelease) -> PrivateRelease:
    """``released`` clipped to its public ``y_bounds`` when :func:`_clips_by_default` says so (what
    :func:`dpgp_gpflow.pipeline.release` returns; a :class:`PrivateFunction` applies the same rule when it is
    built). Post-processing: free; :meth:`PrivateRelease.unclipped` gives the raw values back."""
    return released.clipped() if _clips_by_default(released) else released
