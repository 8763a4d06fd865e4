"""Topic models: spectral LDA (paper 004) and its private configurations, DP variational LDA,
the single-topic model (paper 002), the planner, the private vectoriser and their shared pieces."""
