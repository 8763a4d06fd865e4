"""Experiments that regenerate the papers' figures as CSV tables, PNG plots and JSON summaries.

Each experiment is a module with a ``run(out_dir, *, quick=False, ...)`` function; the
``dptensor experiment`` command wraps them.
"""
