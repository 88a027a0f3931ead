"""The on-disk format of a scalable filter directory: the growth rule, the manifest and the
lock file, and the one validator that checks a directory against a handle.

The layout (documented byte by byte in docs/SCALABLE.md; the manifest, lock file and
publishing code are :mod:`mmapbloom.directory`, shared with the expiring filter)::

    DIR/layer-0000.blm ...   one BLM1 file per layer (mmapbloom.format)
    DIR/manifest.json        the parameters and every layer's shape (JSON, replaced atomically)
    DIR/lock                 16 bytes, little-endian: magic "BLSL", version u32,
                             committed layer count u32, reserved u32 (0)

The growth rule (Almeida, Baquero, Preguica and Hutchison 2007, "Scalable Bloom
Filters"): layer i holds ``n_i = n0 * s**i`` items at error target ``p_i = p * (1 - r) *
r**i``, so the compound rate stays below ``p = sum_i p_i``.

The committed count is read with ``pread`` and stored with ``pwrite`` (never through a
mapping): a lock file truncated by another program then reads short and is reported as
:class:`~mmapbloom.errors.ManifestError`, where a load through a mapping would kill the
process with SIGBUS. The count only grows, one layer at a time, and a reader that sees a
value out of line with the manifest reads it again (see :func:`read_count`).
"""

from __future__ import annotations

import functools
import json
import math
import numbers
import os
import warnings
from dataclasses import dataclass
from typing import Any, Optional, Union

from .errors import ConfigError, LayerMismatchError, ManifestError
from .hashing import HashStrategy, get_strategy
from .format import MAX_ITEMS
from .config import BloomConfig, config_at_most
from .directory import (
    LOCK_NAME,
    LOCK_SIZE,
    MANIFEST_NAME,
    WORD_OFFSET,
    manifest_field,
    publish_json,
    read_json,
    read_word,
    store_word,
)
from .directory import check_lock_image as directory_check_lock
from .directory import lock_image as directory_lock_image

__all__ = [
    "DEFAULT_GROWTH",
    "DEFAULT_TIGHTENING",
    "LOCK_NAME",
    "LOCK_SIZE",
    "MANIFEST_NAME",
    "GrowthRule",
    "check_layer_shape",
    "check_lock_image",
    "check_params",
    "layer_name",
    "lock_image",
    "manifest_bytes",
    "read_count",
    "read_manifest",
    "store_count",
    "validate_directory",
    "write_manifest",
]

#: Default growth factor s: layer i holds ``n0 * s**i`` items.
DEFAULT_GROWTH = 2
#: Default tightening ratio r: layer i's error target is ``p * (1 - r) * r**i``.
DEFAULT_TIGHTENING = 0.5

MANIFEST_FORMAT = "mmapbloom-scalable"
MANIFEST_VERSION = 1

#: The lock file: magic, version, committed layer count, reserved (u32 little-endian).
LOCK_MAGIC = b"BLSL"
LOCK_VERSION = 1
COUNT_OFFSET = WORD_OFFSET
_COUNT_WHAT = "committed layer count"

#: :meth:`GrowthRule.check_growth` checks every layer up to the first whose capacity
#: reaches the BLM1 items limit (2**32 - 1), and at most this many layers.
GROWTH_CHECK_LAYERS = 256


def layer_name(index: int) -> str:
    """The file name of layer ``index`` (0-based): ``layer-0000.blm``, ``layer-0001.blm``,
    ... (at least four digits; ``layer-10000.blm`` after ``layer-9999.blm``)."""
    return f"layer-{index:04d}.blm"


# -- the growth rule --------------------------------------------------------------------------
@dataclass(frozen=True)
class GrowthRule:
    """The parameters of a scalable filter and the shape they give each layer.

    Attributes:
        capacity: n0, items of layer 0 (>= 1).
        fp_rate: p, the bound on the compound false-positive rate, in (0, 1).
        growth: s > 1 (an ``int`` when whole).
        tightening: r in (0, 1).
        strategy: the hash strategy's registered name.
    """

    capacity: int
    fp_rate: float
    growth: Union[int, float]
    tightening: float
    strategy: str

    def layer_capacity(self, i: int) -> int:
        """``n0 * s**i``, exact for an integer s, else rounded up."""
        if isinstance(self.growth, int):
            return int(self.capacity * self.growth**i)
        return math.ceil(self.capacity * self.growth**i)

    @functools.lru_cache(maxsize=256)  # noqa: B019  (frozen, hashable, few instances)
    def layer_limit(self, i: int) -> int:
        """The item count at which layer i is full: ``min(n_i, 2**32 - 1)`` (the BLM1
        items field saturates at 2**32 - 1)."""
        return min(self.layer_capacity(i), MAX_ITEMS)

    def layer_fp_rate(self, i: int) -> float:
        """``p0 * r**i`` with ``p0 = p * (1 - r)``."""
        return self.fp_rate * (1.0 - self.tightening) * self.tightening**i

    def items_before(self, i: int) -> int:
        """Items the layers before layer ``i`` hold when full."""
        return sum(self.layer_limit(j) for j in range(i))

    @functools.lru_cache(maxsize=1024)  # noqa: B019  (frozen, hashable, few instances)
    def layer_config(self, i: int, strategy: HashStrategy) -> BloomConfig:
        """Layer i's shape (:meth:`size_layer`), cached, so the shape and any sizing warning
        of the strategy come once per process and layer."""
        return self.size_layer(i, strategy)

    def size_layer(self, i: int, strategy: HashStrategy) -> BloomConfig:
        """Layer i's shape: k from :meth:`BloomConfig.for_items` (``round((m/n) ln 2)``),
        and m the smallest number of bits, at least for_items' m, whose expected rate at
        capacity ``(1 - e^(-k n / m))^k`` is <= p_i, i.e. ``m >= -k n / ln(1 - p_i^(1/k))``.
        (Rounding k alone leaves the rate up to 0.3% above p_i, which would let the sum
        of the layers' rates pass p.) A blocked strategy (``block_bits`` set) keeps
        for_items' shape: its own sizing already meets p_i in whole blocks.
        Raises ConfigError when it does not fit BLM1 (m >= 2**64, k > 4096) or p_i
        underflows to 0."""
        p_i = self.layer_fp_rate(i)
        if not p_i > 0.0:
            raise ConfigError(
                f"layer {i}: error target p * (1 - r) * r**i underflowed to {p_i!r} "
                f"(tightening r = {self.tightening!r}); the filter cannot grow past "
                f"{self.items_before(i):,} items"
            )
        return config_at_most(self.layer_capacity(i), p_i, strategy)

    def layer_entry(self, i: int, strategy: HashStrategy) -> dict[str, Any]:
        """Layer i's manifest entry (index, file, capacity, fp_rate, num_bits, num_hashes)."""
        cfg = self.layer_config(i, strategy)
        return {
            "index": i,
            "file": layer_name(i),
            "capacity": self.layer_capacity(i),
            "fp_rate": self.layer_fp_rate(i),
            "num_bits": cfg.num_bits,
            "num_hashes": cfg.num_hashes,
        }

    def check_growth(self, strategy: HashStrategy) -> None:
        """Check, before a filter is created, that it can grow: every layer up to the first
        whose capacity reaches the BLM1 items limit (at most :data:`GROWTH_CHECK_LAYERS`
        layers) has a shape. A tightening so small that p_i underflows (``1e-300``), or a
        layer needing more than 4096 hashes or 2**64 bits, is refused here with the layer
        and the item count it would stop at, instead of refusing every item past it later.
        Cost: one sizing per checked layer (cached).

        Raises ConfigError."""
        for i in range(GROWTH_CHECK_LAYERS):
            try:
                with warnings.catch_warnings():  # the strategy's sizing notes come when a layer is made
                    warnings.simplefilter("ignore")
                    self.size_layer(i, strategy)
            except ConfigError as exc:
                where = f"layer {i} (after {self.items_before(i):,} items)"
                if not self.layer_fp_rate(i) > 0.0:
                    raise ConfigError(
                        f"tightening={self.tightening!r} cannot grow: {where} would need an error target "
                        f"p * (1 - r) * r**{i}, which underflows to 0.0; use a tightening closer to 1 "
                        f"(default {DEFAULT_TIGHTENING})"
                    ) from None
                raise ConfigError(
                    f"growth={self.growth!r}, tightening={self.tightening!r} cannot grow: {where} "
                    f"has no valid shape: {exc}"
                ) from None
            if self.layer_capacity(i) >= MAX_ITEMS:
                return


def check_params(
    capacity: object, fp_rate: object, growth: object, tightening: object
) -> tuple[int, float, Union[int, float], float]:
    """Validate the four numbers of a scalable filter; return them normalised (capacity
    and fp_rate exactly as :meth:`BloomConfig.for_items` checks them; growth a finite
    number > 1, an ``int`` when whole; tightening strictly between 0 and 1).

    Raises ConfigError."""
    probe = BloomConfig.for_items(capacity, fp_rate)  # type: ignore[arg-type]
    assert probe.capacity is not None and probe.fp_rate is not None
    try:
        gf = float(growth) if isinstance(growth, numbers.Real) and not isinstance(growth, bool) else math.nan
    except OverflowError:
        gf = math.inf
    if not (math.isfinite(gf) and gf > 1.0):
        raise ConfigError(f"growth must be a finite number greater than 1, got {growth!r}")
    g: Union[int, float] = int(gf) if gf.is_integer() else gf
    tf = float(tightening) if isinstance(tightening, numbers.Real) and not isinstance(tightening, bool) else math.nan
    if not 0.0 < tf < 1.0:
        raise ConfigError(f"tightening must be strictly between 0 and 1, got {tightening!r}")
    return probe.capacity, probe.fp_rate, g, tf


# -- the manifest -----------------------------------------------------------------------------
def manifest_doc(rule: GrowthRule, count: int, strategy: HashStrategy) -> dict[str, Any]:
    """The manifest listing ``count`` layers, as a JSON-ready object."""
    return {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "strategy": rule.strategy,
        "capacity": rule.capacity,
        "fp_rate": rule.fp_rate,
        "growth": rule.growth,
        "tightening": rule.tightening,
        "layers": [rule.layer_entry(i, strategy) for i in range(count)],
    }


def manifest_bytes(rule: GrowthRule, count: int, strategy: HashStrategy) -> bytes:
    """The manifest listing ``count`` layers, as ASCII JSON (as :func:`write_manifest`
    writes it)."""
    return (json.dumps(manifest_doc(rule, count, strategy), indent=1) + "\n").encode("ascii")


def write_manifest(
    directory: str, rule: GrowthRule, count: int, strategy: HashStrategy, *, mode: Optional[int] = None
) -> None:
    """Replace ``manifest.json`` atomically: temporary file, fsync, rename, directory fsync.

    Args:
        mode: exact permission bits of the new manifest (``fchmod``, not masked by the
            umask); None leaves the umask's.

    Raises:
        NoSpaceError: the disk is full (the old manifest is unchanged).
        OSError: any other OS error.
    """
    publish_json(directory, manifest_doc(rule, count, strategy), mode=mode)


_manifest_field = manifest_field


def read_manifest(directory: str) -> tuple[GrowthRule, HashStrategy, list[dict[str, Any]]]:
    """Read and validate ``manifest.json``: every field present and typed, the parameters
    valid, and every listed layer entry equal to the shape the growth rule gives.
    Cost: O(size of the manifest).

    Raises ManifestError (also for a missing manifest), UnknownStrategyError."""
    source = os.path.join(directory, MANIFEST_NAME)
    doc = read_json(directory, MANIFEST_FORMAT, MANIFEST_VERSION, "scalable filter")
    strategy_name = _manifest_field(doc, "strategy", str, source)
    strategy = get_strategy(strategy_name, source=source)
    try:
        capacity, fp_rate, growth, tightening = check_params(
            _manifest_field(doc, "capacity", int, source),
            _manifest_field(doc, "fp_rate", (int, float), source),
            _manifest_field(doc, "growth", (int, float), source),
            _manifest_field(doc, "tightening", (int, float), source),
        )
    except ConfigError as exc:
        raise ManifestError(
            f"invalid parameters: {exc}", source=source, expected="valid parameters", actual=str(exc)
        ) from None
    rule = GrowthRule(capacity, fp_rate, growth, tightening, strategy_name)
    layers = _manifest_field(doc, "layers", list, source)
    for i, entry in enumerate(layers):
        if not isinstance(entry, dict):
            raise ManifestError(f"layer entry {i} is not an object", source=source, expected="object", actual=entry)
        try:
            want = rule.layer_entry(i, strategy)
        except ConfigError as exc:
            raise ManifestError(f"layer {i} cannot exist: {exc}", source=source, expected=None, actual=entry) from None
        for key, value in want.items():
            got = entry.get(key)
            same = (
                (
                    isinstance(got, (int, float))
                    and not isinstance(got, bool)
                    and math.isclose(got, value, rel_tol=1e-12)
                )
                if key == "fp_rate"
                else got == value
            )
            if not same:
                raise ManifestError(
                    f"layer {i}: {key} is {got!r}, expected {value!r} from the growth rule",
                    source=source,
                    expected=value,
                    actual=got,
                )
    return rule, strategy, layers


# -- the lock file ----------------------------------------------------------------------------
def lock_image(count: int) -> bytes:
    """The lock file's 16 bytes for ``count`` committed layers."""
    return directory_lock_image(LOCK_MAGIC, LOCK_VERSION, count)


def check_lock_image(head: bytes, size: int, source: str) -> int:
    """Validate the lock file's 16 bytes (``size`` is the file's length); return the
    committed layer count.

    Raises ManifestError: wrong length, magic, version, reserved word, or a count of 0."""
    return directory_check_lock(head, size, source, magic=LOCK_MAGIC, version=LOCK_VERSION, what=_COUNT_WHAT, minimum=1)


def read_count(fd: int, source: str) -> int:
    """The committed layer count: one ``pread`` of the lock file's count word.

    Raises:
        ManifestError: the lock file is shorter than 12 bytes (truncated under the handle)
            or holds 0.
        OSError: from ``pread`` (EBADF once the handle is closed).
    """
    return read_word(fd, source, what=_COUNT_WHAT, minimum=1)


def store_count(fd: int, count: int) -> None:
    """Commit ``count`` layers: one 4-byte ``pwrite`` of the count word, then ``fsync``.
    The caller holds the write lock.

    Raises OSError (ENOSPC cannot happen: the word exists)."""
    store_word(fd, count)


# -- the one validator ------------------------------------------------------------------------
def validate_directory(directory: str, rule: GrowthRule, count: int) -> list[dict[str, Any]]:
    """Check a directory against a handle's growth rule and the committed ``count`` read
    from its lock file (read *before* the manifest: the manifest is published before the
    count is stored, so a sound directory lists at least ``count`` layers). Returns the
    manifest's layer entries. Used when a handle opens new layers and by ``check()``.

    Raises:
        ManifestError: damaged manifest, parameters that differ from ``rule``, or fewer
            layers listed than committed.
        UnknownStrategyError.
    """
    got, _, entries = read_manifest(directory)
    source = os.path.join(directory, MANIFEST_NAME)
    if got != rule:
        raise ManifestError(
            f"the manifest's parameters changed under the handle: {got} != {rule}",
            source=source,
            expected=rule,
            actual=got,
        )
    if len(entries) < count:
        raise ManifestError(
            f"the manifest lists {len(entries)} layers, the lock file commits {count}",
            source=source,
            expected=count,
            actual=len(entries),
        )
    return entries


def check_layer_shape(rule: GrowthRule, strategy: HashStrategy, i: int, config: BloomConfig, path: str) -> None:
    """Raise LayerMismatchError if layer ``i``'s file (its ``config``) differs from the
    shape the growth rule gives (which a validated manifest lists)."""
    diff = rule.layer_config(i, strategy).difference(config)
    if diff is not None:
        field, want, got = diff
        raise LayerMismatchError(
            f"layer {i} has {field} {got!r}, the manifest says {want!r}", source=path, expected=want, actual=got
        )
