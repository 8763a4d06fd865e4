"""Model selection under differential privacy: a hyperparameter search with one guarantee.

:class:`PrivateGridSearchCV` fits every candidate of a grid on every fold, scores each held-out
document on its own with a bounded score, releases the candidates' mean scores with Gaussian
noise, picks the best noisy score and refits it; its ``guarantee_`` composes all of it exactly
(every fit a document takes part in, the noisy selection and the refit), and that whole plan is
charged to the ledger once, before the first fit. A plain ``GridSearchCV`` over private estimators
charges each fit on its own and makes its choice from un-noised held-out scores, which no
guarantee covers: a :class:`~dptensor.privacy.PrivacyWarning` says so.
"""

from dptensor.model_selection._private_search import PrivateGridSearchCV, selection_guarantee

__all__ = ["PrivateGridSearchCV", "selection_guarantee"]
