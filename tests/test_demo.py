"""The command-line demo (``python -m dpgp_gpflow demo`` / ``dpgp-demo``): its refusals in this process; the demo
itself end to end in a fresh process (quiet, its table and PNG) is tests/test_cli_process.py, which shares that
process (one TensorFlow start-up) with the ``dpgp`` command line's own."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from dpgp_gpflow.__main__ import main

#: The rows of the demo's table (tests/test_cli_process.py reads them).
ROWS = ("cloaking (mse)", "cloaking (entropy)", "standard (Hall et al.)")


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize(
    "argv",
    [["demo", "--epsilon", "-1"], ["demo", "--delta", "1.5"], ["demo", "--epsilon", "nan"], ["demo", "--seed", "-1"],
     ["frobnicate"]],
)
def test_demo_rejects_bad_arguments(argv, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv + ["--output", str(tmp_path)])
    assert info.value.code == 2
    assert "error" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing ran


def test_plot_helpers_refuse_multidimensional_inputs():
    from dpgp_gpflow.plotting import _inputs_1d

    assert _inputs_1d(np.zeros((3, 1))).shape == (3,)
    with pytest.raises(ValueError, match="1-D inputs"):
        _inputs_1d(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="release has 4"):
        _inputs_1d(np.zeros(3), 4)
