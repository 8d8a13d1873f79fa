"""The command-line demo (``python -m dpgp_gpflow demo`` / ``dpgp-demo``) runs end to end."""

from __future__ import annotations

import math
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from dpgp_gpflow.__main__ import main

#: A user's environment: TensorFlow's log level unset (the suite's conftest sets one).
ENV = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}

ROWS = ("cloaking (mse)", "cloaking (entropy)", "standard (Hall et al.)")


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow
def test_demo_runs_quietly_and_writes_table_and_png(tmp_path):
    """``python -m dpgp_gpflow demo`` in a fresh process (one run of the demo: it takes a while) prints no
    TensorFlow start-up log, its table and a PNG."""
    out = tmp_path / "demo"
    captured = subprocess.run([sys.executable, "-m", "dpgp_gpflow", "demo", "--output", str(out), "--seed", "0",
                               "--epsilon", "1.0", "--delta", "0.01"], cwd=tmp_path, env=ENV, capture_output=True,
                              text=True, timeout=600)
    assert captured.returncode == 0, captured.stderr
    # the one line on stderr is the demo's own warning about --seed (an explicit seed is announced once);
    # nothing from TensorFlow
    assert len(captured.stderr.splitlines()) == 1 and "NOT private" in captured.stderr, captured.stderr

    pngs = list(out.glob("*.png"))
    assert len(pngs) == 1
    data = pngs[0].read_bytes()
    width, height = _png_size(data)
    assert width >= 600 and height >= 300 and len(data) > 20_000
    import matplotlib.image

    pixels = matplotlib.image.imread(pngs[0])
    assert pixels.std() > 0.05  # something was drawn

    lines = captured.stdout.splitlines()
    values = {}
    for name in ROWS:
        (line,) = [ln for ln in lines if ln.startswith(name + " ")]
        numbers = [float(t) for t in line[len(name):].split()]
        assert len(numbers) == 6, line  # epsilon, delta, sensitivity, median std, RMSE DP, RMSE non-DP
        assert all(math.isfinite(v) for v in numbers), line
        values[name] = numbers
    for eps, delta, sens, std, rmse_dp, rmse_nondp in values.values():
        assert (eps, delta) == (1.0, 0.01)
        assert sens > 0 and std > 0 and rmse_dp > 0 and rmse_nondp > 0
    # the cloaking sensitivity is d = 346 - 25 when the noise covariance is optimal
    assert values["cloaking (mse)"][2] == pytest.approx(321.0, rel=1e-6)
    # cloaking adds far less noise than the standard mechanism, and mse less than entropy
    assert values["cloaking (mse)"][3] < values["cloaking (entropy)"][3] < values["standard (Hall et al.)"][3]
    assert len({v[5] for v in values.values()}) == 1  # one non-DP RMSE
    assert any(ln.startswith("cloaking (mse), grid") for ln in lines)
    assert "spent (2, 0.02) on 2 releases" in captured.stdout
    assert "all four releases together: (4, 0.04)" in captured.stdout


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
