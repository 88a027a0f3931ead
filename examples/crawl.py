#!/usr/bin/env python3
"""Crawl this Python's pydoc site with worker processes that share one Bloom filter file.

A thin wrapper around :func:`mmapbloom.demo.main` (also available as ``mmapbloom demo``)::

    python examples/crawl.py --workers 4 --max-pages 1000 --time-limit 120
    python examples/crawl.py --json
"""

import sys

from mmapbloom.demo import main

if __name__ == "__main__":  # needed: worker processes are spawned and re-import this file
    sys.exit(main())
