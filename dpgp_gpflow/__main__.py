"""Command line: ``python -m dpgp_gpflow demo`` (also installed as ``dpgp-demo``).

The demo publishes a differentially private GP regression of scikit-learn's diabetes data
(disease progression one year after baseline, from body-mass index), prints a table comparing the
mechanisms and writes a PNG. Run ``python -m dpgp_gpflow demo --help`` for the options.

This module imports only the standard library at start-up (the ``dpgp`` command line imports it
too): arguments are parsed first, then :func:`import_tensorflow_quietly` imports TensorFlow without
its start-up log.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Optional, Sequence

__all__ = ["main"]

#: Train/test sizes of the public split of the 442 diabetes records.
N_TRAIN, N_TEST = 342, 100
#: A-priori hyperparameters (BMI in kg/m^2, target in score units); see :func:`run_demo`.
LENGTHSCALE = 5.0
NOISE_VARIANCE = 55.0**2
#: BMI grid for the figure (the adult range, wider than the data).
GRID = (15.0, 45.0, 121)


def import_tensorflow_quietly() -> None:
    """Import TensorFlow without its start-up log, for the command lines (``dpgp``, ``dpgp-demo``,
    ``python -m dpgp_gpflow``): ``TF_CPP_MIN_LOG_LEVEL=3`` (unless set) for TensorFlow's own messages,
    and standard error pointed at the null device during the import for the lines absl and the CUDA
    plugins write before logging is set up. Nothing is hidden once it returns; a no-op when
    TensorFlow is already imported."""
    if "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        import tensorflow  # noqa: F401  (imported for its side effect: loaded, quietly)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dpgp_gpflow",
        description="Differentially private GP regression with GPflow (the cloaking method).",
    )
    parser.add_argument("command", nargs="?", default="demo", choices=["demo"],
                        help="what to run (default: demo)")
    parser.add_argument("--epsilon", type=float, default=1.0, help="epsilon of each release (default 1.0)")
    parser.add_argument("--delta", type=float, default=0.01, help="delta of each release (default 0.01)")
    parser.add_argument("--output", type=Path, default=Path("demo_output"),
                        help="folder for the PNG (default: demo_output/)")
    parser.add_argument("--split-seed", "--seed-split", dest="split_seed", type=int, default=0,
                        help="seed of the public train/test split (default 0)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed for the DP noise: reproducible runs, NOT private (default: OS entropy)")
    return parser


def _rmse(a, b) -> float:
    import numpy as np

    return float(np.sqrt(np.mean((np.reshape(a, [-1]) - np.reshape(b, [-1])) ** 2)))


def run_demo(
    epsilon: float = 1.0,
    delta: float = 0.01,
    output: Path = Path("demo_output"),
    split_seed: int = 0,
    seed: Optional[int] = None,
) -> Path:
    """Run the diabetes demo, print its table and return the path of the PNG it wrote.

    Privacy model: BMI (the input) and the train/test split are public; the targets are private,
    bounded by :data:`~dpgp_gpflow.datasets.DIABETES_Y_BOUNDS` = (25, 346), the documented range, so
    one record moves an output by at most d = 321. Hyperparameters are fixed a priori, never fitted
    on the targets: an EQ kernel with lengthscale 5 BMI units (a change of 5 kg/m^2 is roughly one
    WHO weight class), kernel variance ``((hi - lo) / 4)**2`` (the bounds span about +-2 prior
    standard deviations around their midpoint, the prior mean) and noise variance ``55**2`` (a
    single measurement is expected to predict progression only loosely: about a sixth of the
    bounds' width). Developers looked at the data when choosing these defaults; they are fixed
    constants of the demo, not estimates.

    Releases, each (epsilon, delta)-DP: at the 100 held-out test inputs, cloaking with the
    ``"mse"`` objective (the default), cloaking with the papers' ``"entropy"`` objective and the
    standard (Hall et al.) mechanism; and cloaking (``"mse"``) on a BMI grid for the figure. The
    test-set ``"mse"`` release and the grid release are charged to an accountant with budget
    ``(2 epsilon, 2 delta)``, the two comparison releases to a second one; all four together
    cost ``(4 epsilon, 4 delta)`` under basic composition.

    The RMSE columns and the figure use the held-out targets, the training data and the non-DP
    mean: an evaluation for the data owner, not something to publish.
    """
    import gpflow
    import numpy as np
    from matplotlib.figure import Figure  # no pyplot: works under any backend, changes no global state

    from .accounting import PrivacyAccountant
    from .datasets import DIABETES_Y_BOUNDS, load_diabetes_1d
    from .exceptions import ReproducibleNoiseWarning
    from .models import DPGPR
    from .plotting import plot_noise_std, plot_release

    t0 = time.perf_counter()
    X, Y = load_diabetes_1d()
    perm = np.random.default_rng(split_seed).permutation(X.shape[0])  # public: depends on n and the seed only
    train, test = np.sort(perm[:N_TRAIN]), np.sort(perm[N_TRAIN : N_TRAIN + N_TEST])
    lo, hi = DIABETES_Y_BOUNDS
    kernel = gpflow.kernels.SquaredExponential(lengthscales=LENGTHSCALE, variance=((hi - lo) / 4.0) ** 2)
    model = DPGPR((X[train], Y[train]), kernel, y_bounds=DIABETES_Y_BOUNDS, noise_variance=NOISE_VARIANCE,
                  hyperparameters_public=True)  # chosen a priori, without Y
    Xtest, Ytest = X[test], Y[test]
    grid = np.linspace(*GRID)[:, None]

    published = PrivacyAccountant(epsilon=2 * epsilon, delta=2 * delta)
    comparison = PrivacyAccountant(epsilon=2 * epsilon, delta=2 * delta)
    # Each release gets its own seed (generator state is never reused); None: OS entropy.
    seeds = [None] * 4 if seed is None else [seed + i for i in range(4)]
    if seed is not None:
        print(f"warning: --seed {seed}: the DP noise is reproducible, so these releases are NOT private "
              "against anyone who knows the seed", file=sys.stderr)
    with warnings.catch_warnings():
        if seed is not None:
            warnings.simplefilter("ignore", ReproducibleNoiseWarning)  # said once above
        common = dict(epsilon=epsilon, delta=delta)
        rows = {
            "cloaking (mse)": model.release(Xtest, objective="mse", seed=seeds[0], accountant=published, **common),
            "cloaking (entropy)": model.release(Xtest, objective="entropy", seed=seeds[1], accountant=comparison,
                                                **common),
            "standard (Hall et al.)": model.release(Xtest, mechanism="standard", seed=seeds[2],
                                                    accountant=comparison, **common),
        }
        on_grid = model.release(grid, objective="mse", seed=seeds[3], accountant=published, **common)

    nondp_test, _ = model.predict_f(Xtest)  # private: evaluation only
    nondp_rmse = _rmse(nondp_test.numpy(), Ytest)

    print(f"DP GP regression of the diabetes data (BMI -> progression): {N_TRAIN} train / {N_TEST} test "
          f"(public split, seed {split_seed}), bounds {DIABETES_Y_BOUNDS}, d = {hi - lo:g}")
    print(f"EQ kernel a priori: lengthscale {LENGTHSCALE:g}, variance {((hi - lo) / 4) ** 2:.6g}, "
          f"noise variance {NOISE_VARIANCE:g}")
    header = (f"{'release':<24} {'epsilon':>7} {'delta':>7} {'sensitivity':>11} {'median noise std':>16} "
              f"{'RMSE DP':>8} {'RMSE non-DP':>11}")
    print(header)
    print("-" * len(header))
    for name, r in rows.items():
        print(f"{name:<24} {r.epsilon:>7.3g} {r.delta:>7.3g} {r.sensitivity:>11.4g} "
              f"{float(np.median(r.noise_std)):>16.4g} {_rmse(r.mean, Ytest):>8.4g} {nondp_rmse:>11.4g}")
    print(f"{'cloaking (mse), grid':<24} {on_grid.epsilon:>7.3g} {on_grid.delta:>7.3g} "
          f"{on_grid.sensitivity:>11.4g} {float(np.median(on_grid.noise_std)):>16.4g} {'-':>8} {'-':>11}")
    print("sensitivity: Mahalanobis for cloaking (d when the noise covariance is optimal), d times an RKHS\n"
          "norm for the standard mechanism: not comparable across mechanisms. RMSE: against the held-out\n"
          "targets (private: the owner's evaluation, like the PNG, which shows the data and the non-DP mean).")
    for name, acc in (("published (test mse + grid)", published), ("comparison (entropy + standard)", comparison)):
        eps_spent, delta_spent = acc.spent
        print(f"accountant {name}: budget ({acc.epsilon:g}, {acc.delta:g}), spent ({eps_spent:g}, "
              f"{delta_spent:g}) on {len(acc.ledger)} releases")
    total = (published.spent[0] + comparison.spent[0], published.spent[1] + comparison.spent[1])
    print(f"all four releases together: ({total[0]:g}, {total[1]:g})-DP (basic composition)")

    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    png = output / "diabetes_dp_gpr.png"
    nondp_grid, _ = model.predict_f(grid)
    fig = Figure(figsize=(12, 4.5))
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    plot_release(ax1, grid, on_grid, nondp_mean=nondp_grid.numpy(), X=X[train], Y=Y[train])
    ax1.axhspan(lo, hi, color="0.9", zorder=-10, label="public bounds")
    ax1.set(xlabel="BMI (kg/m$^2$)", ylabel="disease progression",
            title=f"cloaking (mse) release on a grid, ({epsilon:g}, {delta:g})-DP")
    ax1.legend(fontsize=7, loc="upper left")
    plot_noise_std(ax2, Xtest, rows)
    ax2.set(xlabel="BMI (kg/m$^2$)", title="DP noise std at the test inputs")
    ax2.legend(fontsize=7)
    fig.suptitle("owner's view: shows private training data and the non-DP mean", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    print(f"wrote {png} ({time.perf_counter() - t0:.1f} s)")
    return png


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``python -m dpgp_gpflow`` and ``dpgp-demo``; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(None if argv is None else [str(a) for a in argv])
    from .calibration import validate_delta, validate_epsilon

    try:
        validate_epsilon(args.epsilon)
        validate_delta(args.delta)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    if args.split_seed < 0:
        parser.error(f"--split-seed must be >= 0, got {args.split_seed}")
    if args.seed is not None and args.seed < 0:
        parser.error(f"--seed must be >= 0, got {args.seed}")
    if args.command == "demo":
        import_tensorflow_quietly()
        run_demo(args.epsilon, args.delta, args.output, args.split_seed, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
