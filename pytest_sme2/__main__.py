"""``python -m pytest_sme2`` = the ``pytest-sme2`` command."""

import sys

from .cli import main

sys.exit(main())
