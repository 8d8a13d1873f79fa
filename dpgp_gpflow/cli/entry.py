"""``dpgp``'s entry point (:func:`main`, the console script): parse, run the command, turn refusals into one line and
exit code 2, the package's warnings into one line each.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Callable, List, Optional

from ..exceptions import BudgetExceededError, LedgerError, PrivacyLeakError
from ..io.tables import TableError, one_line
from .common import UsageError
from .parsing import build_parser

__all__: list = []  # internal: the package's entry point is dpgp_gpflow.cli.main


def _warning_line(show: Callable[..., None]) -> Callable[..., None]:
    """A ``warnings.showwarning`` for the command line: the package's own warnings
    (:class:`~dpgp_gpflow.ClippingWarning`, ...) as one line ``dpgp: warning: MESSAGE`` on stderr, without
    the Python file and source line, each message once; other warnings as ``show`` prints them."""
    seen = set()

    def show_line(message, category, filename, lineno, file=None, line=None) -> None:
        if not category.__module__.startswith("dpgp_gpflow"):
            return show(message, category, filename, lineno, file, line)
        text = " ".join(str(message).split())
        if text not in seen:
            seen.add(text)
            (file or sys.stderr).write(f"dpgp: warning: {text}\n")

    return show_line


def main(argv: Optional[List[str]] = None) -> int:
    """Run ``dpgp`` (the console script) with ``argv`` (default: the command line); returns the exit code
    (2 for bad input, with one line on stderr).

    The command imports TensorFlow (quietly) only when it needs a model or a release file, after every
    other check (module docstring). While it runs, the package's warnings print as one line each
    (:func:`_warning_line`); the previous ``warnings.showwarning`` is restored when it returns. A library
    refusal that escapes a command (``ValueError``, ``ArithmeticError``) is one line too, exit code 2.
    """
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():  # restores the filters and warnings.showwarning when done
            warnings.showwarning = _warning_line(warnings.showwarning)
            return int(args.run(args))
    except (UsageError, TableError) as exc:
        sys.stderr.write(f"dpgp: error: {exc}\n")
        return 2
    except (BudgetExceededError, PrivacyLeakError, LedgerError, NotImplementedError) as exc:
        sys.stderr.write(f"dpgp: error: {exc}\n")  # refused before anything is drawn: the reservation is given back
        return 2
    except PermissionError as exc:  # e.g. a ledger or an output in a folder that cannot be written
        sys.stderr.write(f"dpgp: error: {exc.filename or ''}: permission denied\n")
        return 2
    except (ValueError, ArithmeticError) as exc:  # a library refusal not turned into a UsageError where it was
        # raised (e.g. a noise scale that overflows): one line too. A reservation is given back when its block
        # is left by an exception, and only a written result is charged.
        sys.stderr.write(f"dpgp: error: {one_line(exc)}\n")
        return 2
    except BrokenPipeError:  # the reader went away (dpgp budget show ... | head): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0


def demo(argv: Optional[List[str]] = None) -> int:
    """Run ``dpgp-demo`` (the same as ``dpgp demo``) with ``argv`` (default: the command line)."""
    return main(["demo", *(sys.argv[1:] if argv is None else argv)])
