#!/usr/bin/env python3
"""Merge BLM1 shard files into one filter: bitwise OR, or AND with ``--intersection``.

A thin wrapper: the logic is :mod:`mmapbloom.merge`, the arguments and exit status are
those of ``mmapbloom merge`` (:func:`mmapbloom.cli.merge_main`)::

    python tools/merge_shards.py merged.blm 'shards/*.blm'
    python tools/merge_shards.py merged.blm @shard-list.txt --force
    python tools/merge_shards.py --intersection common.blm a.blm b.blm
    python tools/merge_shards.py --into live.blm 'shards/*.blm'

Exit status: 0 merged; 2 bad usage, a damaged, unreadable or incompatible shard (nothing
is written), or a write error. See ``--help``.
"""

import os
import sys

try:
    from mmapbloom.cli import merge_main
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from mmapbloom.cli import merge_main

if __name__ == "__main__":
    sys.exit(merge_main(prog=os.path.basename(sys.argv[0])))
