"""dpgp_gpflow: differentially private Gaussian processes (the cloaking method) for GPflow."""
