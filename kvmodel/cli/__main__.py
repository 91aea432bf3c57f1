"""``python -m kvmodel.cli``: the command line, as the ``kvmodel`` script runs it."""

import sys

from kvmodel.cli import main

sys.exit(main())
