"""Park et al.'s DP variational LDA as their code runs it: fixed-size minibatches, moments accountant.

:class:`PaperDPVariationalLDA` is :class:`~dptensor.models.topics.dp_vi.DPVariationalLDA` with one
more parameter, ``accountant``. ``"paper"`` (the default) is the system of Park, Foulds, Chaudhuri
& Welling (2016, *Private topic modeling*, arXiv:1609.04120) and of their code
``PPVI_LDA/onlineldavb.py``: exactly ``S`` documents drawn without replacement each step, the
moments accountant of Abadi et al. (2016) on the sampling ratio ``S / N``, each release's negative
entries zeroed, the clipping norm ``0.1 L`` and the prior ``1/K`` by default. That accountant is
proved for Poisson sampling under add/remove-one, not for fixed-size draws under the replace-one
relation the model protects, so the claim is the paper's, not a proven guarantee: a private fit
refuses unless ``dptensor.privacy.enable_features("unproven")`` is active, and its ``guarantee_``
says that it does not hold (:data:`~dptensor.models.topics._dp_vi_accounting.PAPER_REASON`).
``"exact"`` is ``DPVariationalLDA`` itself (the same fit, bit for bit), for comparisons side by side.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils._param_validation import StrOptions

from dptensor.models.topics.dp_vi import DPVariationalLDA
from dptensor.models.topics.dp_vi_options import DPVIOptions

__all__ = ["PaperDPVariationalLDA"]


class PaperDPVariationalLDA(DPVariationalLDA):
    """DP variational LDA with the choice of the authors' unproven accountant (research wing).

    Parameters
    ----------
    n_components, doc_topic_prior, topic_word_prior, epsilon, delta, random_state, noise, ledger, \
verbose, options
        As :class:`~dptensor.models.topics.dp_vi.DPVariationalLDA`; with ``accountant="paper"`` the
        defaults are the authors': ``options.batch_size`` 128 (at most ``N``), ``options.clip``
        ``0.1 * max_doc_length`` and ``doc_topic_prior`` ``1 / K``.
    accountant : {"paper", "exact"}, default "paper"
        ``"paper"``: fixed-size minibatches and the moments accountant (unproven: a private fit needs
        ``dptensor.privacy.enable_features("unproven")``; ``init="moments"`` is refused).
        ``"exact"``: Poisson sampling and dp-accounting's PLD accountant under replace-one, as
        ``DPVariationalLDA``.

    Examples
    --------
    >>> from dptensor.datasets.lda import make_lda_corpus
    >>> from dptensor.models.topics.dp_vi_options import DPVIOptions
    >>> from dptensor.privacy import enable_features
    >>> corpus = make_lda_corpus(2000, 30, 3, alpha=0.3, doc_length=40, random_state=0)
    >>> model = PaperDPVariationalLDA(3, epsilon=2.0, delta=1e-6, random_state=0,
    ...                               options=DPVIOptions(batch_size=200, n_passes=3))
    >>> with enable_features("unproven"):
    ...     _ = model.fit(corpus.counts)
    >>> model.guarantee_.holds
    False
    """

    _parameter_constraints: dict = {
        **DPVariationalLDA._parameter_constraints,
        "accountant": [StrOptions({"exact", "paper"})],
    }

    def __init__(
        self,
        n_components: int = 10,
        *,
        doc_topic_prior: float | None = None,
        topic_word_prior: float | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        accountant: str = "paper",
        random_state: int | np.random.Generator | None = None,
        noise: object = None,
        ledger: object = None,
        verbose: bool = False,
        options: DPVIOptions | None = None,
    ) -> None:
        super().__init__(
            n_components, doc_topic_prior=doc_topic_prior, topic_word_prior=topic_word_prior,
            epsilon=epsilon, delta=delta, random_state=random_state, noise=noise, ledger=ledger,
            verbose=verbose, options=options,
        )  # fmt: skip
        self.accountant = accountant

    def _accountant(self) -> str:
        return str(self.accountant)
