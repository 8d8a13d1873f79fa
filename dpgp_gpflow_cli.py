"""Console entry point of ``dpgp`` (see :mod:`dpgp_gpflow.cli`).

A module outside the package so that TensorFlow's start-up log can be silenced before the package
(and TensorFlow with it) is imported: ``TF_CPP_MIN_LOG_LEVEL=3`` for TensorFlow's own messages, and
standard error pointed at the null device during the import for the lines absl writes before its
logging is set up.
"""

import os
import sys
from typing import List, Optional


def _import_quietly():
    """``dpgp_gpflow.cli``, imported with TensorFlow's start-up log silenced."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        from dpgp_gpflow import cli  # imported here, after silencing: the reason this module exists
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    return cli


def main(argv: Optional[List[str]] = None) -> int:
    """Run ``dpgp`` with ``argv`` (default: the command line); returns the exit code."""
    return _import_quietly().main(argv)


def demo(argv: Optional[List[str]] = None) -> int:
    """Run ``dpgp-demo`` (the same as ``dpgp demo``) with ``argv``; returns the exit code."""
    return _import_quietly().main(["demo", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
