"""What floating-point rounding costs a release: every sensitivity is inflated for it, and a noise
factor too ill-conditioned for the inflation to cover is refused (docs/exact_sampling.md).

One place for the safety factors and the refusal, used by the cloaking mechanism in memory, compiled
and streamed, and by the standard mechanism. Privacy assumption: public quantities only.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ..calibration import SENSITIVITY_SAFETY  # defined there: TensorFlow-free (release files' checks read it)

__all__: list[str] = []  # internal: the package imports these names by name

#: Rounding in the released k-vector can leak along weakly-noised directions by about
#: eps_machine * cond(F) (in Mahalanobis units): the sensitivity is inflated by this much times
#: cond(F) as well, and releases with cond(F) above MAX_NOISE_CONDITION are refused.
ROUNDING_SAFETY = 100.0 * float(np.finfo(np.float64).eps)
MAX_NOISE_CONDITION = 1e11

_CONDITION_MESSAGE = ("the noise covariance's condition number exceeds {:.0e}: float64 rounding could then "
                      "leak along its weakest directions, so this release cannot be guaranteed; use a larger rtol")


def condition_number(factor):
    """The 2-norm condition number ``sigma_max / sigma_min`` of a square noise factor (a noise covariance's
    factor, or the standard mechanism's prior Cholesky factor): the one computation behind every
    :func:`safe_sensitivity` and :func:`check_noise_condition`. Graph-safe; ``inf`` for a singular factor."""
    sv = tf.linalg.svd(tf.convert_to_tensor(factor, tf.float64), compute_uv=False)
    return sv[0] / sv[-1]


def safe_sensitivity(data_sensitivity, norm2, condition):
    """The Mahalanobis sensitivity ``d sqrt(max_i ||F^{-1} v_i||^2)`` of a noise factor with condition
    number ``condition``, inflated for rounding (:data:`SENSITIVITY_SAFETY`, :data:`ROUNDING_SAFETY`):
    the one formula of every cloaking release, in memory, compiled or streamed. Graph-safe."""
    return data_sensitivity * tf.sqrt(tf.cast(norm2, tf.float64)) * (SENSITIVITY_SAFETY + ROUNDING_SAFETY * condition)


def check_noise_condition(condition: float) -> None:
    """Refuses (``FloatingPointError``) a noise factor whose condition number exceeds
    :data:`MAX_NOISE_CONDITION`: its rounding could leak along the weakest directions."""
    if not condition <= MAX_NOISE_CONDITION:
        raise FloatingPointError(f"condition number {condition:.3g}: " + _CONDITION_MESSAGE.format(MAX_NOISE_CONDITION))
