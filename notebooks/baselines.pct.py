# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Baselines: Laplace binning, GPs on noisy bins, and cloaking
#
# The AISTATS 2018 paper (Smith et al., section 4) compares cloaking with the usual non-parametric
# alternative: **bin** the inputs, release each bin's mean output with the **Laplace mechanism**,
# then predict from the noisy bins. This notebook runs that comparison on the !Kung heights
# (height from age, 287 women) at $\varepsilon = 1$:
#
# 1. **simple binning**: predict the released value of the bin containing the age;
# 2. **a GP on the bin centres** (EQ kernel), each bin weighted by its noise variance;
# 3. **a GP with the integral kernel**, which treats each bin as the integral of the latent
#    function over the bin (`dpgp_gpflow.kernels.IntegralSE`);
# 4. **cloaking** (`DPGPR.release`) at $(\varepsilon, \delta) = (1, 0.01)$.
#
# Methods 1-3 all read **one** release of the bin means: fitting to released values is
# post-processing and costs no extra privacy.
#
# ## The privacy model
#
# * Ages (inputs) are **public**; heights (outputs) are **private**, clipped to the public
#   interval `y_bounds = (60, 160)` cm, so one woman moves one output by at most `d = 100` cm
#   (two data sets are neighbours when one height is replaced by another value in the interval).
# * The bin edges are **public** and chosen a priori (here: equal-width bins over ages 0..90).
#   Since the ages are public, so are the bin **counts**.
# * A bin with $n_j$ women has mean sensitivity $d / n_j$; Laplace noise of scale
#   $b_j = (d / n_j) / \varepsilon$ makes it $\varepsilon$-DP, and because every height lies in
#   exactly one bin the whole vector of bin means is $(\varepsilon, 0)$-DP (parallel composition).
#   Empty bins publish the public prior mean (the midpoint of the bounds) with no noise.
#
# As in the cloaking notebook, this is written from the **data owner's seat**: it plots the
# private heights for comparison, which a real publisher would not show.

# %%
import os
import time
import warnings

import gpflow
import matplotlib.pyplot as plt
import numpy as np

import dpgp_gpflow
from dpgp_gpflow import PrivacyAccountant
from dpgp_gpflow.baselines import (
    fit_gp_on_bins,
    fit_integral_gp,
    make_bins,
    predict_bin_value,
    predict_integral_gp,
    release_bin_means,
)
from dpgp_gpflow.datasets import kung_folds, load_kung
from dpgp_gpflow.models import DPGPR

gpflow.config.set_default_float(np.float64)
T0 = time.perf_counter()


def reduce_in_tests(n: int, test_n: int) -> int:
    """``test_n`` when the notebook runs as a test (``DPGP_NOTEBOOK_REDUCED`` is set), else ``n``."""
    return test_n if os.environ.get("DPGP_NOTEBOOK_REDUCED") else n


# %% [markdown]
# ## Data and public choices
#
# All choices below are made before looking at the heights:
#
# * output bounds `(60, 160)` cm (`d = 100` cm, as in the papers);
# * bins of 10 years over ages 0..90 (9 bins);
# * for cloaking, the GP hyperparameters of the papers' !Kung experiments (DESIGN 9): EQ kernel with
#   lengthscale 15 years, kernel variance 10 cm², noise variance 25 cm², prior mean 110 cm (the
#   midpoint of the bounds);
# * for the GPs on the bins, the same lengthscale and noise variance but kernel variance
#   $((hi - lo)/4)^2 = 625$ cm², also a public choice from the bounds. With only 9 observations a
#   GP whose prior standard deviation is $\sqrt{10} \approx 3$ cm cannot move far from the prior
#   mean of 110 cm (babies are 40 cm shorter); cloaking fits 266-287 heights and is far less
#   affected. The cross-validation below reports the bin GPs with both variances.

# %%
X, Y = load_kung()
Y_BOUNDS = (60.0, 160.0)
AGE_BOUNDS = (0.0, 90.0)
LENGTHSCALE, KERNEL_VARIANCE, NOISE_VARIANCE = 15.0, 10.0, 25.0
BIN_KERNEL_VARIANCE = ((Y_BOUNDS[1] - Y_BOUNDS[0]) / 4.0) ** 2  # 625 cm^2
EPSILON, DELTA = 1.0, 0.01

bins = make_bins(X, counts=9, bounds=AGE_BOUNDS)
print(X.shape, "ages", X.min(), "..", X.max(), "| bins:", bins.n_bins, "edges", bins.edges[0])

# %% [markdown]
# ## One release of the bin means
#
# The release is charged to a privacy accountant: a single pure-$\varepsilon$ event. The counts
# and noise scales are public; the released means are what the three bin predictors read.
# (`seed=None`, the default, draws the Laplace noise from the operating system's CSPRNG; this
# notebook fixes a seed only so that its figures are reproducible.)

# %%
accountant = PrivacyAccountant(epsilon=2.0, delta=DELTA)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", dpgp_gpflow.ReproducibleNoiseWarning)
    bin_release = release_bin_means(X, Y, bins, y_bounds=Y_BOUNDS, epsilon=EPSILON, seed=0,
                                    accountant=accountant)
print("bin | count | Laplace scale b (cm) | released mean (cm)")
for j in range(bins.n_bins):
    lo, hi = bins.edges[0][j], bins.edges[0][j + 1]
    print(f"[{lo:4.0f}, {hi:4.0f}) | {bin_release.counts[j]:5d} | {bin_release.noise_scale[j]:8.2f} | "
          f"{bin_release.mean[j]:7.1f}")
print(accountant)

# %% [markdown]
# ## Three predictors from the same release (no extra privacy cost)
#
# * `predict_bin_value`: a step function.
# * `fit_gp_on_bins`: a GPflow `GPR` on the bin centres; bin $j$'s likelihood variance is the
#   Laplace variance $2 b_j^2$ plus the noise variance over the bin, $\sigma^2 / n_j$.
# * `fit_integral_gp`: a `GPR` with the integral kernel; its observations are the bin integrals,
#   $(\text{mean}_j - m_0) V_j$ with volume (here: width) $V_j$, and `predict_integral_gp` predicts
#   the latent function at ages.

# %%
ages = np.linspace(0.0, 90.0, reduce_in_tests(200, 30)).reshape(-1, 1)
simple = predict_bin_value(bin_release, ages)
centre_gp = fit_gp_on_bins(
    bin_release,
    gpflow.kernels.SquaredExponential(lengthscales=LENGTHSCALE, variance=BIN_KERNEL_VARIANCE),
    noise_variance=NOISE_VARIANCE,
)
centre_mean, centre_var = centre_gp.predict_f(ages)
integral_gp = fit_integral_gp(bin_release, LENGTHSCALE, BIN_KERNEL_VARIANCE, noise_variance=NOISE_VARIANCE)
integral_mean, integral_var = predict_integral_gp(integral_gp, ages)

# %% [markdown]
# ## Cloaking at (1, 0.01)
#
# `DPGPR.release` publishes the GP posterior mean at the chosen test ages with noise shaped by the
# cloaking optimiser (our defaults: `objective="mse"`, `calibration="analytic"`). It is charged to
# the same accountant: the data owner who publishes both has spent
# $(\varepsilon, \delta) = (2, 0.01)$ in total.

# %%
kernel = gpflow.kernels.SquaredExponential(lengthscales=LENGTHSCALE, variance=KERNEL_VARIANCE)
model = DPGPR((X, Y), kernel, y_bounds=Y_BOUNDS, noise_variance=NOISE_VARIANCE, hyperparameters_public=True)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", dpgp_gpflow.ReproducibleNoiseWarning)
    cloaked = model.release(ages, epsilon=EPSILON, delta=DELTA, seed=1, accountant=accountant)
nondp_mean, _ = model.predict_f(ages)
print(accountant)

# %%
fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
ax = axes[0]
ax.scatter(X[:, 0], Y[:, 0], s=6, c="0.7", label="private heights (owner's view)")
ax.step(ages[:, 0], simple, where="mid", c="C0", label="simple binning")
ax.plot(ages[:, 0], centre_mean.numpy()[:, 0], c="C1", label="GP on bin centres")
ax.plot(ages[:, 0], integral_mean[:, 0], c="C2", label="integral-kernel GP")
ax.fill_between(ages[:, 0], integral_mean[:, 0] - 2 * np.sqrt(integral_var[:, 0]),
                integral_mean[:, 0] + 2 * np.sqrt(integral_var[:, 0]), color="C2", alpha=0.15,
                label="integral GP ± 2 posterior std")
ax.errorbar(bins.centres[:, 0], bin_release.mean, yerr=np.sqrt(bin_release.noise_variance), fmt="k.",
            capsize=3, label="released bin means ± Laplace std")
ax.set(title=f"Laplace binning, ε = {EPSILON:g}", xlabel="age (years)", ylabel="height (cm)")
ax.legend(fontsize=8, loc="lower right")
ax = axes[1]
ax.scatter(X[:, 0], Y[:, 0], s=6, c="0.7")
ax.plot(ages[:, 0], nondp_mean.numpy()[:, 0], "k--", label="GP posterior mean (not private)")
cloaked_mean, cloaked_std = cloaked.mean[:, 0], cloaked.noise_std[:, 0]  # [k, 1] -> [k] to plot
ax.plot(ages[:, 0], cloaked_mean, c="C3", label="cloaking release")
ax.fill_between(ages[:, 0], cloaked_mean - 2 * cloaked_std, cloaked_mean + 2 * cloaked_std,
                color="C3", alpha=0.2, label="± 2 DP-noise std")
ax.set(title=f"Cloaking, (ε, δ) = ({EPSILON:g}, {DELTA:g})", xlabel="age (years)")
ax.legend(fontsize=8, loc="lower right")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Cross-validated RMSE
#
# The papers' protocol: 14-fold cross-validation (public, seeded splits from `kung_folds`). In each
# fold the training heights are released once by binning at $\varepsilon = 1$ and once by cloaking
# at $(1, 0.01)$ (at the test ages of the fold), and the RMSE against the held-out heights is
# recorded. The folds are separate experiments, so no accountant is used here. (When this notebook
# runs as a test only one fold is used.) `benchmarks/baselines.py` runs the full comparison over
# several bin sizes, hyperparameters and calibrations.

# %%
folds = kung_folds(X.shape[0], 14, seed=0)[: reduce_in_tests(14, 1)]
rmse = {}


def record(name, pred, truth):
    rmse.setdefault(name, []).append(float(np.sqrt(np.mean((np.ravel(pred) - np.ravel(truth)) ** 2))))


with warnings.catch_warnings():
    warnings.simplefilter("ignore", dpgp_gpflow.ReproducibleNoiseWarning)
    warnings.simplefilter("ignore", dpgp_gpflow.ClippingWarning)
    for k, (train, test) in enumerate(folds):
        Xtr, Ytr, Xte, Yte = X[train], Y[train], X[test], Y[test]
        rel = release_bin_means(Xtr, Ytr, bins, y_bounds=Y_BOUNDS, epsilon=EPSILON, seed=100 + k)
        record("simple binning", predict_bin_value(rel, Xte), Yte)
        for var in (BIN_KERNEL_VARIANCE, KERNEL_VARIANCE):
            gp = fit_gp_on_bins(rel, gpflow.kernels.SquaredExponential(lengthscales=LENGTHSCALE, variance=var),
                                noise_variance=NOISE_VARIANCE)
            record(f"GP on bin centres (kernel var {var:g})", gp.predict_f(Xte)[0].numpy(), Yte)
            igp = fit_integral_gp(rel, LENGTHSCALE, var, noise_variance=NOISE_VARIANCE)
            record(f"integral-kernel GP (kernel var {var:g})", predict_integral_gp(igp, Xte)[0], Yte)
        m = DPGPR((Xtr, Ytr), gpflow.kernels.SquaredExponential(lengthscales=LENGTHSCALE, variance=KERNEL_VARIANCE),
                  y_bounds=Y_BOUNDS, noise_variance=NOISE_VARIANCE, hyperparameters_public=True)
        record(f"cloaking (kernel var {KERNEL_VARIANCE:g})",
               m.release(Xte, epsilon=EPSILON, delta=DELTA, seed=200 + k).mean, Yte)

print(f"RMSE (cm) over {len(folds)} folds, binning at ε = {EPSILON:g}, cloaking at ({EPSILON:g}, {DELTA:g}):")
for name, values in rmse.items():
    print(f"  {name:40s} {np.mean(values):6.1f} ± {np.std(values):4.1f}")

# %% [markdown]
# ## What to take away
#
# * Binning spends the whole budget on a handful of numbers, but each bin's noise scales with
#   $1 / n_j$: sparsely populated bins (the elderly here) get large noise, and a step function
#   cannot follow a curve inside a bin.
# * The GPs on the noisy bins weight each bin by its noise variance and smooth across bins;
#   the integral kernel additionally knows that a bin mean is an average over the bin.
# * The GPs on bins depend strongly on the kernel variance: with the papers' 10 cm² they stay near
#   the prior mean (the published integral-kernel figures, 14.2-20.8 cm, are in that range); with
#   625 cm² they are competitive on this 1-D problem, where a few well-populated bins suffice.
# * Cloaking adds noise to the predictions themselves, shaped so that it is smallest where the
#   data are dense, and needs no grid. Binning degrades as the dimension grows and the bins empty
#   (see the 4-D Citi-Bike-like table of `benchmarks/baselines.py`; published AISTATS figures for
#   !Kung: binning 23.4-50.7 cm, integral-kernel binning 14.2-20.8 cm, cloaking 14.3 cm).

# %%
print(f"notebook ran in {time.perf_counter() - T0:.1f} s")
