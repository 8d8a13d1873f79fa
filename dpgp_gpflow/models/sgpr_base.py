"""What the sparse regression models share: :class:`DPSGPRBase` (as GPflow's ``SGPRBase`` is for its
``SGPR`` and ``GPRFITC``) and :func:`kmeans_inducing_inputs`; their factors and frozen readout
(:class:`~dpgp_gpflow.readouts.SparseTerms`, :class:`~dpgp_gpflow.readouts.SparseReadout`) are in
:mod:`dpgp_gpflow.readouts`.

A sparse model's predictive mean is ``m(x) + a(x) B (y - m(X))``: the outputs reach every prediction
through the m latent values ``B (y - m(X))``, so one private release of them makes predictions at
*any* inputs private by post-processing ("release once, query anywhere";
``docs/mechanisms.md#sparse-regression``). The models differ only in their factors ``L``, ``L_B``,
``B`` (:meth:`DPSGPRBase.sparse_terms`), their readout ``a(x)`` (:attr:`DPSGPRBase.readout_type`) and
the same maths by row chunks (:attr:`DPSGPRBase.chunk_terms_type`); the constructor, the public
bounds, the contract methods and the streamed release's terms are written here once.

Several outputs per row (``Y`` [N, P], one ``B`` for all) release the stacked latents ``(I_P kron B)
vec(Y_c)`` (:func:`~dpgp_gpflow.contract.output_terms`); the readout reads them stacked alike.

Privacy assumption: ``X``, the inducing inputs ``Z``, the kernel hyperparameters and the noise
variance are public; the outputs are clipped to public bounds at construction and at every use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Tuple, Type

import gpflow
import numpy as np
import tensorflow as tf
from sklearn.cluster import KMeans

from ..contract import ReleaseTerms
from ..readouts import SparseReadout, SparseTerms
from ..streaming.terms import ChunkTerms
from ..validation import as_inputs, is_dask_array
from ..whole_rows.design import mark_data_derived
from .base import DaskRowsMixin, FactoredModelMixin, centred_latent_terms, prepare_sparse_data, public_constant_mean

__all__ = ["DPSGPRBase", "kmeans_inducing_inputs"]


def kmeans_inducing_inputs(X: Any, num_inducing: int, *, seed: int = 0) -> np.ndarray:
    """Inducing inputs by k-means (scikit-learn, seeded) on the public inputs only.

    Privacy assumption: ``X`` is public; the outputs are never used (using them would leak). A model whose
    inputs are private (``DPSGPR(..., private_inputs=True)``) refuses these centres: they are remembered as
    computed from data (:func:`~dpgp_gpflow.whole_rows.design.mark_data_derived`), since every prediction would
    publish them (docs/guides/whole_rows.md#inducing-inputs).
    """
    X = as_inputs("X", X)
    if not (isinstance(num_inducing, (int, np.integer)) and 1 <= num_inducing <= X.shape[0]):
        raise ValueError(f"num_inducing must be an integer in [1, {X.shape[0]}], got {num_inducing!r}")
    km = KMeans(n_clusters=int(num_inducing), random_state=seed, n_init=10).fit(X)
    centres = np.asarray(km.cluster_centers_, dtype=np.float64)
    mark_data_derived(centres)
    return centres


class DPSGPRBase(DaskRowsMixin, FactoredModelMixin):
    """A GPflow sparse regression model (``SGPR``, ``GPRFITC``) with public output bounds and DP releases.

    ``Model((X, Y), kernel, inducing_variable, noise_variance=..., y_bounds=(lo, hi))``. The inducing
    inputs must be public (e.g. :func:`kmeans_inducing_inputs` on ``X``); they are made non-trainable.
    ``X, Y`` may be Dask arrays (:class:`~dpgp_gpflow.models.base.DaskRowsMixin`).
    ``release(Xnew, ...)`` is as for :class:`~dpgp_gpflow.models.DPGPR` with the optimiser working in m
    dimensions; :meth:`release_function` releases the m latent values once so that predictions
    anywhere are free; :meth:`chunk_terms` gives the same maths by row chunks
    (:func:`dpgp_gpflow.streaming.release_function`).

    A subclass (listing this class before the GPflow model) gives :meth:`sparse_terms`,
    :attr:`readout_type` and :attr:`chunk_terms_type`, and makes every objective that reads the
    outputs call ``_mark_private_objective()`` (the leak guard).

    Privacy assumption: ``X``, ``Z``, kernel hyperparameters and noise variance are public.
    ``hyperparameters_public=True`` declares the values given here chosen without ``Y``; otherwise
    those that are not GPflow's defaults make releases refuse (:class:`~dpgp_gpflow.PrivacyLeakError`).
    ``groups`` (public integers [N], default None): rows with the same value belong to one person, whose
    outputs releases protect together (docs/guides/groups.md); with Dask rows an in-memory array beside them
    (the streamed release cuts its chunks between persons, whose rows must be consecutive).

    Several outputs (docs/guides/multi_output.md#sparse-models), as for :class:`~dpgp_gpflow.models.DPGPR`:
    ``Y`` [N, P] with one kernel and noise variance for all, ``y_bounds`` a pair or [P, 2] (clipped and
    centred per output), ``data_sensitivity`` one number or P; a row's P outputs (with ``groups``: a
    person's) are protected together. Each output's latents are ``B y_p`` with the one ``B``: the latent
    map is ``I_P kron B`` and the readout ``I_P kron a(x)`` (stacked output by output), so ``release``
    gives [k, P] means and ``release_function`` the [m, P] latents, whose function predicts [k, P].
    """

    #: the frozen public readout of the latent values (:meth:`public_readout`)
    readout_type: Type[SparseReadout]
    #: the model's public maths on a chunk of rows (:meth:`chunk_terms`)
    chunk_terms_type: Type[ChunkTerms]

    if TYPE_CHECKING:  # provided by the GPflow model this base is combined with
        kernel: gpflow.kernels.Kernel
        likelihood: Any
        inducing_variable: Any

    def __init__(
        self,
        data: Any,
        kernel: gpflow.kernels.Kernel,
        inducing_variable: Any,
        noise_variance: Optional[float] = None,
        y_bounds: Any = None,
        *,
        mean_function: Optional[gpflow.functions.MeanFunction] = None,
        data_sensitivity: Optional[float] = None,
        hyperparameters_public: bool = False,
        groups: Any = None,
    ) -> None:
        if y_bounds is None:
            raise TypeError("y_bounds=(lo, hi), public bounds on the outputs, is required")
        data, Z, bounds, d, dask_rows = prepare_sparse_data(data, inducing_variable, y_bounds, data_sensitivity,
                                                            noise_variance, mean_function)
        if dask_rows is not None and is_dask_array(groups):
            raise TypeError("with Dask rows, give groups= as an in-memory array of the N public person ids "
                            "(e.g. groups.compute()): the streamed release cuts its chunks between persons from it")
        self._hold_outputs(int(data[1].shape[1]))
        self._hold_groups(groups, int(data[0].shape[0]) if dask_rows is None else int(dask_rows[0].shape[0]))
        model_made = [".inducing_variable"]  # public by assumption (from X only): not warned about
        if mean_function is None:
            mean_function = public_constant_mean(bounds)
            model_made.append(".mean_function")
        # the GPflow model's constructor, next in the method resolution order
        super().__init__(data, kernel, Z, mean_function=mean_function,  # type: ignore[call-arg]
                         noise_variance=noise_variance)
        self._hold_dask_rows(dask_rows)
        gpflow.set_trainable(self.inducing_variable, False)  # public; never fitted on the outputs
        self.y_bounds = bounds
        self.data_sensitivity = d
        self._guard_construction(hyperparameters_public, model_made)  # the leak guard: values as given

    # -- the model's own maths ------------------------------------------------------------------
    def sparse_terms(self, X: tf.Tensor) -> SparseTerms:
        """The factors ``L``, ``L_B`` and the latent map ``B`` (m x n) at the training inputs ``X`` (public)."""
        raise NotImplementedError

    # -- the contract ---------------------------------------------------------------------------
    def _terms(self) -> SparseTerms:
        X, _ = self.data
        return self.sparse_terms(X)

    def latent_terms_and_readout(self) -> Tuple[ReleaseTerms, SparseReadout]:
        """:meth:`latent_terms` and :meth:`public_readout` from one computation of the factors."""
        terms = self._terms()
        return self._latent(terms), self._readout(terms)

    def latent_terms(self) -> ReleaseTerms:
        """``B`` (m x n): the latent values ``B y_c`` of the centred outputs; offset 0 (public). P > 1
        outputs: ``I_P kron B`` (mP x nP), the latents stacked output by output
        (:func:`~dpgp_gpflow.contract.output_terms`)."""
        return self._latent(self._terms())

    def public_readout(self) -> SparseReadout:
        """A frozen :attr:`readout_type` of the current (public) kernel, mean, ``Z`` and factors (and the
        number of outputs it reads)."""
        return self._readout(self._terms())

    def _latent(self, terms: SparseTerms) -> ReleaseTerms:
        return centred_latent_terms(terms.B, self.num_outputs)

    def _readout(self, terms: SparseTerms) -> SparseReadout:
        return self.readout_type(self.kernel, self.mean_function, self.inducing_variable.Z, terms, self.num_outputs)

    def split_terms(self, train: Any, test: Any) -> ReleaseTerms:
        """``(a(X_test), B(X_train))`` with this model's inducing inputs and hyperparameters (centred: offset 0);
        one output's map, which the P outputs share (as for ``DPGPR``)."""
        Xtr, Xte = self._split_inputs(train, test)
        Z = self.inducing_variable.Z
        terms = self.sparse_terms(Xtr)
        A = self.readout_type.readout_at(self.kernel, Z, terms.L, terms.LB, Xte)
        return ReleaseTerms((A, terms.B), tf.zeros([int(A.shape[0])], dtype=A.dtype))

    def chunk_terms(self) -> ChunkTerms:
        """This model's public maths on a chunk of rows, for :func:`dpgp_gpflow.streaming.release_function`
        (:attr:`chunk_terms_type` of the kernel, mean function, ``Z``, noise variance and bounds).

        ``NotImplementedError`` unless the likelihood has one noise variance for all points.
        """
        variance = np.asarray(self.likelihood.variance.numpy(), dtype=np.float64)
        if variance.size != 1:
            raise NotImplementedError("streaming releases need one noise variance for all points")
        return self.chunk_terms_type(self.kernel, self.mean_function, self.inducing_variable.Z.numpy(), float(variance),
                                     self.y_bounds, gpflow.config.default_jitter(), self.num_outputs)
