"""How a scalable filter's handle follows and extends its layers: reading the committed
layer count, opening the layers another process committed (older ones read-only), and
adding the next layer under the write lock (layer file, manifest, then the count word, the
commit point), and the locked part of the batch loop, which fills each layer to exactly its
capacity and grows across a boundary as sequential adds would. A mixin of :class:`mmapbloom.scalable.ScalableBloomFilter`, which owns the
state it keeps.
"""

from __future__ import annotations

import os
import stat
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional

from .base import contains_flags, items_loader
from .directory import apply_shared_mode, shared_mode
from .errors import ManifestError, MissingLayerError
from .filter import BloomFilter
from .hashing import HashStrategy
from .scalable_format import (
    GrowthRule,
    check_layer_shape,
    layer_name,
    read_count,
    store_count,
    validate_directory,
    write_manifest,
)

__all__ = ["ScalableGrowth", "count_word"]

# Test hook: called as ``_GROW_HOOK(stage, index)`` while a layer is being added, with
# stage ``"layer-created"`` (layer file published, manifest not yet) and
# ``"manifest-published"`` (manifest lists the layer, the count not yet committed). The
# crash tests set it in a child process to SIGKILL it at those exact points.
_GROW_HOOK: Optional[Callable[[str, int], None]] = None


def count_word(count: int) -> bytes:
    """The lock file's layer-count word for ``count`` layers (4 bytes, little-endian), as
    compared with a ``pread`` of it to see whether another process added a layer."""
    return count.to_bytes(4, "little")


class ScalableGrowth:
    """Layer bookkeeping and growth of a :class:`~mmapbloom.scalable.ScalableBloomFilter`
    (its mixin: the state is the filter's)."""

    if not TYPE_CHECKING:  # slots for the runtime; mypy checks the writes against the filter's
        __slots__ = ()

    _path: str
    _lock_path: str
    _params: GrowthRule
    _strategy: HashStrategy
    _readonly: bool
    _lock_fd: int
    _seen: bytes
    _layers: list[BloomFilter]
    _tail: tuple[list[BloomFilter], Callable[[], int], int]
    _inodes: list[tuple[int, int]]
    _retired: list[BloomFilter]
    _reload_lock: threading.Lock

    if TYPE_CHECKING:

        def _check_open(self) -> None: ...

    # -- layer bookkeeping ------------------------------------------------------------------
    def _read_count(self) -> int:
        try:
            return read_count(self._lock_fd, self._lock_path)
        except OSError:  # EBADF: closed by another thread
            self._check_open()
            raise

    def _current(self) -> list[BloomFilter]:
        """The layer handles, after opening any layer another process committed. O(1)
        when nothing changed: one ``pread`` of the count word.

        Raises ManifestError (the lock file was truncated or damaged), FilterClosedError."""
        self._check_open()
        layers = self._layers
        count = self._read_count()
        if count == len(layers):
            return layers
        return self._reload(count)

    def _reload(self, count: int) -> list[BloomFilter]:
        """Open layers up to ``count`` (the committed count, read *before* the manifest:
        the manifest is published before the count is stored, so it lists at least
        ``count`` layers unless it is damaged)."""
        with self._reload_lock:
            layers = self._layers
            if count == len(layers):
                return layers
            if count < len(layers):
                # The word only grows: read it again in case a read raced a store.
                count = self._read_count()
                if count == len(layers):
                    return layers
                if count < len(layers):
                    raise ManifestError(
                        f"the committed layer count went back from {len(layers)} to {count}",
                        source=self._lock_path,
                        expected=f">= {len(layers)}",
                        actual=count,
                    )
            entries = validate_directory(self._path, self._params, count)
            new = list(layers)
            inodes = list(self._inodes)
            try:
                for i in range(len(layers), count):
                    # Only the newest layer is ever written: older ones are opened read-only.
                    layer, ino = self._open_layer(i, entries[i], count, writable=i == count - 1)
                    new.append(layer)
                    inodes.append(ino)
            except BaseException:
                for layer in new[len(layers) :]:
                    layer.close()
                raise
            self._inodes = inodes
            self._layers = new
            self._tail = self._watch(new)
            self._seen = count_word(len(new))
            return new

    def _layer_path(self, i: int) -> str:
        return os.path.join(self._path, layer_name(i))

    def _watch(self, layers: list[BloomFilter]) -> tuple[list[BloomFilter], Callable[[], int], int]:
        """What :meth:`might_contain` needs to answer "no" without a system call, as one
        tuple (replaced whole, so a thread never pairs one list with another's newest
        layer): the layers, a load of the newest layer's items word (through its mapping),
        and that layer's limit (the count at which a writer adds the next layer)."""
        return layers, items_loader(layers[-1]), self._params.layer_limit(len(layers) - 1)

    def _open_layer(
        self, i: int, entry: dict[str, Any], count: int, *, writable: bool
    ) -> tuple[BloomFilter, tuple[int, int]]:
        """Open layer ``i``; read-write only if ``writable`` on a read-write handle and this
        user may write it (else read-only: queries never need write access)."""
        path = self._layer_path(i)
        try:
            if writable and not self._readonly:
                try:
                    layer = BloomFilter.open(path)
                except PermissionError:
                    layer = BloomFilter.open(path, readonly=True)
            else:
                layer = BloomFilter.open(path, readonly=True)
        except FileNotFoundError:
            raise MissingLayerError(
                f"layer {i} of {count} committed layers is missing", source=path, expected=count, actual=i
            ) from None
        try:
            check_layer_shape(self._params, self._strategy, i, layer.config, path)
            st = os.stat(path)
        except BaseException:
            layer.close()
            raise
        return layer, (st.st_dev, st.st_ino)

    def _writable_newest(self, layers: list[BloomFilter]) -> list[BloomFilter]:
        """``layers`` with the newest one open read-write: it was opened read-only when this
        user could not write it; try again (its mode may have changed). The caller holds
        the write lock. Raises PermissionError naming the layer."""
        last = len(layers) - 1
        if not layers[last].readonly:
            return layers
        path = self._layer_path(last)
        try:
            layer = BloomFilter.open(path)
        except PermissionError as exc:
            st = os.stat(path)
            raise PermissionError(
                exc.errno,
                f"{exc.strerror}: the newest layer (mode {stat.filemode(st.st_mode)}, "
                f"owner uid {st.st_uid}, gid {st.st_gid}) is not writable by this user, so "
                "items cannot be added (queries work)",
                path,
            ) from None
        with self._reload_lock:
            self._retired.append(layers[last])  # other threads may still be querying it
            new = layers[:last] + [layer]
            if self._layers is layers:
                self._layers = new
                self._tail = self._watch(new)
        return new

    def _full(self, i: int, layer: BloomFilter) -> bool:
        return layer.items_added >= self._params.layer_limit(i)

    def _shared_mode(self) -> tuple[Optional[int], Optional[int]]:
        """The permission bits and group of layer 0, which every new file copies."""
        return shared_mode(self._layer_path(0))

    def _grow(self, layers: list[BloomFilter]) -> list[BloomFilter]:
        """Add layer ``len(layers)``; the caller holds the write lock and ``layers`` is
        current. Order: layer file (complete, atomically published; an uncommitted
        leftover of a killed writer is replaced) with layer 0's mode and group, manifest
        (atomic replace, same mode), count word (the commit point, fsynced)."""
        i = len(layers)
        cfg = self._params.layer_config(i, self._strategy)  # ConfigError before any change
        mode, gid = self._shared_mode()
        path = self._layer_path(i)
        layer = BloomFilter.create(path, cfg, overwrite=True)
        try:
            # Not the grower's umask: another user sharing the directory must be able to
            # open the layer as it opens layer 0. Done before the commit, under the lock.
            apply_shared_mode(path, mode, gid)
            if _GROW_HOOK is not None:
                _GROW_HOOK("layer-created", i)
            write_manifest(self._path, self._params, i + 1, self._strategy, mode=mode)
            if _GROW_HOOK is not None:
                _GROW_HOOK("manifest-published", i)
            st = os.stat(path)
            with self._reload_lock:
                store_count(self._lock_fd, i + 1)
                self._inodes = self._inodes + [(st.st_dev, st.st_ino)]
                self._layers = new = layers + [layer]
                self._tail = self._watch(new)
                self._seen = count_word(i + 1)
        except BaseException:
            layer.close()
            raise
        return new

    def _update_locked(self, keys: list[Any], progress: list[int]) -> int:
        layers = self._current()
        todo = self._absent(keys, list(range(len(keys))), layers[:-1])
        new = 0
        while todo:
            progress[0] = todo[0]
            last = len(layers) - 1
            newest = layers[last]
            if self._full(last, newest):
                todo = self._absent(keys, todo, [newest])  # it becomes an older layer
                if not todo:
                    break
                progress[0] = todo[0]
                layers = self._grow(layers)
                continue
            layers = self._writable_newest(layers)
            newest = layers[last]
            # At most `room` of them can be new, so the layer never passes its capacity and
            # items fill it in order, exactly as sequential adds would.
            room = self._params.layer_limit(last) - newest.items_added
            part, todo = todo[:room], todo[room:]
            try:
                new += newest.update([keys[i] for i in part])
            except BaseException as exc:
                done = getattr(exc, "committed_items", 0)
                progress[0] = part[done] if done < len(part) else (todo[0] if todo else len(keys))
                raise
        progress[0] = len(keys)
        return new

    @staticmethod
    def _absent(keys: list[Any], todo: list[int], layers: list[BloomFilter]) -> list[int]:
        """The indices of ``todo`` (ascending) whose key no layer of ``layers`` reports."""
        for layer in layers:
            if not todo:
                break
            hit = contains_flags(layer, [keys[i] for i in todo])
            todo = [i for i, h in zip(todo, hit, strict=True) if not h]
        return todo
