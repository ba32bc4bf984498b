"""Example models for pytest-sme2; importing this package registers them (see ``models``)."""

from . import models

__all__ = ["models"]
