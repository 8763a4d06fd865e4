"""The research wing (dptensor/research/): only the command line imports it."""

from __future__ import annotations

import grimp


def test_nothing_but_the_command_line_imports_the_research_wing():
    graph = grimp.build_graph("dptensor")
    wing = {"dptensor.research"} | graph.find_descendants("dptensor.research")
    importers = {m for module in wing for m in graph.find_modules_that_directly_import(module)} - wing
    assert all(module.startswith("dptensor.cli") for module in importers), importers
