"""A model's private inputs (whole rows private, docs/whole_rows.md): the one rule applied when a model is
built with ``private_inputs=True`` and what the model then holds (:class:`PrivateInputsMixin`).

Privacy assumption: the box ``x_bounds``, the kernel's bound on ``k(x, x)`` and the inducing inputs are
public, chosen without the rows; the inputs themselves are private: only the count of rows clipped to the box
is reported (a warning for the data owner), never their values.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from ..models.base import inducing_inputs
from ..validation import as_inputs, is_dask_array
from .design import check_public_inducing_inputs, clip_private_inputs, validate_box, warn_clipped_inputs
from .features import kernel_bound

__all__: list = []  # internal: the models take private_inputs=True


def private_input_data(data: Any, kernel: Any, inducing_variable: Any, x_bounds: Any,
                       clip_inputs: Any) -> Tuple[Tuple[Any, Any], np.ndarray]:
    """``((X clipped to the box, Y), box)`` for a model whose inputs are private (Dask inputs: as given, clipped
    chunk by chunk where they are read). Refuses, in one line each, before the model is built: no box, a box of
    another width, a kernel without a public bound on ``k(x, x)``, a number of inducing inputs (k-means on the
    private inputs) or inducing inputs computed from data, inputs outside the box with ``clip_inputs=False``;
    warns with the count of rows clipped (never values)."""
    if not isinstance(clip_inputs, bool):
        raise TypeError(f"clip_inputs must be True or False, got {clip_inputs!r}")
    try:
        X, Y = data
    except (TypeError, ValueError) as exc:
        raise TypeError("data must be a pair (X, Y)") from exc
    if isinstance(inducing_variable, (int, np.integer)) and not isinstance(inducing_variable, bool):
        raise ValueError("with private inputs the inducing inputs must be public: give them as an array built from "
                         "the box alone (dpgp_gpflow.whole_rows.inducing_grid(x_bounds, num) or inducing_design), "
                         "not a number to fit by k-means on the private inputs")
    if not is_dask_array(X):
        X = as_inputs("X", X)
    box = validate_box(x_bounds, int(X.shape[1]) if len(X.shape) == 2 else None)
    kernel_bound(kernel, box)  # refuses a kernel without a public bound on k(x, x) over the box
    check_public_inducing_inputs(inducing_inputs(inducing_variable, box.shape[0]))
    if not is_dask_array(X):
        X, outside = clip_private_inputs(X, box, clip_inputs)
        warn_clipped_inputs(outside, int(X.shape[0]), box, stacklevel=3)
    return (X, Y), box


def refuse_private_input_options(x_bounds: Any, clip_inputs: Any) -> None:
    """``ValueError`` (one line) for the options of private inputs given to a model whose inputs are public
    (``private_inputs`` False): a box ``x_bounds``, or ``clip_inputs`` other than its default True (nothing would
    be clipped or refused, so a silent no-op)."""
    for name, given in (("x_bounds", x_bounds is not None), ("clip_inputs", clip_inputs is not True)):
        if given:
            raise ValueError(f"{name} applies to private inputs (their public box, and clipping to it or refusing "
                             "rows outside it): give it with private_inputs=True")


def refuse_full_gp(private_inputs: Any, releases: str, sparse: str) -> None:
    """``NotImplementedError`` (one line) for ``private_inputs`` given to a full-GP model: it releases (``releases``,
    e.g. "the full GP releases") latent values at the training inputs, functions of private inputs; ``sparse`` names
    the sparse model(s) to use instead."""
    if private_inputs is not False:
        raise NotImplementedError(f"{releases} latent values at the training inputs, which would publish functions of "
                                  f"private inputs: with private inputs use the sparse {sparse}(..., "
                                  "private_inputs=True, x_bounds=...)")


class PrivateInputsMixin:
    """What a model built with ``private_inputs=True`` holds: its public box and whether inputs outside it
    were clipped or refused (fixed at construction, outside GPflow's module tracking)."""

    def _hold_private_inputs(self, box: Optional[np.ndarray], clip_inputs: bool) -> None:
        object.__setattr__(self, "_dp_x_bounds", box)
        object.__setattr__(self, "_dp_clip_inputs", bool(clip_inputs))

    @property
    def private_inputs(self) -> bool:
        """True when the inputs are private too: releases protect whole rows (fixed at construction)."""
        return self.__dict__.get("_dp_x_bounds") is not None

    @property
    def x_bounds(self) -> Optional[np.ndarray]:
        """The public box of the private inputs [D, 2] (a copy), or None when the inputs are public."""
        box = self.__dict__.get("_dp_x_bounds")
        return None if box is None else box.copy()

    @property
    def clip_inputs(self) -> bool:
        """Private inputs outside the box are clipped to it (True) or refused."""
        return bool(self.__dict__.get("_dp_clip_inputs", True))
