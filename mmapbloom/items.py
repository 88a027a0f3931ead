"""The items counter of a filter handle: the header's items word and its over-capacity
warning, in one object (:class:`ItemsCounter`), and the one rule every writer of the word
follows (:func:`items_update`).

The word counts adds (see the format docs for each kind); it saturates at ``2**32 - 1``
and never wraps. When a write moves it past the design point (:func:`design_limit`, where
the expected fill ratio ``1 - e^(-kn/m)`` exceeds :data:`OVERFILL_RATIO`; Bloom 1970) the
handle warns once (:class:`~mmapbloom.errors.OverCapacityWarning`), after the write is
complete and the lock released (so ``-W error`` cannot interrupt a write).

Writers: the native handle (``mmapbloom._kernels.Handle``, which bumps the word in C
under the lock by the same rule and calls :meth:`ItemsCounter.over` afterwards), the pure
handle (:meth:`ItemsCounter.bump`), unions and merges (:meth:`ItemsCounter.set`), and
``merge_shards`` (:func:`items_update` for the header of a new output).
"""

from __future__ import annotations

import math
import warnings
from typing import Optional

from . import format as fmt
from ._warn import user_stacklevel
from .errors import OverCapacityWarning
from .hashing import HashStrategy
from .sizing import expected_fill_ratio, expected_fp_rate, expected_new_items

__all__ = ["ItemsCounter", "OVERFILL_RATIO", "design_limit", "items_update"]

#: ``add`` warns (OverCapacityWarning, once per handle) past this expected fill ratio
#: ``1 - e^(-kn/m)`` (Bloom 1970). A filter sized by ``for_items`` stays below it at its
#: capacity for every p except about 0.351 to 0.36 (k = 2; fill up to 0.603).
OVERFILL_RATIO = 0.6

_MAX_ITEMS = fmt.MAX_ITEMS


def design_limit(num_bits: int, num_hashes: int, capacity: Optional[int] = None) -> float:
    """The ``items_added`` count past which a filter is over its design point.

    Without a capacity: where the expected fill ratio ``1 - e^(-kn/m)`` (Bloom 1970)
    exceeds ``OVERFILL_RATIO``, ``n > -(m / k) ln(1 - OVERFILL_RATIO)``. With the capacity
    the config was sized for (``BloomConfig.for_items``), never below that design point:
    when the fill at capacity passes ``OVERFILL_RATIO``, the larger of the above and the
    expected ``items_added`` after ``capacity`` distinct
    adds (:func:`~mmapbloom.sizing.expected_new_items`; adds that were false positives
    set no bit and are not counted) plus 3 standard deviations of the set-bit count,
    ``3 sqrt(m f (1 - f))`` at the fill f of that point. This matters where the design fill
    passes ``OVERFILL_RATIO``: k = 1 at a large p, where ``p = 1 - e^(-n/m)`` by design.
    A file opened without its config knows only m and k (first rule)."""
    limit = -(num_bits / num_hashes) * math.log1p(-OVERFILL_RATIO)
    fill = 0.0 if capacity is None else expected_fill_ratio(capacity, num_bits, num_hashes)
    if capacity is not None and fill > OVERFILL_RATIO:  # designed past the usual fill
        spread = 3 * math.sqrt(num_bits * fill * (1 - fill))
        limit = max(limit, expected_new_items(capacity, num_bits, num_hashes) + spread)
    return limit


def items_update(
    count: int,
    num_bits: int,
    num_hashes: int,
    *,
    source: str,
    limit: Optional[float] = None,
    warn: bool = True,
    strategy: Optional[HashStrategy] = None,
) -> tuple[int, Optional[str]]:
    """The one rule for a new value of an items counter.

    Args:
        count: the count to store, before saturation (may be negative or past 2**32 - 1).
        num_bits, num_hashes: m and k of the filter.
        source: the file (or ``"<memory>"``) named in the warning.
        limit: :func:`design_limit` of m and k, if the caller cached it.
        warn: False to skip building the message (a handle that warned already).
        strategy: the filter's strategy, whose formula gives the rate in the message
            (the blocked one for M3B2 and M3BL); None: the classic formula (Bloom 1970).

    Returns:
        ``(stored, message)``: the count clamped to ``[0, 2**32 - 1]`` (it saturates and
        never wraps), and the text of the ``OverCapacityWarning`` to emit when ``stored``
        is past the design point (:func:`design_limit`), else ``None``.
    """
    count = 0 if count < 0 else _MAX_ITEMS if count > _MAX_ITEMS else count
    if not warn or count <= (design_limit(num_bits, num_hashes) if limit is None else limit):
        return count, None
    rate = expected_fp_rate if strategy is None else strategy.expected_fp_rate
    return count, (
        f"{source}: filter is past its design point: {count} items in {num_bits} cells "
        f"with k={num_hashes} gives an expected fill ratio of "
        f"{expected_fill_ratio(count, num_bits, num_hashes):.3f} > {OVERFILL_RATIO}; "
        f"false-positive rate about {rate(count, num_bits, num_hashes):.3g}"
    )


class ItemsCounter:
    """One handle's items word (a :func:`mmapbloom.format.items_word` view) and its
    over-capacity warning, emitted at most once per handle.

    Writes (:meth:`set`, :meth:`bump`) need the write lock; they record the warning and
    :meth:`flush` emits it once the lock is released. Reads (:meth:`load`) need none.
    ``limit`` is :func:`design_limit` of the filter's m and k.
    """

    __slots__ = ("_word", "_m", "_k", "_strategy", "_source", "limit", "warned", "_pending")

    def __init__(
        self,
        word: memoryview,
        num_bits: int,
        num_hashes: int,
        strategy: HashStrategy,
        source: str,
        capacity: Optional[int] = None,
    ):
        self._word = word
        self._m = num_bits
        self._k = num_hashes
        self._strategy = strategy
        self._source = source
        self.limit = design_limit(num_bits, num_hashes, capacity)
        self.warned = False
        self._pending: Optional[str] = None

    def load(self) -> int:
        """The stored count (one 4-byte load). ValueError once released (handle closed)."""
        return fmt.load_items(self._word)

    def set(self, count: int) -> int:
        """Store ``count`` by :func:`items_update` (clamped) and record the warning past
        the design point; returns the stored count. The caller holds the write lock."""
        count, msg = items_update(
            count,
            self._m,
            self._k,
            source=self._source,
            limit=self.limit,
            warn=not self.warned,
            strategy=self._strategy,
        )
        fmt.store_items(self._word, count)
        if msg is not None:
            self.warned = True
            self._pending = msg
        return count

    def bump(self, delta: int) -> None:
        """Add ``delta`` (may be negative), saturating: a saturated count (``2**32 - 1``)
        never moves again. The caller holds the write lock."""
        count = self.load()
        if count < _MAX_ITEMS:
            self.set(count + delta)

    def flush(self) -> None:
        """Emit the recorded warning, if any, attributed to the first frame outside the
        package (:func:`mmapbloom._warn.user_stacklevel`). Call it after releasing the lock."""
        msg, self._pending = self._pending, None
        if msg is not None:
            warnings.warn(msg, OverCapacityWarning, stacklevel=user_stacklevel())

    def forget_warning(self) -> None:
        """Drop a recorded, not yet emitted warning and allow a new one (a copy of a count
        is no add: the copy warns on its own first add past the design point)."""
        self.warned = False
        self._pending = None

    def flush_on_error(self) -> None:
        """:meth:`flush` while an exception ends a batch: the warning recorded by its
        committed chunks is emitted now (never left for the next, unrelated add), and a
        warning turned into an error (``-W error``) never replaces the exception in flight."""
        try:
            self.flush()
        except Warning:
            pass

    def over(self, count: int) -> None:
        """Called by the native handle after a write left ``count`` past the design point
        (the lock released): warn now, at the user's frame, unless this handle warned
        already."""
        if self.warned:
            return
        _, msg = items_update(count, self._m, self._k, source=self._source, limit=self.limit, strategy=self._strategy)
        if msg is not None:
            self.warned = True
            warnings.warn(msg, OverCapacityWarning, stacklevel=user_stacklevel())

    def release(self) -> None:
        """Drop the view of the header (before the image is unmapped)."""
        self._word.release()
