"""Fuzz the binning baselines: dpgp_gpflow.baselines.make_bins (edges or counts over public bounds)
and release_bin_means (the Laplace mechanism per bin).

make_bins either refuses with a documented error or returns a grid whose every axis is finite and
strictly increasing (it never draws noise). release_bin_means either refuses (no noise drawn, no
budget spent or held, no private output in the message) or returns a release that passes an exact
audit: the public counts recomputed here, the Laplace scale of every occupied bin at least
``d / (n_j epsilon)``, empty bins published as the public value with no noise, one Laplace draw per
occupied bin and one pure (epsilon, 0) event charged.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dpgp_gpflow as dp
from dpgp_gpflow.baselines import make_bins, release_bin_means

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzzkit import (  # noqa: E402
    DOCUMENTED,
    LO_HI,
    PRIVATE_INSIDE,
    PRIVATE_OUTSIDE,
    TOKENS,
    as_container,
    bounds_strategy,
    containers,
    corrupted,
    data_sensitivities,
    epsilons,
    float_matrix,
    fuzz_settings,
    run_call,
    seeds,
)

pytestmark = pytest.mark.filterwarnings("ignore")



def assert_valid_grid(bins, D=None):
    assert isinstance(bins, dp.baselines.Bins)
    assert bins.ndim >= 1 and (D is None or bins.ndim == D)
    for e in bins.edges:
        assert e.ndim == 1 and e.size >= 2, e
        assert np.all(np.isfinite(e)), f"non-finite edges {e}"
        assert np.all(np.diff(e) > 0.0), f"edges not strictly increasing {e}"
    assert np.all(np.isfinite(bins.centres)) and np.all(bins.volumes >= 0.0)  # tiny bins may underflow to 0


@st.composite
def bin_bounds(draw, D, valid):
    fine = [(0.0, 1.0), [-2.0, 3.0], np.array([0.0, 1.0]), (0, 10), (-1e6, 1e6), (1e-3, 2e-3),
            np.tile([0.0, 1.0], (D, 1)), [[0.0, 1.0]] * D]
    # overflowing widths and widths below float resolution: refused (the edges would not be finite
    # and strictly increasing)
    bad = [(1.0, 0.0), (1.0, 1.0), (0.0, math.nan), (0.0, math.inf), ("a", "b"), (0.0, 1.0, 2.0), None, 1.0,
           np.zeros((D + 1, 2)), [[0.0, 1.0, 2.0]], (-1e308, 1e308), (1e308, 1.7e308), (0.0, 5e-324),
           (1.0, 1.0 + 2.2e-16), (-1.7e308, 0.0)]
    return draw(st.sampled_from(fine if valid else fine + bad))


@given(data=st.data())
@fuzz_settings(60)
def test_make_bins_fuzz(draws, data):
    bad = corrupted(data, ["X", "edges", "counts", "bounds", "which"])
    D = data.draw(st.integers(1, 3), label="D")
    X = None
    if data.draw(st.booleans(), label="X given"):
        Xv = data.draw(float_matrix(st.integers(1, 6) if "X" not in bad else st.integers(0, 6),
                                    st.just(D) if "X" not in bad else st.integers(0, 3), lo=-0.5, hi=1.5,
                                    specials=(0.0, 1.0) + ((math.nan, math.inf) if "X" in bad else ())), label="X")
        X = as_container(Xv, data.draw(containers("X" not in bad), label="X container"))
    which = data.draw(st.sampled_from(["edges", "counts"] + (["both", "neither", "edges+bounds"]
                                                             if "which" in bad else [])), label="which")
    kwargs = {}
    if which in ("edges", "both", "edges+bounds"):
        axes = []
        for _ in range(D):
            k = data.draw(st.integers(2, 5), label="edges per axis")
            axes.append(sorted(data.draw(st.lists(st.floats(-2, 2), min_size=k, max_size=k, unique=True))))
        edges = axes[0] if D == 1 and data.draw(st.booleans(), label="flat edges") else axes
        if "edges" in bad:
            edges = data.draw(st.sampled_from([[1.0, 0.0], [0.0, 0.0, 1.0], [0.0], [0.0, math.nan], "abc", [], 1.0,
                                               {0: 1}, np.array([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]]),
                                               [[0.0, 1.0], [2.0]], np.array([0.0, 1.0], dtype=object)]),
                              label="bad edges")
        kwargs["edges"] = edges
    if which in ("counts", "both"):
        good = [st.integers(1, 4), st.lists(st.integers(1, 3), min_size=D, max_size=D), st.just(np.int64(2))]
        counts = data.draw(st.one_of(*good) if "counts" not in bad else st.sampled_from(
            [0, -1, 2.5, [1] * (D + 1), None, True, "3", [0] * D, 1e3, 10**12, [10**4] * D, 2**70]), label="counts")
        kwargs["counts"] = counts
    if which in ("counts", "both", "edges+bounds"):
        b = data.draw(bin_bounds(D, "bounds" not in bad), label="bounds")
        if b is not None:
            kwargs["bounds"] = b
    out = run_call(lambda: make_bins(X, **kwargs), draws, (), (), DOCUMENTED)
    assert draws == []
    if out.refused:
        return
    assert_valid_grid(out.result, None if X is None else np.asarray(Xv).shape[1])


# ---------------------------------------------------------------------------------------------
# release_bin_means


GRIDS = {
    "1d": make_bins(counts=4, bounds=(0.0, 1.0)),
    "1d-edges": make_bins(edges=[0.0, 0.1, 0.5, 1.0]),
    "2d": make_bins(counts=(2, 3), bounds=[(0.0, 1.0), (0.0, 1.0)]),
}


@given(data=st.data())
@fuzz_settings(60)
def test_release_bin_means_fuzz(draws, data):
    bad = corrupted(data, ["X", "Y", "bins", "y_bounds", "epsilon", "d", "empty_value", "outside", "n", "seed"])
    name = data.draw(st.sampled_from(sorted(GRIDS)), label="grid")
    bins = GRIDS[name]
    D = bins.ndim
    n = data.draw(st.integers(1, 10) if "n" not in bad else st.integers(0, 10), label="n")
    lo_x, hi_x = (-0.3, 1.3) if "outside" in bad or data.draw(st.booleans(), label="outside") else (0.0, 1.0)
    Xv = data.draw(float_matrix(st.just(n), st.just(D) if "X" not in bad else st.sampled_from([D, D + 1, 0]),
                                lo=lo_x, hi=hi_x, specials=(0.0, 1.0) + ((math.nan, math.inf) if "X" in bad else ())),
                   label="X")
    X = as_container(Xv, data.draw(containers("X" not in bad), label="X container"))
    pool = PRIVATE_INSIDE * 2 + PRIVATE_OUTSIDE + ((math.nan, -math.inf) if "Y" in bad else ())
    Yv = np.array(data.draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n), label="Y")).reshape(n, 1)
    y_kinds = ["float64", "float32", "int", "dataframe", "list", "1d", "series", "tensor"]
    if "Y" in bad:
        y_kinds += ["bool", "object", "str", "3d", "none", "short"]
    y_kind = data.draw(st.sampled_from(y_kinds), label="Y container")
    Y = Yv[:-1] if y_kind == "short" else as_container(Yv, y_kind)
    y_bounds = data.draw(bounds_strategy(LO_HI, "y_bounds" not in bad), label="y_bounds")
    epsilon = data.draw(epsilons(extremes=(5e-324, 1e-300, 1e-10, 1e6, 1e300), valid="epsilon" not in bad),
                        label="epsilon")
    kwargs = dict(y_bounds=y_bounds, epsilon=epsilon)
    d = data.draw(data_sensitivities(LO_HI[1] - LO_HI[0], "d" not in bad), label="data_sensitivity")
    if d is not None:
        kwargs["data_sensitivity"] = d
    kwargs.update(data.draw(st.fixed_dictionaries({}, optional={
        "empty_value": st.sampled_from([0.0, 12500.0, -3, np.float32(1.5)] + (
            [math.nan, math.inf, "a", True, None] if "empty_value" in bad else [])),
        "outside": st.sampled_from(["raise", "nearest", "drop"] + (["clip", None] if "outside" in bad else [])),
        "seed": seeds("seed" not in bad),
    }), label="options"))
    if "bins" in bad:
        bins = data.draw(st.sampled_from(["bins", None, [0.0, 1.0], GRIDS["2d"] if D == 1 else GRIDS["1d"]]),
                         label="bad bins")
    mode = data.draw(st.sampled_from(["explicit", "context", "none", "small"]), label="accountant")
    acc = None if mode == "none" else dp.PrivacyAccountant(epsilon=0.05 if mode == "small" else 1e308)
    before = acc.ledger if acc is not None else ()

    def call():
        if mode == "context":
            with acc:
                return release_bin_means(X, Y, bins, **kwargs)
        return release_bin_means(X, Y, bins, accountant=acc, **kwargs)

    out = run_call(call, draws, [acc] if acc is not None else [], TOKENS, DOCUMENTED)
    if out.refused:
        return
    rel = out.result
    # the exact audit: public counts, Laplace scales, empty bins, one draw per occupied bin, one event
    Xf = np.asarray(X.numpy() if hasattr(X, "numpy") else X, dtype=np.float64)
    inside = np.all([(Xf[:, j] >= e[0]) & (Xf[:, j] <= e[-1]) for j, e in enumerate(bins.edges)], axis=0)
    keep = inside if kwargs.get("outside") == "drop" else np.ones(n, dtype=bool)
    idx = []
    for j, e in enumerate(bins.edges):
        k = np.searchsorted(e, Xf[keep, j], side="right") - 1
        k = np.where(Xf[keep, j] == e[-1], len(e) - 2, k)
        idx.append(np.clip(k, 0, len(e) - 2))
    flat = np.ravel_multi_index(tuple(idx), bins.shape) if keep.any() else np.zeros(0, dtype=int)
    counts = np.bincount(flat, minlength=bins.n_bins)
    np.testing.assert_array_equal(rel.counts, counts)
    lo, hi = (float(v) for v in y_bounds)
    d_used = (hi - lo) if d is None else float(d)
    assert math.isclose(rel.data_sensitivity, d_used, rel_tol=1e-12)
    occupied = counts > 0
    need = d_used / (counts[occupied] * float(epsilon))
    assert np.all(rel.noise_scale[occupied] >= need * (1.0 - 1e-12)), (rel.noise_scale, need)
    assert np.all(rel.noise_scale[~occupied] == 0.0)
    assert np.all(rel.mean[~occupied] == rel.empty_value)
    assert np.all(np.isfinite(rel.mean)), "released bin means are not finite"
    assert rel.epsilon == float(epsilon) and rel.delta == 0.0
    assert len(draws) == 1 and int(draws[0]) == int(occupied.sum())
    if acc is not None:
        assert acc.ledger[:len(before)] == before and len(acc.ledger) == len(before) + 1
        event = acc.ledger[-1]
        assert event.kind == "pure" and event.epsilon == float(epsilon) and event.delta == 0.0
