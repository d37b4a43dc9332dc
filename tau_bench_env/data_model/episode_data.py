"""Copy-on-write domain data for one episode.

A domain's data is a dict of tables (``"users"``, ``"orders"``, ...), each a
dict of records keyed by id. Every episode of a domain shares one read-only
copy of it (the *base*); an :class:`EpisodeData` holds only the records the
episode's write tools touched. A tool that may write runs with the tables in
*writable* mode: the first ``table[key]`` of a record clones it into the
episode, so the tool mutates the clone and never the base. Read-only tools
(declared by each backend) see the base records directly.

The tables are :class:`collections.abc.MutableMapping` objects, not dicts:
tools may index, test membership, iterate, assign and delete, which is all the
tau-bench and tau2 tools do.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, MutableMapping, ValuesView
from contextlib import contextmanager
from typing import Any


def clone(value: Any) -> Any:
    """Return a deep copy of JSON-like data (dicts, lists, sets, scalars).

    Faster than :func:`copy.deepcopy` for this shape of data; other objects
    are shared, not copied.

    >>> a = {"x": [1, {"y": 2}]}
    >>> b = clone(a); b["x"][1]["y"] = 3; a["x"][1]["y"]
    2
    """
    if isinstance(value, dict):
        return {key: item if type(item) in _SCALARS else clone(item) for key, item in value.items()}
    if isinstance(value, list):
        return [item if type(item) in _SCALARS else clone(item) for item in value]
    if isinstance(value, set):
        return {clone(item) for item in value}
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})
"""Types :func:`clone` returns as they are without a call (most leaves of the data)."""


class CowTable(MutableMapping[str, Any]):
    """One table of an episode: a shared base dict plus this episode's changes.

    Invariants: ``own`` holds records cloned or added by this episode;
    ``deleted`` holds base keys this episode deleted; the base is never
    mutated through this object.
    """

    __slots__ = ("_base", "own", "deleted", "writable")

    def __init__(self, base: Mapping[str, Any]) -> None:
        self._base = base
        self.own: dict[str, Any] = {}
        self.deleted: set[str] = set()
        self.writable = True

    def __getitem__(self, key: str) -> Any:
        own = self.own
        if key in own:
            return own[key]
        if key in self.deleted:
            raise KeyError(key)
        value = self._base[key]
        if self.writable:
            value = clone(value)
            own[key] = value
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        self.own[key] = value
        self.deleted.discard(key)

    def __delitem__(self, key: str) -> None:
        if key in self.own:
            del self.own[key]
            if key in self._base:
                self.deleted.add(key)
            return
        if key in self.deleted or key not in self._base:
            raise KeyError(key)
        self.deleted.add(key)

    def __contains__(self, key: object) -> bool:
        if key in self.own:
            return True
        return key in self._base and key not in self.deleted

    def __iter__(self) -> Iterator[str]:
        deleted = self.deleted
        for key in self._base:
            if key not in deleted:
                yield key
        for key in self.own:
            if key not in self._base:
                yield key

    def __len__(self) -> int:
        added = sum(1 for key in self.own if key not in self._base)
        return len(self._base) - len(self.deleted) + added

    def keys(self) -> KeysView[str]:
        """The keys; while read-only, a view of a plain dict (iterated in C, not here)."""
        if self.writable:
            return super().keys()
        return self._read_view().keys()

    def values(self) -> ValuesView[Any]:
        """The records; while read-only, base records uncloned from a plain dict's view.

        Writable, each record is indexed (and so cloned into the episode) as by
        ``table[key]``. Read-only, the records and their order are those of
        ``table[key]`` over ``iter(table)``, without a Python call per record:
        read-only tools iterate whole tables (airline's flight searches), and
        every Python call in a tool is traced under the CPU limit.
        """
        if self.writable:
            return super().values()
        return self._read_view().values()

    def items(self) -> ItemsView[str, Any]:
        """The (key, record) pairs; read-only as :meth:`values`."""
        if self.writable:
            return super().items()
        return self._read_view().items()

    def _read_view(self) -> Mapping[str, Any]:
        """This episode's view as a plain dict, to be read only: the base itself when unchanged.

        Same keys, order and records as iterating and indexing the table read-only:
        base keys not deleted (an own record in its base key's place), then keys
        the episode added.
        """
        if not self.own and not self.deleted:
            return self._base
        view = dict(self._base)
        view.update(self.own)
        for key in self.deleted:
            del view[key]
        return view

    def base_record(self, key: str) -> Any:
        """The shared base record of ``key`` (never to be mutated), or None when the base has none."""
        return self._base.get(key)

    def changed_keys(self) -> set[str]:
        """Keys whose record may differ from the base (cloned, added or deleted)."""
        return set(self.own) | self.deleted


class EpisodeData(dict):
    """The data one episode's tools run against: table name -> :class:`CowTable`.

    A plain dict at the top level (``data["users"]`` works as tools expect);
    build it with :meth:`fork`, never by copying.
    """

    @classmethod
    def fork(cls, base: Mapping[str, Mapping[str, Any]]) -> EpisodeData:
        """Return fresh episode data over ``base`` (O(number of tables), no copy).

        ``base`` must map table names to dicts of records.
        """
        return cls((name, CowTable(table)) for name, table in base.items())

    @contextmanager
    def read_only(self) -> Iterator[EpisodeData]:
        """Within the block, reads return base records without cloning them.

        Use only around code that does not mutate what it reads.
        """
        tables = list(self.values())
        for table in tables:
            table.writable = False
        try:
            yield self
        finally:
            for table in tables:
                table.writable = True

    def materialize(self) -> dict[str, dict[str, Any]]:
        """Return a plain dict of dicts with this episode's view (records shared)."""
        with self.read_only():
            return {name: dict(table.items()) for name, table in self.items()}

    def own_records(self) -> int:
        """Number of records this episode holds privately."""
        return sum(len(table.own) for table in self.values())
