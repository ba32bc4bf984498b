"""pytest-sme2's version, at the bottom of the package: the modules that write it (results, history, the CLI's
``--version``) import it from here, never from the package's ``__init__``, which stands above every layer."""

__version__ = "0.1.0"
