"""``python -m quarry ...``: the ``quarry`` command (also the entry script for
``spark-submit quarry/cli.py build ...``)."""

import sys

from quarry.cli import main

sys.exit(main())
