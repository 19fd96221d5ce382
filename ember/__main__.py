"""``python -m ember ...``: the same as the ``ember`` command."""

import sys

from .cli import main

sys.exit(main())
