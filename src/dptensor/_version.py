"""The package's version, in a leaf module so that every layer can read it without importing ``dptensor``.

``dptensor/__init__.py`` imports every layer; a module inside one that read ``dptensor.__version__``
would import upward (the layers are checked by the import-linter contract in ``pyproject.toml``).
"""

__version__ = "0.1.0"
