"""Release files: the file format (:mod:`.format`: one self-describing JSON document per released
object, checked for integrity), what each kind of object writes (:mod:`.writing`, which
:meth:`dpgp_gpflow.released.Released.save` runs), the privacy card
(:mod:`.card`: read and checked for meaning without TensorFlow, :func:`~dpgp_gpflow.io.card.read_card`),
the GPflow pieces of a readout (:mod:`.gpflow_specs`: kernels and mean functions) and loading
(:mod:`.loading`: :func:`~dpgp_gpflow.io.loading.load` rebuilds the released object). docs/release_file.md
describes the layout. Loading never executes anything from a file.
"""

import importlib
from typing import TYPE_CHECKING, Any

from .format import (
    ReleaseFileError,
    ReleaseFileIntegrityError,
    ReleaseFileKindError,
    ReleaseFileVersionError,
    inputs_hash,
)

if TYPE_CHECKING:  # pragma: no cover
    from .card import read_card
    from .loading import load

__all__ = [
    "ReleaseFileError", "ReleaseFileIntegrityError", "ReleaseFileKindError", "ReleaseFileVersionError",
    "load", "read_card",
]


def __getattr__(name: str) -> Any:
    """``load`` and ``read_card`` on first use: :mod:`.loading` imports the models (and TensorFlow), which import
    the released objects, which write through :mod:`.format` (so no import cycle); :mod:`.card` imports SciPy
    (the calibration it recomputes), which the command line's tables (:mod:`.tables`) and ``dpgp budget`` do not
    need."""
    if name in ("load", "read_card"):
        module = ".loading" if name == "load" else ".card"
        return getattr(importlib.import_module(module, __name__), name)  # as dpgp_gpflow's own lazy names
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
