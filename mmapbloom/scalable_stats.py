"""What a scalable filter reports and checks: the per-layer record (:class:`LayerInfo`),
the totals and statistics over its layers, its parameters, and :meth:`check` /
:meth:`verify` of the directory against the handle. A mixin of
:class:`mmapbloom.scalable.ScalableBloomFilter`, which owns the state it reads.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any, Union

from .errors import LayerMismatchError, ManifestError, MissingLayerError
from .filter import BloomFilter
from .hashing import HashStrategy
from .scalable_format import LOCK_NAME, LOCK_SIZE, GrowthRule, check_layer_shape, check_lock_image, validate_directory

__all__ = ["LayerInfo", "ScalableStatistics"]


# -- the per-layer record ---------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LayerInfo:
    """The shape and fill of one layer (a snapshot; :attr:`ScalableBloomFilter.layers`).

    Attributes:
        index: 0 for the first layer.
        path: absolute path of the layer's BLM1 file.
        capacity: n_i = n0 * s**i, the items the layer takes before the next is added.
        fp_rate: p_i = p * (1 - r) * r**i, the layer's error target at its capacity.
        num_bits: m of the layer file.
        num_hashes: k of the layer file.
        items_added: the layer header's item count at the time of the snapshot.
        expected_fp_rate: ``(1 - e^(-k n / m))^k`` at that count (Bloom 1970).
        size_bytes: the layer file's length, ``24 + ceil(m / 8)``.
    """

    index: int
    path: str
    capacity: int
    fp_rate: float
    num_bits: int
    num_hashes: int
    items_added: int
    expected_fp_rate: float
    size_bytes: int


class ScalableStatistics:
    """Statistics, parameters and checks of a :class:`~mmapbloom.scalable.ScalableBloomFilter`
    (its mixin: the state and ``_current()`` are the filter's)."""

    __slots__ = ()

    _path: str
    _lock_path: str
    _params: GrowthRule
    _strategy: HashStrategy
    _readonly: bool
    _closed: bool
    _lock_fd: int
    _inodes: list[tuple[int, int]]

    if TYPE_CHECKING:

        def _current(self) -> list[BloomFilter]: ...

        def _layer_path(self, i: int) -> str: ...

        def _check_open(self) -> None: ...

    @property
    def items_added(self) -> int:
        """Items added over all layers (the sum of the layer headers' counts: adds that
        returned True). Each layer's count saturates at 2**32 - 1."""
        return sum(layer.items_added for layer in self._current())

    def expected_fp_rate(self) -> float:
        """The compound expected false-positive rate ``1 - prod_i (1 - P_i)`` where
        ``P_i = (1 - e^(-k_i n_i / m_i))^(k_i)`` is layer i's expected rate at its item
        count (Bloom 1970; Almeida et al. 2007, section 4). Stays below :attr:`fp_rate`
        while layers fill to their capacity (up to the rounding of k per layer)."""
        keep = 1.0
        for layer in self._current():
            keep *= 1.0 - layer.expected_fp_rate()
        return 1.0 - keep

    def approx_items(self) -> float:
        """Estimated distinct items: the sum over layers of ``-(m / k) ln(1 - X / m)``
        (Swamidass and Baldi 2007). Reads every bit (O(total size)). ``math.inf`` if some
        layer has every bit set."""
        return float(sum(layer.approx_items() for layer in self._current()))

    @property
    def layers(self) -> list[LayerInfo]:
        """A snapshot of every committed layer's shape and fill, oldest first."""
        return self._layer_infos(self._current())

    def _layer_infos(self, layers: list[BloomFilter]) -> list[LayerInfo]:
        out = []
        for i, layer in enumerate(layers):
            out.append(
                LayerInfo(
                    index=i,
                    path=self._layer_path(i),
                    capacity=self._params.layer_capacity(i),
                    fp_rate=self._params.layer_fp_rate(i),
                    num_bits=layer.num_bits,
                    num_hashes=layer.num_hashes,
                    items_added=layer.items_added,
                    expected_fp_rate=layer.expected_fp_rate(),
                    size_bytes=layer.size_bytes,
                )
            )
        return out

    @property
    def num_layers(self) -> int:
        """The committed number of layers (at least 1)."""
        return len(self._current())

    @property
    def size_bytes(self) -> int:
        """Bytes of all layer files together (manifest and lock file excluded)."""
        return sum(layer.size_bytes for layer in self._current())

    def info(self, *, scan: bool = False) -> dict[str, Any]:
        """A JSON-ready description for ``mmapbloom info``: the parameters, totals and one
        entry per layer (the fields of :class:`LayerInfo`). With ``scan=True`` every bit is
        read (O(total size)) to add per-layer ``count_ones``, ``fill_ratio``,
        ``observed_fp_rate`` and ``approx_items`` and the total ``approx_items``."""
        layers = self._current()
        entries = []
        for info, layer in zip(self._layer_infos(layers), layers, strict=True):  # one snapshot
            entry = dataclasses.asdict(info)
            if scan:
                ones = layer.count_ones()
                entry.update(
                    count_ones=ones,
                    fill_ratio=ones / layer.num_bits,
                    observed_fp_rate=layer.observed_fp_rate(),
                    approx_items=layer.approx_items(),
                )
            entries.append(entry)
        out: dict[str, Any] = {
            "kind": "scalable",
            "path": self._path,
            "strategy": self._params.strategy,
            "capacity": self._params.capacity,
            "fp_rate": self._params.fp_rate,
            "growth": self._params.growth,
            "tightening": self._params.tightening,
            "num_layers": len(entries),
            "items_added": sum(e["items_added"] for e in entries),
            "expected_fp_rate": self.expected_fp_rate(),
            "size_bytes": sum(e["size_bytes"] for e in entries),
            "readonly": self._readonly,
            "layers": entries,
        }
        if scan:
            out["approx_items"] = float(sum(e["approx_items"] for e in entries))
        return out

    # -- properties ---------------------------------------------------------------------------
    @property
    def path(self) -> str:
        """Absolute path of the directory (no trailing slash)."""
        return self._path

    @property
    def capacity(self) -> int:
        """n0, the first layer's capacity."""
        return self._params.capacity

    @property
    def fp_rate(self) -> float:
        """p, the bound on the compound false-positive rate."""
        return self._params.fp_rate

    @property
    def growth(self) -> Union[int, float]:
        """s, the capacity ratio between consecutive layers."""
        return self._params.growth

    @property
    def tightening(self) -> float:
        """r, the error-target ratio between consecutive layers."""
        return self._params.tightening

    @property
    def strategy(self) -> HashStrategy:
        """The hash strategy of every layer."""
        return self._strategy

    @property
    def readonly(self) -> bool:
        """True if opened read-only."""
        return self._readonly

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    # -- verification -------------------------------------------------------------------------
    def check(self) -> None:
        """Check the directory against the handle: the lock file (size, magic, version,
        count), the manifest (fields, parameters, growth rule, at least the committed
        number of layers), and every committed layer: present, the same file the handle
        opened, the manifest's shape, a sound header, length and padding.

        Raises:
            ManifestError, MissingLayerError, LayerMismatchError, and the layer
            ``FormatError`` subclasses; FilterClosedError.
        """
        self._check_open()
        layers = self._current()
        lock_path = self._lock_path
        try:
            lst = os.stat(lock_path)
        except FileNotFoundError:
            raise ManifestError("the lock file is missing", source=lock_path, expected=LOCK_NAME, actual=None) from None
        mine = os.fstat(self._lock_fd)
        count = check_lock_image(os.pread(self._lock_fd, LOCK_SIZE, 0), mine.st_size, lock_path)
        if (lst.st_dev, lst.st_ino) != (mine.st_dev, mine.st_ino):
            raise ManifestError(
                "the lock file was replaced since the handle opened it",
                source=lock_path,
                expected=(mine.st_dev, mine.st_ino),
                actual=(lst.st_dev, lst.st_ino),
            )
        validate_directory(self._path, self._params, count)
        for i, layer in enumerate(layers):
            path = self._layer_path(i)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                raise MissingLayerError(
                    f"layer {i} of {count} committed layers is missing", source=path, expected=count, actual=i
                ) from None
            if (st.st_dev, st.st_ino) != self._inodes[i]:
                raise LayerMismatchError(
                    f"layer {i} was replaced since the handle opened it",
                    source=path,
                    expected=self._inodes[i],
                    actual=(st.st_dev, st.st_ino),
                )
            check_layer_shape(self._params, self._strategy, i, layer.config, path)
            layer.check()

    def verify(self) -> None:
        """:meth:`check`, then every committed layer file is opened afresh, read-only, and
        checked from its own header (as ``mmapbloom.verify_file``), so damage to the files
        on disk is found even where this handle's mappings would hide it.

        Raises as :meth:`check`."""
        self.check()
        for i in range(len(self._current())):
            path = self._layer_path(i)
            try:
                fresh = BloomFilter.open(path, readonly=True)
            except FileNotFoundError:
                raise MissingLayerError(f"layer {i} is missing", source=path, expected=i + 1, actual=i) from None
            try:
                check_layer_shape(self._params, self._strategy, i, fresh.config, path)
                fresh.check()
            finally:
                fresh.close()

    # -- the interface of every filter kind (``verify.open_filter``, ``mmapbloom`` CLI) -------
    def describe(self, *, scan: bool = True, progress: Any = False) -> dict[str, Any]:
        """:meth:`info` under the name every filter kind shares (``BloomFilter.describe``):
        ``kind`` is ``"scalable"``, with one record per layer in ``layers``. ``progress``
        is accepted for the common signature and not used (layers are scanned whole).

        Raises:
            FilterClosedError, and as :meth:`check` for a damaged directory.
        """
        record = self.info(scan=scan)
        # JSON has no infinity: an estimate from a layer with every bit set is unknown (None),
        # as in BloomFilter.describe.
        for entry in [record, *record["layers"]]:
            if entry.get("approx_items") == float("inf"):
                entry["approx_items"] = None
        return record
