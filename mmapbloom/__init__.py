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
    FormatError,
    IncompatibleFiltersError,
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
from .counting import CountingBloomFilter
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
from .config import BloomConfig
from .merge import merge_into, merge_shards
from .scalable import ScalableBloomFilter
from .verify import open_any, verify_file

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
    "DEFAULT_STRATEGY",
    "FilterClosedError",
    "FormatError",
    "HashStrategy",
    "IncompatibleFiltersError",
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
    "register_strategy",
    "verify_file",
]
