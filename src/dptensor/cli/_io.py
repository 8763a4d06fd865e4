"""File helpers shared by the CLI subcommands."""

from __future__ import annotations

from dptensor._files import write_json
from dptensor.streams import load_matrix as load_array

__all__ = ["load_array", "write_json"]
