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
# # Differentially private GP regression with the cloaking method
#
# This notebook reproduces the !Kung figure of the papers (Smith et al., AISTATS 2018, Figure 1;
# JMLR 2019, Figure 3): the heights of 287 !Kung San women against their ages, published with
# $(\varepsilon, \delta) = (1, 0.01)$ differential privacy by
#
# * the **standard mechanism** (Hall et al. 2013): add a scaled sample of the GP prior;
# * **cloaking** with the papers' objective (`objective="entropy"`: the noise covariance of least
#   log-determinant);
# * **cloaking** with this package's default (`objective="mse"`: the noise covariance of least
#   trace, i.e. the least expected squared error the noise adds).
#
# ## The privacy model
#
# * The ages (inputs `X`) are **public**; the heights (outputs `y`) are **private**.
# * Each height lies in a **public** interval `y_bounds = (lo, hi)` declared before looking at the
#   heights; values outside are clipped. Two data sets are neighbours when one woman's height is
#   replaced by another value in the interval, so one record moves an output by at most
#   `d = hi - lo`.
# * Everything else is **public and chosen a priori**: the kernel and its hyperparameters, the noise
#   variance, the prior mean (the midpoint of the bounds) and the test inputs. Fitting the
#   hyperparameters on the heights (maximising the marginal likelihood) would leak them:
#   `DPGPR.release` refuses after that unless told the hyperparameters are public.
# * What is published is a `PrivateRelease`: the noisy predictive mean at the test inputs, the
#   (public) posterior variance and the (public) covariance of the DP noise.
#
# This notebook is written from the **data owner's seat**: for comparison it also plots the
# private heights and the non-DP posterior mean, which a real publisher would not show.

# %%
import os
import warnings

import gpflow
import matplotlib.pyplot as plt
import numpy as np

import dpgp_gpflow
from dpgp_gpflow import PrivacyAccountant
from dpgp_gpflow.datasets import default_data_dir, load_kung
from dpgp_gpflow.models import DPGPR
from dpgp_gpflow.plotting import plot_noise_std, plot_release

gpflow.config.set_default_float(np.float64)


def reduce_in_tests(n: int, test_n: int) -> int:
    """``test_n`` when the notebook runs as a test (``DPGP_NOTEBOOK_REDUCED`` is set), else ``n``."""
    return test_n if os.environ.get("DPGP_NOTEBOOK_REDUCED") else n


# %% [markdown]
# ## Data
#
# `load_kung` reads `Howell1.csv` from the papers' data folder (`$DPGP_SHARED_DATA`, or
# `../shared/data` beside the repository) and keeps the 287 women.

# %%
print("data folder:", default_data_dir())
X, Y = load_kung()
print(X.shape, Y.shape)

# %% [markdown]
# ## Public choices, made a priori
#
# **Bounds.** The papers use $\Delta = d = 100$ cm, enforced by clipping every height to within
# 50 cm of the data's own mean, which itself reads the private heights. We keep $d = 100$ cm but
# fix the interval without the data: the heights of women from infancy to old age, 60 cm (a baby
# of a few months) to 160 cm (a tall adult among a short-statured people). A few heights fall
# outside and are clipped (the warning gives their number, never their values). Wider bounds
# would clip nothing but scale all the DP noise up with $d$.
#
# **Kernel.** An EQ kernel with lengthscale 25 years, the AISTATS Figure 1 setting ("from our
# prior experience of human development this is the timescale over which gradients vary"), kernel
# variance $7.72^2$ cm$^2$ and noise variance $14^2$ cm$^2$ (the values the paper states for the
# figure). The prior mean is the midpoint of the bounds, 110 cm.
#
# **Test inputs.** 200 ages on 0..110 years, deliberately beyond the oldest woman (about 86), as
# in the paper: the cloaking noise must be fixed for all of them at once.

# %%
Y_BOUNDS = (60.0, 160.0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", dpgp_gpflow.ClippingWarning)
    kernel = gpflow.kernels.SquaredExponential(lengthscales=25.0, variance=7.72**2)
    model = DPGPR((X, Y), kernel, y_bounds=Y_BOUNDS, noise_variance=14.0**2, hyperparameters_public=True)
for w in caught:
    print("ClippingWarning:", w.message)
print("data sensitivity d =", model.data_sensitivity, "cm")

Xnew = np.linspace(0.0, 110.0, reduce_in_tests(200, 40))[:, None]

# %% [markdown]
# ## One release per mechanism
#
# Each `release` is one $(1, 0.01)$-DP publication of the same private heights, so publishing all
# three spends their sum. The papers' figures draw many "DP samples": every sample is a separate
# release and would have to be charged too. Here we make one release per mechanism and show the
# size of the noise instead: the DP bands are $\pm 2$ standard deviations of the posterior plus the
# DP noise, both public. We charge all three releases to one accountant so that the spend is
# explicit. (`seed=None`, the default, draws the noise from the operating system's entropy.)

# %%
EPSILON, DELTA = 1.0, 0.01
with PrivacyAccountant(epsilon=3 * EPSILON, delta=3 * DELTA) as accountant:
    releases = {
        "standard (Hall et al.)": model.release(Xnew, epsilon=EPSILON, delta=DELTA, mechanism="standard"),
        "cloaking, entropy (papers)": model.release(Xnew, epsilon=EPSILON, delta=DELTA, objective="entropy"),
        "cloaking, mse (default)": model.release(Xnew, epsilon=EPSILON, delta=DELTA, objective="mse"),
    }
print(accountant)
for event in accountant.ledger:
    print(f"  ({event.epsilon:g}, {event.delta:g}) mu = {event.mu:.3f}: {event.description}")
print("spent (basic composition):", accountant.spent)

# %% [markdown]
# Every release records how it was calibrated. The cloaking sensitivity is the Mahalanobis norm of
# one record's effect against the noise covariance actually used (equal to $d$ when the optimiser
# reaches the optimum); the standard mechanism's is $d$ times the RKHS norm of that effect.

# %%
nondp_mean, _ = model.predict_f(Xnew)  # private: for comparison only
nondp_mean = nondp_mean.numpy()[:, 0]
print(f"{'release':<28} {'sensitivity':>11} {'multiplier':>10} {'rank':>5} {'median std':>10} "
      f"{'max std':>8} {'RMSE vs non-DP':>14}")
for name, r in releases.items():
    gap = "" if r.certificate is None else f"  (optimiser gap {r.certificate.gap:.1e})"
    print(f"{name:<28} {r.sensitivity:>11.4g} {r.noise_multiplier:>10.4g} {r.rank:>5d} "
          f"{np.median(r.noise_std):>10.3g} {r.noise_std.max():>8.3g} "
          f"{np.sqrt(np.mean((r.mean - nondp_mean) ** 2)):>14.3g}{gap}")

# %% [markdown]
# ## The figure
#
# Solid line: the DP mean (what is published). Dark band: $\pm 2$ sd of the public posterior;
# light band: $\pm 2$ sd of posterior plus DP noise. Dashed: the non-DP mean and dots: the
# private heights (owner only).

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True)
for ax, (name, r), color in zip(axes, releases.items(), ["C0", "C1", "C2"]):
    plot_release(ax, Xnew, r, nondp_mean=nondp_mean, X=X, Y=Y, color=color)
    ax.axhspan(*Y_BOUNDS, color="0.93", zorder=-10)
    ax.set(title=f"{name}, ({EPSILON:g}, {DELTA:g})-DP", xlabel="age (years)", ylim=(30, 240))
axes[0].set_ylabel("height (cm)")
axes[0].legend(fontsize=7, loc="upper left")
fig.tight_layout()

# %% [markdown]
# ## Where the noise goes
#
# The standard mechanism adds noise of the same size everywhere (a scaled prior sample). Cloaking
# puts little noise where the data are dense, since no single woman moves the prediction much
# there, and most near the oldest women: the dense data act as a pivot that gives the outliers
# leverage (AISTATS section 3). Far from all data the prediction reverts to the public prior mean,
# and the noise goes to zero. The `mse` objective gives less noise than `entropy` at nearly every
# age, since it minimises the total noise variance directly.

# %%
fig, ax = plt.subplots(figsize=(8, 4))
plot_noise_std(ax, Xnew, releases)
ax.plot(X[:, 0], np.full(X.shape[0], 0.03), "|", color="0.4", alpha=0.5, markersize=10,
        transform=ax.get_xaxis_transform(), label="training ages (public)")
ax.set(xlabel="age (years)", title=f"DP noise std, ({EPSILON:g}, {DELTA:g})-DP")
ax.legend(fontsize=8)
fig.tight_layout()

ratio = releases["cloaking, mse (default)"].noise_std / releases["cloaking, entropy (papers)"].noise_std
print(f"noise std, mse / entropy: median {np.median(ratio):.2f}, range {ratio.min():.2f}..{ratio.max():.2f}")
print(f"noise std peaks at age {Xnew[np.argmax(releases['cloaking, mse (default)'].noise_std), 0]:.0f} (mse)")

# %% [markdown]
# ## Summary
#
# * With the test inputs fixed in advance, cloaking's noise is shaped like the effect of one
#   record on the predictions, and it is far smaller than the standard mechanism's at the same
#   $(\varepsilon, \delta)$.
# * `objective="mse"` (default) minimises the expected squared error the noise adds;
#   `objective="entropy"` reproduces the papers' choice.
# * Each release spends budget: make one release at all the inputs you need (here 200 ages), and
#   account for every one you publish.
