"""Full GP regression with a DP release: :class:`DPGPR` and the GPR cloaking matrix."""

from __future__ import annotations

from typing import Any, Optional, Tuple

import gpflow
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes

from .. import linalg
from ..contract import PrivateModel, ReleaseTerms, output_terms
from ..contract import cloaking_matrix as contract_cloaking_matrix
from ..pipeline import StandardTerms
from ..whole_rows.inputs import refuse_full_gp
from .base import PrivateModelMixin, prepare_private_data, public_constant_mean

__all__ = ["DPGPR", "cloaking_matrix", "gpr_cloaking_matrix"]


@check_shapes("X: [N, D]", "Xnew: [M, D]", "return: [M, N]")
def gpr_cloaking_matrix(kernel: gpflow.kernels.Kernel, X: tf.Tensor, noise_variance: Any, Xnew: tf.Tensor) -> tf.Tensor:
    """``C = K_*f (K_ff + sigma^2 I)^{-1}`` by Cholesky solves (no inverse is formed).

    Depends only on public quantities: inputs, kernel hyperparameters and noise variance.
    """
    return gpr_cloaking_matrix_and_variance(kernel, X, noise_variance, Xnew)[0]


@check_shapes("X: [N, D]", "Xnew: [M, D]", "return[0]: [M, N]", "return[1]: [M, 1]")
def gpr_cloaking_matrix_and_variance(kernel: gpflow.kernels.Kernel, X: tf.Tensor, noise_variance: Any,
                                     Xnew: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """:func:`gpr_cloaking_matrix` and the posterior variance ``diag(K_** - K_*f K^{-1} K_f*)`` (as
    ``predict_f`` gives it) from one Cholesky factor and two triangular solves.

    Public: neither depends on the outputs.
    """
    K = kernel(X) + noise_variance * tf.eye(tf.shape(X)[0], dtype=X.dtype)  # [N, N]
    L = tf.linalg.cholesky(K)
    A = linalg.triangular_solve(L, kernel(X, Xnew), lower=True)  # [N, M]: L^{-1} K_f*
    C = tf.transpose(linalg.triangular_solve(L, A, lower=True, adjoint=True))  # [M, N]
    variance = kernel(Xnew, full_cov=False) - tf.reduce_sum(A * A, axis=0)  # [M]
    return C, variance[:, None]


@check_shapes("X: [N, D]")
def gpr_rkhs_sensitivity(kernel: gpflow.kernels.Kernel, X: tf.Tensor, noise_variance: Any) -> tf.Tensor:
    """``max_j sqrt([K^{-1} K_ff K^{-1}]_jj)`` with ``K = K_ff + sigma^2 I`` (docs/mechanisms.md#standard-mechanism).

    The exact RKHS norm of the change in the posterior mean when output j moves by 1: multiply by
    ``d`` for the sensitivity of the standard (Hall et al.) mechanism.
    """
    Kff = kernel(X)  # [N, N]
    L = tf.linalg.cholesky(Kff + noise_variance * tf.eye(tf.shape(X)[0], dtype=X.dtype))
    G = linalg.cholesky_solve(L, Kff)  # K^{-1} Kff
    H = linalg.cholesky_solve(L, tf.transpose(G))  # K^{-1} Kff K^{-1}
    return tf.sqrt(tf.reduce_max(tf.linalg.diag_part(H)))


def cloaking_matrix(model: Any, Xnew: Any) -> tf.Tensor:
    """The k x n cloaking matrix of any :class:`~dpgp_gpflow.contract.PrivateModel` at ``Xnew``
    (:func:`dpgp_gpflow.contract.cloaking_matrix`), or of a plain ``gpflow.models.GPR``, whose
    hyperparameters must then be public (nothing can tell whether they were trained). Public.
    """
    if isinstance(model, gpflow.models.GPR) and not isinstance(model, PrivateModel):
        X, _ = model.data
        Xnew = tf.convert_to_tensor(Xnew, dtype=X.dtype)
        return gpr_cloaking_matrix(model.kernel, X, model.likelihood.variance, Xnew)
    return contract_cloaking_matrix(model, Xnew)


class DPGPR(PrivateModelMixin, gpflow.models.GPR):
    """GPflow's ``GPR`` with public output bounds and differentially private releases.

    ``DPGPR((X, Y), kernel, y_bounds=(lo, hi), noise_variance=...)``. ``Y`` is clipped to the public
    bounds (a :class:`~dpgp_gpflow.ClippingWarning` counts the clipped values) and centred with a
    public prior mean (default: the midpoint of the bounds, not trainable). One output may move by
    ``data_sensitivity`` (default ``hi - lo``). Inputs of any dimension; float32 or integer data are
    converted to float64 (exactly).

    Privacy assumption: ``X``, the kernel hyperparameters, the noise variance and the mean function
    are public. Training them on ``Y`` (evaluating the marginal likelihood) makes :meth:`release`
    refuse unless they are declared public; values given here that are not GPflow's defaults make it
    refuse too (:class:`~dpgp_gpflow.PrivacyLeakError`: they may have been fitted on ``Y`` before)
    unless ``hyperparameters_public=True`` declares them chosen without ``Y``. ``predict_f`` is
    GPflow's non-private prediction: publish only what :meth:`release` returns.

    ``groups`` (public integers [N], default None): rows with the same value belong to one person, and
    releases protect all of a person's outputs at once, each moving by up to ``data_sensitivity``
    (docs/guides/groups.md); None: one row per person.

    Several outputs (docs/guides/multi_output.md): ``Y`` [N, P] with one kernel and likelihood for all,
    ``y_bounds`` a pair for every output or [P, 2] (clipped and centred per output: the default prior
    mean is each output's midpoint), ``data_sensitivity`` one number or P. A row's P outputs belong to
    one person (with ``groups``: all outputs of all of a person's rows), output p moving by up to its
    ``d_p``; releases are of all outputs at once (``release.mean`` [k, P]), ``data_sensitivity`` is the
    largest ``d_p`` and :attr:`output_sensitivities` holds them all.

    ``private_inputs=True`` (inputs private too) is refused: use ``DPSGPR(..., private_inputs=True, x_bounds=...)``
    (docs/guides/whole_rows.md).
    """

    def __init__(
        self,
        data: Any,
        kernel: gpflow.kernels.Kernel,
        *,
        y_bounds: Any,
        noise_variance: Optional[float] = None,
        mean_function: Optional[gpflow.functions.MeanFunction] = None,
        data_sensitivity: Optional[float] = None,
        hyperparameters_public: bool = False,
        groups: Any = None,
        private_inputs: bool = False,
    ) -> None:
        refuse_full_gp(private_inputs, "the full GP releases", "DPSGPR")
        X, Y, bounds, d = prepare_private_data(data, y_bounds, data_sensitivity, noise_variance, several_outputs=True,
                                               mean_function=mean_function)
        self._hold_outputs(Y.shape[1])
        self._hold_groups(groups, X.shape[0])
        model_made = []  # parameters made here from public information: not warned about
        if mean_function is None:
            mean_function = public_constant_mean(bounds)
            model_made.append(".mean_function")
        super().__init__((X, Y), kernel, mean_function=mean_function, noise_variance=noise_variance)
        self.y_bounds = bounds
        self.data_sensitivity = d
        self._guard_construction(hyperparameters_public, model_made)  # the leak guard: values as given

    @inherit_check_shapes
    def log_marginal_likelihood(self) -> tf.Tensor:
        self._mark_private_objective()
        return super().log_marginal_likelihood()

    @check_shapes("Xnew: [M, D]")
    def cloaking_matrix(self, Xnew: Any) -> tf.Tensor:
        """``C`` [M, N] with ``predict_f(Xnew) mean = C (Y - m(X)) + m(Xnew)``; public (no outputs used).
        With P > 1 outputs the stacked map ``I_P kron C`` [M P, N P] a release uses, as
        :func:`dpgp_gpflow.cloaking_matrix` gives it (:func:`~dpgp_gpflow.contract.output_terms`)."""
        if self.num_outputs > 1:
            return super().cloaking_matrix(Xnew)
        X, _ = self.data
        return gpr_cloaking_matrix(self.kernel, X, self.likelihood.variance, tf.convert_to_tensor(Xnew, dtype=X.dtype))

    def release_terms(self, Xnew: tf.Tensor) -> ReleaseTerms:
        """``C`` and the posterior variance at ``Xnew`` from one Cholesky factor; offset ``m(Xnew)``. With
        P > 1 outputs (one ``C`` for all) the stacked terms (:func:`~dpgp_gpflow.contract.output_terms`)."""
        X, _ = self.data
        C, variance = gpr_cloaking_matrix_and_variance(self.kernel, X, self.likelihood.variance, Xnew)
        return output_terms(C, self.mean_function(Xnew), variance[:, 0], self.num_outputs)

    def split_terms(self, train: Any, test: Any) -> ReleaseTerms:
        """The GPR cloaking matrix trained on ``train`` at the inputs ``test`` (centred: offset 0)."""
        Xtr, Xte = self._split_inputs(train, test)
        C = gpr_cloaking_matrix(self.kernel, Xtr, self.likelihood.variance, Xte)
        return ReleaseTerms(C, tf.zeros([int(C.shape[0])], dtype=C.dtype))

    def standard_terms(self, Xnew: tf.Tensor) -> StandardTerms:
        """The prior covariance at ``Xnew`` and the exact unit RKHS sensitivity (Hall et al.)."""
        X, _ = self.data
        return StandardTerms(self.kernel(Xnew), gpr_rkhs_sensitivity(self.kernel, X, self.likelihood.variance))
