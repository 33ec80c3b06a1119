"""``python -m kcal <command> ...``: the ``kcal`` command (:mod:`kcal.cli`) without its console script."""

import sys

from kcal.cli import main

sys.exit(main())
