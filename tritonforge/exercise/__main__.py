"""``python -m tritonforge.exercise grade [NOTEBOOK ...]``: grade your exercise notebooks (see
:mod:`tritonforge.exercise.grade`)."""

import sys

from tritonforge.exercise.grade import main

if __name__ == "__main__":
    sys.exit(main())
