"""tau-bench's data hash: the plain computation and an incremental one.

tau-bench hashes domain data as ``sha256(str(to_hashable(data)).encode())``
where ``to_hashable`` turns dicts into tuples of ``(key, value)`` pairs sorted
by key, lists into tuples and sets into sorted tuples. :func:`data_hash` does
exactly that. :class:`HashIndex` gives the same digest for an
:class:`~tau_bench_env.data_model.episode_data.EpisodeData` while stringifying only the
records the episode changed: the text of every base record is computed once
per domain, and an episode's digest streams the unchanged runs of that text
into sha256 around the changed records' new text. The text before an
episode's first changed record is the base's own, so the index also keeps
sha256 states along the base text and resumes from the last one before it.
"""

from __future__ import annotations

import pickle
from array import array
from bisect import bisect_left
from collections.abc import Callable, Mapping
from hashlib import sha256
from typing import Any

from tau_bench_env.data_model.episode_data import EpisodeData


class UnhashableDataError(ValueError):
    """Data nested too deeply for ``str()`` (Python's recursion limit); tau-bench cannot hash it either."""


_SCALARS = frozenset({str, int, float, bool, type(None)})
"""Types :func:`to_hashable` returns as they are; checked inline to save a call per leaf."""


def to_hashable(item: Any) -> Any:
    """Convert JSON-like data to nested tuples exactly as tau-bench does.

    >>> to_hashable({"b": [1, 2], "a": {3}})
    (('a', (3,)), ('b', (1, 2)))
    """
    if isinstance(item, dict):
        return tuple(
            [
                (key, value if type(value) in _SCALARS else to_hashable(value))
                for key, value in sorted(item.items())
            ]
        )
    if isinstance(item, list):
        return tuple(
            [element if type(element) in _SCALARS else to_hashable(element) for element in item]
        )
    if isinstance(item, set):
        return tuple(sorted(to_hashable(element) for element in item))
    return item


def data_hash(data: dict[str, Any]) -> str:
    """Return tau-bench's hash of plain data: sha256 hex of ``str(to_hashable(data))``.

    ``1`` and ``1.0`` hash differently, as in tau-bench.

    Raises :class:`UnhashableDataError` for data nested too deeply to stringify.

    >>> data_hash({"a": 1}) == data_hash({"a": 1.0})
    False
    """
    try:
        return sha256(str(to_hashable(data)).encode("utf-8")).hexdigest()
    except RecursionError as error:
        raise UnhashableDataError("the data is nested too deeply to hash") from error


class HashMemo:
    """:func:`data_hash` of plain data, memoized exactly: the whole data's digest and the
    text of each value at depth ``depth`` (telecom's records, under ``{"db": {table: [...]}}``).

    A value is looked up by its pickle (protocol 5): equal pickles unpickle to the same
    structure with the same types and float bits, so they have the same text (``1`` and
    ``1.0``, ``True`` and ``1`` stay apart); a different pickle of equal data is only a
    miss. The text above ``depth`` is composed exactly as ``str(to_hashable(...))``
    writes it. A caller with a cheaper key that determines the text (pydantic's JSON of
    the models a dump is taken from) uses :meth:`keyed_digest` and :meth:`keyed_text`,
    which keep their own tables. Each table holds at most ``limit`` entries and
    ``max_bytes`` bytes of keys and texts (emptied when either is reached: a key can be a
    whole database's serialization, and a training process hashes a new state every
    episode); safe to share between threads (a race only computes a text twice).

    >>> memo = HashMemo()
    >>> data = {"db": {"t": [{"a": 1}, {"b": [1.0, True]}]}, "u": {}}
    >>> memo.digest(data) == data_hash(data) == memo.digest(data)
    True
    >>> odd = {"db": {"t": [{"f": lambda: 0}]}}  # not JSON: pickle refuses it; no memo
    >>> memo.digest(odd) == data_hash(odd)
    True
    """

    __slots__ = ("_depth", "_digests", "_keyed", "_texts", "_keyed_texts")

    def __init__(self, depth: int = 3, limit: int = 65536, max_bytes: int = 64 << 20) -> None:
        self._depth = depth
        self._digests = _BoundedTable(limit, max_bytes)
        self._keyed = _BoundedTable(limit, max_bytes)
        self._texts = _BoundedTable(limit, max_bytes)
        self._keyed_texts = _BoundedTable(limit, max_bytes)

    def stored_bytes(self) -> int:
        """Bytes of keys and texts the memo holds now (bounded by 4 x ``max_bytes``)."""
        return sum(t.stored for t in (self._digests, self._keyed, self._texts, self._keyed_texts))

    def digest(self, data: dict[str, Any]) -> str:
        """:func:`data_hash` of ``data``; raises :class:`UnhashableDataError` as it does."""
        try:
            key = _pickled(data)
            found = None if key is None else self._digests.get(key)
            if found is None:
                found = sha256(self._text(data, 0).encode("utf-8")).hexdigest()
                if key is not None:
                    self._digests.put(key, found)
        except RecursionError as error:
            raise UnhashableDataError("the data is nested too deeply to hash") from error
        return found

    def keyed_digest(self, key: bytes, text: Callable[[], str]) -> str:
        """sha256 hex of ``text()``, memoized under ``key``: a serialization that determines
        the text (equal keys only for data of equal text, such as pydantic's JSON of the
        models a JSON dump is taken from). ``text`` (``str(to_hashable(data))``, e.g.
        :meth:`text`) is called only when ``key`` is not in the memo (these keys have
        their own table). Raises :class:`UnhashableDataError` as :meth:`digest` does."""
        found = self._keyed.get(key)
        if found is None:
            try:
                found = sha256(text().encode("utf-8")).hexdigest()
            except RecursionError as error:
                raise UnhashableDataError("the data is nested too deeply to hash") from error
            self._keyed.put(key, found)
        return found

    def text(self, data: Any) -> str:
        """``str(to_hashable(data))``, the text :func:`data_hash` hashes (memoized as in
        :meth:`digest`)."""
        return self._text(data, 0)

    def keyed_text(self, key: bytes, value: Callable[[], Any]) -> str:
        """``repr(to_hashable(value()))`` (its text inside a tuple), memoized under ``key``,
        a serialization that determines the value's text (own table, as in
        :meth:`keyed_digest`); ``value`` is called only on a miss."""
        found = self._keyed_texts.get(key)
        if found is None:
            found = repr(to_hashable(value()))
            self._keyed_texts.put(key, found)
        return found

    def _text(self, value: Any, depth: int) -> str:
        """``repr(to_hashable(value))`` (its text inside a tuple), memoized at ``self._depth``."""
        if depth == self._depth:
            key = _pickled(value)
            found = None if key is None else self._texts.get(key)
            if found is None:
                found = repr(to_hashable(value))
                if key is not None:
                    self._texts.put(key, found)
            return found
        if isinstance(value, dict):
            parts = [
                f"({key!r}, {self._text(item, depth + 1)})" for key, item in sorted(value.items())
            ]
        elif isinstance(value, list):
            parts = [self._text(item, depth + 1) for item in value]
        else:
            return repr(to_hashable(value))
        if len(parts) == 1:
            return f"({parts[0]},)"
        return "(" + ", ".join(parts) + ")"


class _BoundedTable(dict[bytes, str]):
    """A memo table of at most ``limit`` entries and ``max_bytes`` bytes of keys and texts,
    emptied when a new entry would pass either bound."""

    __slots__ = ("limit", "max_bytes", "stored")

    def __init__(self, limit: int, max_bytes: int) -> None:
        super().__init__()
        self.limit = limit
        self.max_bytes = max_bytes
        self.stored = 0

    def put(self, key: bytes, text: str) -> None:
        size = len(key) + len(text)
        if size > self.max_bytes:
            return
        if len(self) >= self.limit or self.stored + size > self.max_bytes:
            self.clear()
            self.stored = 0
        if key not in self:
            self.stored += size
        self[key] = text


def _pickled(value: Any) -> bytes | None:
    """``value``'s pickle (protocol 5), the memo's key; None for what pickle refuses
    (never JSON data: such a value is hashed without the memo)."""
    try:
        return pickle.dumps(value, protocol=5)
    except (pickle.PicklingError, TypeError, AttributeError):
        return None


def _record_text(key: str, value: Any) -> bytes:
    try:
        return str((key, to_hashable(value))).encode("utf-8")
    except RecursionError as error:
        raise UnhashableDataError(f"record {key!r} is nested too deeply to hash") from error


class _TableText:
    """The encoded text of one base table's records, joined by ``", "``."""

    __slots__ = ("keys", "blob", "starts", "ends")

    def __init__(self, table: Mapping[str, Any]) -> None:
        self.keys = sorted(table)
        pieces = [_record_text(key, table[key]) for key in self.keys]
        self.blob = b", ".join(pieces)
        self.starts = array("q")
        self.ends = array("q")
        offset = 0
        for piece in pieces:
            self.starts.append(offset)
            offset += len(piece)
            self.ends.append(offset)
            offset += 2

    def prefix(self, start: int, stop: int) -> memoryview:
        """The base text between the starts of records ``start`` and ``stop`` (``start <= stop``).

        The text before record ``k`` ends with record ``k - 1``, its separator
        excluded, so a prefix and then ``", "`` and a record continue it as in
        the full text; record ``0``'s prefix is empty.
        """
        begin = self.ends[start - 1] if start else 0
        end = self.ends[stop - 1] if stop else 0
        return memoryview(self.blob)[begin:end]

    def piece(self, record: int) -> memoryview:
        """The text of base record ``record``."""
        return memoryview(self.blob)[self.starts[record] : self.ends[record]]

    def run(self, first: int, last: int) -> memoryview:
        """Text of base records ``first..last`` (inclusive) with their separators."""
        return memoryview(self.blob)[self.starts[first] : self.ends[last]]


CHECKPOINT_EVERY = 32
"""Records of a table between two saved sha256 states of the base text."""


class HashIndex:
    """Precomputed record text of one domain's base data, for incremental hashing.

    Build once per domain (it costs one full stringification) and share it
    across threads; it is immutable after construction. ``base`` must map
    table names to dicts of records, the shape of tau-bench and tau2 data.

    >>> index = HashIndex({"t": {"k": {"v": 1}}})
    >>> index.digest(EpisodeData.fork({"t": {"k": {"v": 1}}})) == data_hash({"t": {"k": {"v": 1}}})
    True
    """

    def __init__(self, base: Mapping[str, Mapping[str, Any]]) -> None:
        for name, table in base.items():
            if not isinstance(table, dict):
                raise ValueError(f"data[{name!r}] must be a dict of records to be indexed")
        self._names = sorted(base)
        self._tables = {name: _TableText(base[name]) for name in self._names}
        self._checkpoints: dict[str, list[Any]] = {}
        hasher = sha256(b"(")
        for position, name in enumerate(self._names):
            if position:
                hasher.update(b", ")
            hasher.update(_table_open(name))
            text = self._tables[name]
            states = []
            fed = 0
            for record in range(0, len(text.keys) + 1, CHECKPOINT_EVERY):
                hasher.update(text.prefix(fed, record))
                fed = record
                states.append(hasher.copy())
            self._checkpoints[name] = states
            hasher.update(text.prefix(fed, len(text.keys)))
            hasher.update(_table_close(len(text.keys)))
        self._base_digest = _finish(hasher, len(self._names))

    def digest(self, data: EpisodeData) -> str:
        """Return :func:`data_hash` of ``data``'s current view, incrementally.

        ``data`` must be forked from the base this index was built on. Raises
        :class:`UnhashableDataError` when a changed record is nested too deeply.
        """
        if sorted(data) != self._names:
            raise ValueError("episode data tables differ from the indexed base data")
        hasher: Any = None
        for name in self._names:
            text = self._tables[name]
            differing = self._differing(text, data[name])
            if hasher is None:
                if not differing:
                    continue
                # resume from the saved state nearest before the first differing record
                first = bisect_left(text.keys, differing[0][0])
                resume = first - first % CHECKPOINT_EVERY
                hasher = self._checkpoints[name][resume // CHECKPOINT_EVERY].copy()
                hasher.update(text.prefix(resume, first))
                segments = self._table_segments(text, differing)
                count = sum(pieces for _, pieces in segments)
                written = first > 0
                if written:
                    segments = segments[1:]  # the base run before ``first``: fed above
            else:
                hasher.update(b", ")
                hasher.update(_table_open(name))
                segments = self._table_segments(text, differing)
                count = sum(pieces for _, pieces in segments)
                written = False
            for segment, _ in segments:
                if written:
                    hasher.update(b", ")
                hasher.update(segment)
                written = True
            hasher.update(_table_close(count))
        if hasher is None:
            return self._base_digest
        return _finish(hasher, len(self._names))

    @staticmethod
    def _differing(text: _TableText, table: Any) -> list[tuple[str, bytes | None]]:
        """The records whose text differs from the base's, in key order: (key, new text or None if deleted).

        A record the episode cloned but left as it was (a write tool reads
        before it writes) has the base's text and is not listed.
        """
        keys = text.keys
        differing: list[tuple[str, bytes | None]] = []
        for key in sorted(table.changed_keys()):
            if key not in table.own:
                differing.append((key, None))
                continue
            piece = _record_text(key, table.own[key])
            position = bisect_left(keys, key)
            if position < len(keys) and keys[position] == key and piece == text.piece(position):
                continue
            differing.append((key, piece))
        return differing

    @staticmethod
    def _table_segments(
        text: _TableText, differing: list[tuple[str, bytes | None]]
    ) -> list[tuple[Any, int]]:
        """Segments of the table's text in key order, each with its record count."""
        keys = text.keys
        size = len(keys)
        if not differing:
            return [(memoryview(text.blob), size)] if size else []
        segments: list[tuple[Any, int]] = []
        cursor = 0
        for key, piece in differing:
            position = bisect_left(keys, key, cursor)
            if cursor < position:
                segments.append((text.run(cursor, position - 1), position - cursor))
            if piece is not None:
                segments.append((piece, 1))
            exists = position < size and keys[position] == key
            cursor = position + 1 if exists else position
        if cursor < size:
            segments.append((text.run(cursor, size - 1), size - cursor))
        return segments


def _table_open(name: str) -> bytes:
    """The text that opens a table: ``(name, (``."""
    return b"(" + repr(name).encode("utf-8") + b", ("


def _table_close(count: int) -> bytes:
    """The text that closes a table of ``count`` records (a 1-tuple keeps its comma)."""
    return b",))" if count == 1 else b"))"


def _finish(hasher: Any, tables: int) -> str:
    """Close the outer tuple of ``tables`` tables and return the hex digest."""
    if tables == 1:
        hasher.update(b",")
    hasher.update(b")")
    return hasher.hexdigest()
