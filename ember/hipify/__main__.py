"""``python -m ember.hipify``: the same as ``ember hipify``."""

import sys

from .cli import main

sys.exit(main(sys.argv[1:]))
