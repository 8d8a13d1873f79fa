"""Benchmark: person-level privacy (issue 28, groups) against group privacy by conversion.

Synthetic persons with 1 to 4 visits each (equally likely), their visits' inputs within 0.3 of the
person's own point on [0, 10] ("nearby": a person's columns of C are nearly parallel, the hardest case
for the group-aware release, whose worst corner is then close to |G| times one column); for
comparison also "spread" persons whose visits fall anywhere on [0, 10]; outputs ``5 + 3 sin(x) + N(0, 1)`` clipped to the public bounds
[0, 10] (d = 10); a full GP (:class:`~dpgp_gpflow.models.DPGPR`, SE kernel, variance 4, lengthscale
1.5, noise variance 1, all fixed a priori) releases its mean at the visits of held-out persons. Four
releases, each protecting what its row says, at (epsilon, delta) = (1, 0.01) unless stated:

1. **group-aware**: ``groups=`` (docs/guides/groups.md): every change of all of a person's outputs;
2. **per-row, converted**: the per-row release at ``(eps', delta')`` that group privacy converts into
   ``(1, 0.01)`` for groups of up to ``g = 4`` rows: an ``(eps', delta')``-DP mechanism is
   ``(g eps', g e^((g-1) eps') delta')``-DP for groups of ``g`` (Dwork & Roth 2014, Theorem 2.2
   with delta), so ``eps' = 1/4`` and ``delta' = 0.01 / (4 e^(3/4))``;
3. **per-row at (1, 0.01)**: protects one row only, NOT persons (for reference);
4. the non-private GP mean (no noise).

Reported: median over the held-out predictions of the noise std, and the RMSE of the released mean
against the held-out noisy outputs, each the median over ``--repeats`` datasets (fresh data, fresh
exact noise). The group-aware release adds less noise than the converted one (issue 28, done-when).

Usage::

    python benchmarks/groups.py                 # 200 persons (about 500 rows), 5 datasets
    python benchmarks/groups.py --quick         # 60 persons, 2 datasets, into results/quick/
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

import gpflow  # noqa: E402
import numpy as np  # noqa: E402

from dpgp_gpflow.models import DPGPR  # noqa: E402

LO, HI = 0.0, 10.0
EPSILON, DELTA = 1.0, 0.01
MAX_ROWS = 4  # the largest person: the conversion is for groups of up to this many rows
EPS_ROW = EPSILON / MAX_ROWS
DELTA_ROW = DELTA / (MAX_ROWS * math.exp((MAX_ROWS - 1) * EPS_ROW))


def persons(num_persons: int, seed: int, spread: bool = False):
    """A public generator of persons: ``(X, Y, groups)`` with 1-4 visits each at nearby inputs (within
    0.3 of the person's point), or anywhere on [0, 10] with ``spread``."""
    rng = np.random.default_rng(seed)
    visits = rng.integers(1, MAX_ROWS + 1, num_persons)
    groups = np.repeat(np.arange(num_persons), visits)
    centres = rng.uniform(0.0, 10.0, num_persons)
    X = (centres[groups] + rng.uniform(-0.3, 0.3, groups.size))[:, None]
    if spread:
        X = rng.uniform(0.0, 10.0, (groups.size, 1))
    Y = np.clip(5.0 + 3.0 * np.sin(X) + rng.standard_normal(X.shape), LO, HI)
    return X, Y, groups


def model(X, Y, groups=None):
    kern = gpflow.kernels.SquaredExponential(variance=4.0, lengthscales=1.5)
    return DPGPR((X, Y), kern, y_bounds=(LO, HI), noise_variance=1.0, hyperparameters_public=True, groups=groups)


def run(num_persons: int, held_out: int, seed: int, spread: bool):
    X, Y, groups = persons(num_persons, seed, spread)
    Xs, Ys, _ = persons(held_out, seed + 10_000)
    ys = Ys[:, 0]
    grouped, per_row = model(X, Y, groups), model(X, Y)
    out = {}
    t0 = time.perf_counter()
    out["group-aware"] = grouped.release(Xs, epsilon=EPSILON, delta=DELTA)
    out["per-row, converted"] = per_row.release(Xs, epsilon=EPS_ROW, delta=DELTA_ROW)
    out["per-row at (1, 0.01)"] = per_row.release(Xs, epsilon=EPSILON, delta=DELTA)
    seconds = time.perf_counter() - t0
    mean, _ = per_row.predict_f(Xs)  # non-private, for reference only
    rows = {name: (float(np.median(rel.noise_std)), float(np.sqrt(np.mean((rel.unclipped().mean - ys) ** 2))))  # raw DP
            for name, rel in out.items()}
    rows["non-private GP mean"] = (0.0, float(np.sqrt(np.mean((mean.numpy()[:, 0] - ys) ** 2))))
    return rows, X.shape[0], Xs.shape[0], seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=200)
    parser.add_argument("--held-out", type=int, default=60, help="held-out persons (their visits are predicted)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="60 persons, 2 datasets; fragment in results/quick/")
    args = parser.parse_args()
    if args.quick:
        args.persons, args.repeats = 60, 2
    started = _common.utc_now()
    results = {False: [], True: []}
    sizes, seconds, ratios = [], [], {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for spread in (False, True):
            for r in range(args.repeats):
                rows, n, k, s = run(args.persons, args.held_out, seed=r, spread=spread)
                results[spread].append(rows)
                sizes.append((n, k))
                seconds.append(s)
                print(f"{'spread' if spread else 'nearby'} dataset {r}: n = {n}, k = {k}, {s:.1f} s: " +
                      "; ".join(f"{name} std {v[0]:.3g} rmse {v[1]:.3g}" for name, v in rows.items()), flush=True)
            ratios[spread] = statistics.median(r["per-row, converted"][0] / r["group-aware"][0]
                                               for r in results[spread])
    protects = {"group-aware": "persons of any size (exact corners up to 4 rows)",
                "per-row, converted": "persons of up to 4 rows",
                "per-row at (1, 0.01)": "one row only (not persons)",
                "non-private GP mean": "nothing"}
    budget = {"group-aware": "(1, 0.01)", "per-row, converted": f"({EPS_ROW:g}, {DELTA_ROW:.3g}) per row",
              "per-row at (1, 0.01)": "(1, 0.01) per row", "non-private GP mean": "none"}
    lines = ["| visits | release | protects | budget | median noise std | held-out RMSE |",
             "| --- | --- | --- | --- | ---: | ---: |"]
    for spread in (False, True):
        for name in results[spread][0]:
            std = statistics.median(r[name][0] for r in results[spread])
            rmse = statistics.median(r[name][1] for r in results[spread])
            lines.append(f"| {'spread' if spread else 'nearby'} | {name} | {protects[name]} | {budget[name]} | "
                         f"{std:.3g} | {rmse:.3g} |")
    ns = sorted(n for n, _ in sizes)
    body = "\n".join(lines) + (
        f"\n\nMedians over {args.repeats} datasets of {args.persons} persons with 1 to 4 visits each "
        f"(n = {ns[0]} to {ns[-1]} rows) and {args.held_out} held-out persons' visits (k = "
        f"{min(k for _, k in sizes)} to {max(k for _, k in sizes)} predictions); outputs in [0, 10] (d = 10), "
        "DPGPR with fixed public hyperparameters, objective mse, analytic calibration, exact noise. Group privacy by "
        "conversion for groups of up to g = 4 rows: eps' = eps / g, delta' = delta / (g e^((g-1) eps')) "
        f"(= {DELTA_ROW:.4g}). The converted per-row release adds {ratios[False]:.2f} times the group-aware "
        f"release's noise with nearby visits (a person's visits within 0.3 of one point, lengthscale 1.5) and "
        f"{ratios[True]:.2f} times with spread visits (anywhere on [0, 10]) (medians of the per-dataset ratios). "
        f"Releases took {statistics.median(seconds):.1f} s per dataset "
        "(median, all three).")
    path = _common.write_fragment("groups", "Person-level privacy: groups vs group privacy by conversion", body,
                                  machine=_common.machine_info(), started=started, quick=args.quick)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
