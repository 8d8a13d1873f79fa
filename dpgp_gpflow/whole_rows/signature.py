"""Tensors checked against a compiled function's input signature before its concrete function is called directly.

A ``tf.function``'s concrete function called with tensors skips the signature's checks (only a wrong dtype fails,
inside TensorFlow): a tensor of another rank or fixed dimension runs the graph as if it were declared, which a call
through the ``tf.function`` refuses. :class:`InputSignature` is that refusal in Python, from the tensors' dtypes and
static shapes only (no TensorFlow operation: a few microseconds a call), for
:class:`~.posterior.OnReuse` and :meth:`~.features.FeatureMap.apply`.

Privacy assumption: none needed; it reads the tensors' dtypes and shapes, never their values.
"""

from __future__ import annotations

from typing import Any, NoReturn, Sequence, Tuple

import tensorflow as tf

__all__: list[str] = []  # internal: the package imports these names by name


class InputSignature:
    """The specs ``specs`` of a function named ``name``: :meth:`check` refuses tensors that a ``tf.function`` of
    ``input_signature=specs`` would refuse (``TypeError`` for a wrong number of tensors or a wrong dtype,
    ``ValueError`` for a wrong rank or a fixed dimension differing; ``None`` dimensions take any size)."""

    __slots__ = ("name", "specs", "_dtypes", "_ranks", "_fixed")

    def __init__(self, specs: Sequence[tf.TensorSpec], name: str) -> None:
        self.name = str(name)
        self.specs = tuple(specs)
        self._dtypes = tuple(spec.dtype for spec in self.specs)
        self._ranks = tuple(spec.shape.rank for spec in self.specs)
        #: (argument, axis, size) of every fixed dimension (the specs here have few or none)
        self._fixed: Tuple[Tuple[int, int, int], ...] = tuple(
            (i, axis, int(size)) for i, spec in enumerate(self.specs) if spec.shape.rank is not None
            for axis, size in enumerate(spec.shape.as_list()) if size is not None)

    def check(self, args: Sequence[Any]) -> None:
        """Raise unless ``args`` (tensors) match the specs: their number, each one's dtype, rank and fixed
        dimensions (a tensor of unknown rank, in a graph, passes on its rank)."""
        if len(args) != len(self._dtypes):
            raise TypeError(f"{self.name} takes {len(self._dtypes)} tensors, got {len(args)}")
        for arg, dtype, rank in zip(args, self._dtypes, self._ranks):
            got = arg.dtype  # interned: ``is`` decides in the common case, ``!=`` (slower) only otherwise
            if (got is not dtype and got != dtype) or (arg.ndim != rank and arg.ndim is not None and rank is not None):
                self._refuse(args)
        for i, axis, size in self._fixed:
            got_size = args[i].shape[axis]
            if got_size is not None and got_size != size:
                self._refuse(args)

    def _refuse(self, args: Sequence[Any]) -> NoReturn:
        """Raise for the first of ``args`` that does not match its spec (the checks of :meth:`check`, again)."""
        for index, (arg, spec) in enumerate(zip(args, self.specs)):
            if arg.dtype != spec.dtype:
                error: type = TypeError
            elif not spec.shape.is_compatible_with(arg.shape):
                error = ValueError
            else:
                continue
            raise error(f"{self.name}: tensor {index} has shape {arg.shape} and dtype {arg.dtype.name}, the "
                        f"signature declares shape {spec.shape} and dtype {spec.dtype.name} (None: any size)")
        raise ValueError(f"{self.name}: tensors {[a.shape for a in args]} do not match the signature {self.specs}")
