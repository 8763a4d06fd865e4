"""``python -m dptensor``: the same command line as the ``dptensor`` script."""

import sys

from dptensor.cli import main

if __name__ == "__main__":
    sys.exit(main())
