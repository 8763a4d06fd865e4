"""Print pip constraints pinning every core dependency of pyproject.toml to its lower bound.

Used by .ci/run to test that the lowest versions the project claims to support really work.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
try:
    import tomllib

    dependencies = tomllib.loads(text)["project"]["dependencies"]
except ImportError:  # Python 3.10: read the list literally
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
    dependencies = re.findall(r'^\s*"([^"]+)"', block, re.M)
for requirement in dependencies:
    match = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*>=\s*([^,;\s]+)", requirement)
    if not match:
        sys.exit(f"core dependency without a lower bound: {requirement!r}")
    print(f"{match.group(1)}=={match.group(2)}")
