"""Old name of the benchmark: runs ``python -m tools.bench`` (see tools/bench/__init__.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools.bench.__main__ import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(prog="benchmark.py"))  # noqa: E701
