"""``python -m tritonforge.bench ...``: see :mod:`tritonforge.bench.cli`."""

import sys

from tritonforge.bench.cli import main

sys.exit(main())
