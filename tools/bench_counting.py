"""Old name of ``python -m tools.bench --counting`` (Counting vs Bloom filter speed, same run)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools.bench.__main__ import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["--counting"] + sys.argv[1:], prog="bench_counting.py"))  # noqa: E701
