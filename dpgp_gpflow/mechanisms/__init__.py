"""The DP mechanisms of a linear release, one module each (as diffprivlib keeps one file per mechanism):

* :mod:`.request`: the one validation of a release's privacy parameters (:class:`ReleaseRequest`) and
  its budget event;
* :mod:`.cloaking`: the cloaking mechanism (optimised noise, exact draw, the one draw-and-spend);
* :mod:`.standard`: the standard mechanism of Hall et al. (2013);

(the mechanisms' entry points for a validated request, :func:`.cloaking.cloak` and
:func:`.standard.standard`, are imported from their modules by :mod:`dpgp_gpflow.pipeline`; the draw-and-spend
step of every exact cloaking release, :func:`.cloaking.publish_cloaking` (and its draw,
:func:`.cloaking.draw_and_spend`), commits into a reservation its caller holds, so it is internal: the package's
releases reach it inside :func:`~dpgp_gpflow.measurement.measure`, and it refuses to draw anywhere else);
* :mod:`.rounding`: what floating-point rounding costs every release (safety factors, refusals).

The noise a cloaking release adds is chosen in :mod:`dpgp_gpflow.noise_planning` (public computations);
models reach these through :mod:`dpgp_gpflow.pipeline`.
"""

from .cloaking import (
    NOISE_SOLVERS,
    NoisePlan,
    check_whitened_shift,
    cloak,
    cloaking_release,
    noise_in_space,
    publish_cloaking,
    shift_bound_of_norms,
    whitened_shift,
    whitening_terms,
)
from .request import ReleaseRequest, gaussian_event, release_request, validate_public_bounds
from .rounding import check_noise_condition, condition_number, safe_sensitivity
from .standard import standard_release

__all__ = [
    "NoisePlan", "ReleaseRequest", "cloaking_release", "release_request", "standard_release",
]
