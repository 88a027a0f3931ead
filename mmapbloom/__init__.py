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
    ManifestError,
    MergeError,
    MissingLayerError,
    MmapBloomError,
    OverCapacityWarning,
    PaddingError,
    ReadOnlyFilterError,
    SaturationWarning,
    UnknownSchemeError,
)
from .counting import CountingBloomFilter
from .filter import BloomFilter
from .hashing import DEFAULT_STRATEGY, M3KM, HashStrategy, encode_key, get_strategy, register_strategy
from .sizing import BloomConfig
from .merge import merge_into, merge_shards
from .scalable import ScalableBloomFilter
from .verify import open_any, verify_file

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_STRATEGY",
    "BadHeaderError",
    "BadMagicError",
    "BloomConfig",
    "BloomFilter",
    "ConfigError",
    "ConfigMismatchError",
    "CountingBloomFilter",
    "FilterClosedError",
    "FormatError",
    "HashStrategy",
    "IncompatibleFiltersError",
    "LayerMismatchError",
    "LengthMismatchError",
    "M3KM",
    "ManifestError",
    "MergeError",
    "MissingLayerError",
    "MmapBloomError",
    "OverCapacityWarning",
    "PaddingError",
    "ReadOnlyFilterError",
    "SaturationWarning",
    "ScalableBloomFilter",
    "UnknownSchemeError",
    "__version__",
    "encode_key",
    "get_strategy",
    "merge_into",
    "merge_shards",
    "open_any",
    "register_strategy",
    "verify_file",
]
