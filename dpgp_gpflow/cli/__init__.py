"""The ``dpgp`` command line: private GP releases from CSV or Parquet files, for data owners.

``dpgp release``, ``dpgp predict``, ``dpgp select``, ``dpgp show``, ``dpgp budget init|show`` and
``dpgp demo`` (``dpgp --help``; ``dpgp COMMAND --help``). Every input is checked before the ledger
is touched or any noise is drawn: bad input prints one line ``dpgp: error: ...`` and exits with
code 2, with nothing drawn and nothing spent; the package's warnings print as one line
``dpgp: warning: ...``. The standard library's ``argparse`` parses the options, so that
``--x COL [COL ...]`` takes several columns as written.

Tables (:mod:`dpgp_gpflow.io.tables`: :func:`~dpgp_gpflow.io.tables.read_table`,
:func:`~dpgp_gpflow.io.tables.columns`): CSV files with their separator (``--sep``), decimal mark
(``--decimal``) and thousands separator (``--thousands``) given or guessed, or Parquet files; every
selected cell must be a finite number (no missing values, booleans, text or numbers in another
format), and a CSV row must have as many fields as the header, or the command stops with one line
naming the column and the row.

Privacy model (``docs/privacy_model.md``): the ``--x`` columns are public, the ``--y`` column is
private and clipped to ``--bounds`` (several ``--y`` columns: one person's outputs per row, released
together, each clipped to its own bounds); hyperparameters given on the command line are public (chosen
without the outputs), or chosen privately by ``dpgp select`` (from the default grid, unless
``--grid-lengthscale`` or both ``--variance`` and ``--noise`` replace part of it). ``dpgp release`` without
``--lengthscale``, ``--variance`` and ``--noise`` chooses them privately from the public default grid
(:func:`~dpgp_gpflow.selection.default_grid`), spending ``--selection-share`` (default 0.2) of the
epsilon given; the release gets the rest, so the total charged is the epsilon given (basic
composition). Released means are clipped to ``--bounds`` (post-processing, free; ``--no-clip``
turns it off); the privacy card records both.

With ``--private-inputs --x-bounds LO HI ...`` (:mod:`.whole_rows`) the ``--x`` columns are private
too: whole rows are released through ``DPSGPR(..., private_inputs=True)`` (docs/guides/whole_rows.md), inputs
clipped to the public box, inducing inputs built from the box alone (never k-means), lengthscales given or chosen
inside the one release, variances given or fitted on it; one ledger event.

With ``--classes K`` (:mod:`.classify`) the ``--y`` column holds labels ``0 .. K-1`` and ``dpgp release`` releases
a Laplace GP classifier (full GP, ``--sparse M``, or whole rows with ``--private-inputs``; public ``--lengthscale``
and ``--variance``), labels checked before the ledger is opened, one event charged once its file is written;
``dpgp predict`` writes class probabilities (docs/getting_started.md#classifiers).

Start-up (issue 34): a command imports TensorFlow only once every check that needs no model has passed
(arguments, files, columns, the output, the ledger's existence), with its start-up log silenced
(:func:`~dpgp_gpflow.__main__.import_tensorflow_quietly`); ``dpgp budget init|show``, ``--help`` and every
such refusal never import it (``tests/test_cli_startup.py``; times in ``benchmarks/cli_startup.py``).
``dpgp show`` reads and checks the file's privacy card without it (:mod:`dpgp_gpflow.io.card`: the checks
:func:`~dpgp_gpflow.io.loading.load` runs first); ``dpgp predict`` loads the file, readout included, which needs it.

The package holds one module per concern: :mod:`.parsing` (the options), :mod:`.common` (the checks and the
staged result file every command shares), :mod:`.release`, :mod:`.whole_rows`, :mod:`.select`,
:mod:`.classify`, :mod:`.predict`, :mod:`.show`, :mod:`.budget` (and the demo) and :mod:`.entry` (:func:`main`); tables are read
by :mod:`dpgp_gpflow.io.tables`.
"""

from __future__ import annotations

# Only light modules here and in the commands' modules (no TensorFlow, GPflow, pandas, SciPy or dp_accounting:
# tests/test_entry_point.py and tests/test_cli_startup.py check); the rest is imported by the functions that use
# it, TensorFlow only once every check that needs no model has passed (import_tensorflow_quietly).
from .common import (  # noqa: F401  (the names the tests and docs read from dpgp_gpflow.cli)
    COMPOSITIONS,
    KERNELS,
    MAX_MAP_ENTRIES,
    SELECTION_MECHANISMS,
    STORED_INPUT_VALUES,
    UsageError,
)
from .entry import demo, main  # noqa: F401  (demo: the dpgp-demo console script)
from .parsing import build_parser  # noqa: F401
from .release import cmd_release, selection_share_value  # noqa: F401
from .select import cmd_select  # noqa: F401

__all__ = ["main"]
