"""The leak guard's one option: what a release does with hyperparameters given at construction that are not
GPflow's defaults and were never declared public (``docs/privacy_model.md#leak-guard``).

Nothing can tell such values from values fitted on the private outputs before the model was built (GPflow's
regression tutorial: train a ``gpflow.models.GPR``, reuse its kernel), so by default every release (and every
selection, for the values its grid does not set) refuses them with :class:`~dpgp_gpflow.PrivacyLeakError`,
before anything is reserved. Inside ``with allow_undeclared_hyperparameters():`` they only warn
(:class:`~dpgp_gpflow.HyperparameterWarning`): the caller takes responsibility for their being public,
release by release, without declaring them. The guard's other two signals (the training objective ran, a
value changed since it was recorded public) refuse either way.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator

import numpy as np

__all__ = ["allow_undeclared_hyperparameters"]

#: False inside ``with allow_undeclared_hyperparameters():`` (this thread or task only).
_REFUSE: contextvars.ContextVar[bool] = contextvars.ContextVar("dpgp_gpflow_refuse_undeclared", default=True)


@contextlib.contextmanager
def allow_undeclared_hyperparameters() -> Iterator[None]:
    """Inside this block, releases and selections of models with undeclared hyperparameters given at
    construction warn (:class:`~dpgp_gpflow.HyperparameterWarning`, one line) instead of raising
    :class:`~dpgp_gpflow.PrivacyLeakError`.

    Privacy assumption: the caller vouches that those values were chosen without the private outputs; if
    they were fitted on them the releases are not DP. Prefer declaring them (``hyperparameters_public=True``,
    ``model.declare_hyperparameters_public()``) or selecting them privately (:mod:`dpgp_gpflow.selection`).
    Scoped to this thread or asyncio task (a ``contextvars`` variable): threads started inside do not inherit it.
    """
    token = _REFUSE.set(False)
    try:
        yield
    finally:
        _REFUSE.reset(token)


def undeclared_hyperparameters_refused() -> bool:
    """True (the default) when undeclared values given at construction make releases refuse; False inside
    :func:`allow_undeclared_hyperparameters`."""
    return _REFUSE.get()


def validate_declaration(value: Any) -> bool:
    """``hyperparameters_public`` as a bool: ``TypeError`` for anything but True or False (a string such as
    ``"no"`` is truthy and would declare everything public)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"hyperparameters_public must be True or False, got {value!r}")
    return bool(value)
