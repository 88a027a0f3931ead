"""mmapbloom: Bloom filters that live in a memory-mapped file, shared by threads and processes.

>>> from mmapbloom import BloomConfig, BloomFilter
>>> f = BloomFilter(BloomConfig.for_items(1000, 0.01))
>>> f.add("a"), "a" in f, "b" in f
(True, True, False)
"""

from .errors import (
    BadHeaderError,
    BadMagicError,
    ConfigError,
    ConfigMismatchError,
    FilterClosedError,
    FilterFullError,
    FormatError,
    IncompatibleFiltersError,
    KeyEncodingError,
    LayerMismatchError,
    LengthMismatchError,
    LockTimeout,
    ManifestError,
    MergeError,
    MissingLayerError,
    MmapBloomError,
    NoSpaceError,
    OverCapacityWarning,
    PaddingError,
    ReadOnlyFilterError,
    SaturationWarning,
    SelfDeadlockError,
    SparseFileWarning,
    UnknownSchemeError,
    UnknownStrategyError,
)
import importlib
from typing import TYPE_CHECKING, Any

#: The rest of the public API, imported from its module on first use (PEP 562), so that
#: ``import mmapbloom`` loads neither numpy nor portalocker nor tqdm: a command-line tool
#: that only imports the package starts in about the time of ``import mmh3``. The first
#: access to one of these names (``mmapbloom.BloomFilter``, ``from mmapbloom import
#: BloomFilter``) imports its module and what it needs; later accesses are plain
#: attribute reads. The errors above are imported at once (they are cheap, and an
#: ``except mmapbloom.MmapBloomError`` clause must not import anything).
_LAZY = {
    "BACKEND": "kernels",
    "BloomConfig": "config",
    "BloomFilter": "filter",
    "CountingBloomFilter": "counting",
    "CuckooFilter": "cuckoo",
    "DEFAULT_STRATEGY": "hashing",
    "ExpiringBloomFilter": "expiring",
    "HashStrategy": "hashing",
    "M3B2": "hashing",
    "M3BL": "hashing",
    "M3KM": "hashing",
    "M3M2": "hashing",
    "M3MX": "hashing",
    "ScalableBloomFilter": "scalable",
    "Strategy": "hashing",
    "encode_key": "hashing",
    "get_strategy": "hashing",
    "merge_into": "merge",
    "merge_shards": "merge",
    "open_any": "verify",
    "open_filter": "verify",
    "register_strategy": "hashing",
    "Key": "keys",
    "Keys": "keys",
    "verify_file": "verify",
}

if TYPE_CHECKING:
    from .config import BloomConfig
    from .counting import CountingBloomFilter
    from .cuckoo import CuckooFilter
    from .expiring import ExpiringBloomFilter
    from .filter import BloomFilter
    from .hashing import (
        DEFAULT_STRATEGY,
        M3B2,
        M3BL,
        M3KM,
        M3M2,
        M3MX,
        HashStrategy,
        Strategy,
        encode_key,
        get_strategy,
        register_strategy,
    )
    from .kernels import BACKEND
    from .keys import Key, Keys
    from .merge import merge_into, merge_shards
    from .scalable import ScalableBloomFilter
    from .verify import open_any, open_filter, verify_file


def __getattr__(name: str) -> Any:
    """Import a public name's module on first access (thread-safe: the import system
    serialises the import; the name is then cached in the package's namespace)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.2.0"

__all__ = [
    "BACKEND",
    "BadHeaderError",
    "BadMagicError",
    "BloomConfig",
    "BloomFilter",
    "ConfigError",
    "ConfigMismatchError",
    "CountingBloomFilter",
    "CuckooFilter",
    "DEFAULT_STRATEGY",
    "ExpiringBloomFilter",
    "FilterClosedError",
    "FilterFullError",
    "FormatError",
    "HashStrategy",
    "IncompatibleFiltersError",
    "KeyEncodingError",
    "Key",
    "Keys",
    "LayerMismatchError",
    "LengthMismatchError",
    "LockTimeout",
    "M3B2",
    "M3BL",
    "M3KM",
    "M3M2",
    "M3MX",
    "ManifestError",
    "MergeError",
    "MissingLayerError",
    "MmapBloomError",
    "NoSpaceError",
    "OverCapacityWarning",
    "PaddingError",
    "ReadOnlyFilterError",
    "SaturationWarning",
    "ScalableBloomFilter",
    "SelfDeadlockError",
    "SparseFileWarning",
    "Strategy",
    "UnknownSchemeError",
    "UnknownStrategyError",
    "__version__",
    "encode_key",
    "get_strategy",
    "merge_into",
    "merge_shards",
    "open_any",
    "open_filter",
    "register_strategy",
    "verify_file",
]
