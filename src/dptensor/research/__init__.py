"""The research wing: the papers' systems as printed, where their proofs fail, and the experiments
that reproduce the papers' figures.

Nothing in ``dptensor`` outside this package imports it, apart from the command line (an
import-linter contract in ``pyproject.toml``, run by CI). Its estimators are the papers' unproven
configurations, kept so that the papers' results can be reproduced and compared with the proven
variants beside them; each refuses to fit unless ``enable_features("unproven")`` is active
(:mod:`dptensor.privacy`), and each result it returns says that its claim is the paper's, not a
proven guarantee.

* :mod:`dptensor.research.experiments` -- the experiments behind ``dptensor experiment``, one module
  per paper figure, each with a ``run(out_dir, *, quick=False, ...)`` function.
* :class:`PaperDPVariationalLDA` (:mod:`dptensor.research.paper_dp_vi`) -- DP variational LDA with
  Park et al.'s fixed-size minibatches and moments accountant (``accountant="paper"``).
"""

from dptensor.research.paper_dp_vi import PaperDPVariationalLDA

__all__ = ["PaperDPVariationalLDA"]
