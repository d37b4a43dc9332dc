"""tau-bench's hash: exact conversion, and incremental digests equal to the full computation."""

from __future__ import annotations

import random
from hashlib import sha256
from typing import Any

import pytest

from tau_bench_env.backends import load_domain
from tau_bench_env.data_model.episode_data import EpisodeData
from tau_bench_env.data_model.hashing import (
    CHECKPOINT_EVERY,
    HashIndex,
    HashMemo,
    UnhashableDataError,
    data_hash,
    to_hashable,
)
from tau_bench_env.episode.episode import Episode


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b": 1, "a": 2}, (("a", 2), ("b", 1))),  # dict -> pairs sorted by key
        ([3, 1], (3, 1)),  # list keeps order
        ({3, 1, 2}, (1, 2, 3)),  # set -> sorted tuple
        ({"x": [{"z": None, "y": True}]}, (("x", ((("y", True), ("z", None)),)),)),  # nesting
        (1.0, 1.0),  # scalars unchanged
        ("é", "é"),
    ],
)
def test_to_hashable(value: Any, expected: Any) -> None:
    assert to_hashable(value) == expected


def test_data_hash_is_sha256_of_str() -> None:
    data = {"t": {"k": [1, 2.5, "s"]}}
    assert data_hash(data) == sha256(str(to_hashable(data)).encode("utf-8")).hexdigest()
    assert data_hash({"a": 1}) != data_hash({"a": 1.0})  # int and float differ, as in tau-bench


def _json_like(rng: random.Random, depth: int) -> Any:
    if depth > 4 or rng.random() < 0.4:
        return rng.choice([0, 1, 1.0, 0.0, -0.0, True, False, None, "a", "b'\"", "é\n", "", 10**20])
    if rng.random() < 0.5:
        return {
            rng.choice("abcde'\" "): _json_like(rng, depth + 1) for _ in range(rng.randrange(4))
        }
    return [_json_like(rng, depth + 1) for _ in range(rng.randrange(4))]


@pytest.mark.parametrize("depth", [0, 1, 2, 3, 5])
def test_hash_memo_equals_data_hash(depth: int) -> None:
    """The memo's digest is data_hash's, on first sight and from memory; values equal in
    Python but not in text (1, 1.0, True; 0.0 and -0.0) never share a memo entry."""
    rng = random.Random(depth)
    memo = HashMemo(depth=depth, limit=64)
    for _ in range(2000):
        data = {key: _json_like(rng, 1) for key in rng.sample("xyz", rng.randrange(3))}
        assert memo.digest(data) == data_hash(data)
        assert memo.digest(data) == data_hash(data)
    for a, b in [(1, 1.0), (1, True), (0.0, -0.0), (0, False)]:
        first = {"db": {"t": [{"v": a}]}}
        second = {"db": {"t": [{"v": b}]}}
        assert memo.digest(first) == data_hash(first) != memo.digest(second) == data_hash(second)


def test_hash_memo_holds_a_bounded_number_of_bytes() -> None:
    """A new state every episode (a training run) never grows the memo past its byte bound,
    with keys as large as a database's pickle; digests stay data_hash's throughout."""
    memo = HashMemo(max_bytes=200_000)
    big = {f"r{i}": {"name": "x" * 200, "n": i} for i in range(200)}  # a pickle of ~50 kB
    peak = 0
    for episode in range(40):
        data = {"db": {"t": [big, {"episode": episode}]}, "u": {}}
        assert memo.digest(data) == data_hash(data)
        assert memo.keyed_digest(str(data).encode(), lambda d=data: str(to_hashable(d))) == (
            data_hash(data)
        )
        peak = max(peak, memo.stored_bytes())
    assert 100_000 < peak <= 4 * 200_000
    assert HashMemo(max_bytes=10).digest(big) == data_hash(big)  # an entry past the bound: none


def test_hash_memo_too_deep_is_unhashable() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(UnhashableDataError):
        HashMemo().digest({"x": deep})


BASE = {
    "orders": {f"#W{i}": {"id": i, "items": [i, i + 1], "status": "pending"} for i in range(5)},
    "users": {"u1": {"name": "Ann", "tags": {"b", "a"}}},
    "empty": {},
}


def _edit(data: EpisodeData, op: str) -> None:
    orders, users, empty = data["orders"], data["users"], data["empty"]
    if op == "modify first":
        orders["#W0"]["status"] = "cancelled"
    elif op == "modify middle":
        orders["#W2"]["items"].append(9)
    elif op == "modify last":
        orders["#W4"]["id"] = 4.0
    elif op == "read only":
        assert orders["#W1"]["id"] == 1
    elif op == "add before all":
        orders["#A"] = {"id": -1}
    elif op == "add in middle":
        orders["#W2a"] = {"id": 2.5}
    elif op == "add after all":
        orders["#Z"] = {"id": 99}
    elif op == "delete first":
        del orders["#W0"]
    elif op == "delete last":
        del orders["#W4"]
    elif op == "delete then re-add":
        del orders["#W3"]
        orders["#W3"] = {"id": "new"}
    elif op == "only record deleted":
        del users["u1"]
    elif op == "only record replaced":
        users["u1"] = {"name": "Bob"}
    elif op == "empty table gets one":
        empty["k"] = {"v": "é"}
    elif op == "empty table gets two":
        empty["k"] = 1
        empty["j"] = [2]
    elif op == "everything":
        for key in list(orders):
            del orders[key]
    else:
        raise AssertionError(op)


OPS = [
    "modify first",
    "modify middle",
    "modify last",
    "read only",
    "add before all",
    "add in middle",
    "add after all",
    "delete first",
    "delete last",
    "delete then re-add",
    "only record deleted",
    "only record replaced",
    "empty table gets one",
    "empty table gets two",
    "everything",
]


@pytest.mark.parametrize("ops", [[], *([op] for op in OPS), OPS[:6], OPS[6:12]])
def test_incremental_digest_equals_full_computation(ops: list[str]) -> None:
    index = HashIndex(BASE)
    data = EpisodeData.fork(BASE)
    for op in ops:
        _edit(data, op)
    assert index.digest(data) == data_hash(data.materialize())


def _boundary_base(size: int) -> dict[str, Any]:
    step = CHECKPOINT_EVERY
    return {
        "a_first": {f"k{i:04d}": {"i": i} for i in range(3)},
        "m_long": {f"k{i:04d}": {"i": i, "l": [i]} for i in range(size)},
        "z_last": {f"k{i:04d}": {"i": i} for i in range(step + 1)},
    }


@pytest.mark.parametrize("size", [2 * CHECKPOINT_EVERY, 2 * CHECKPOINT_EVERY + 1])
def test_incremental_digest_around_saved_states(size: int) -> None:
    # the digest resumes from the saved state before the first record whose text
    # differs: change, add and delete records at and around every saved state,
    # and clone records without changing them
    base = _boundary_base(size)
    index = HashIndex(base)
    step = CHECKPOINT_EVERY
    positions = sorted({0, 1, step - 1, step, step + 1, 2 * step - 1, 2 * step, size - 1, size})
    for position in positions:
        key = f"k{position:04d}"
        ops = ("modify", "delete", "add", "add after", "modify later table too", "read", "read all")
        for op in ops:
            data = EpisodeData.fork(base)
            table = data["m_long"]
            if key not in base["m_long"] and op != "add after":
                continue
            if op == "modify":
                table[key]["i"] = -1
            elif op == "delete":
                del table[key]
            elif op == "add":
                table[key + "x"] = {"new": position}
            elif op == "add after":
                table[f"k{position:04d}z"] = {"new": position}
            elif op == "modify later table too":
                table[key]["l"].append(0)
                data["z_last"]["k0000"]["i"] = 0.0
            elif op == "read":  # cloned, unchanged; then a later record changes type only
                assert table[key]["i"] == position
                data["z_last"][f"k{step:04d}"]["i"] = float(step)
            else:  # every record cloned, one changed
                assert [record["i"] for record in table.values()] == list(range(size))
                table[key]["l"] = (position,)
            assert index.digest(data) == data_hash(data.materialize()), (position, op)
    only_first = EpisodeData.fork(base)
    only_first["a_first"]["k0002"]["i"] = "x"
    assert index.digest(only_first) == data_hash(only_first.materialize())
    assert index.digest(EpisodeData.fork(base)) == data_hash(base)


@pytest.mark.parametrize("base", [{"only": {"a": 1}}, {"only": {}}, {}])
def test_incremental_digest_small_shapes(base: dict[str, Any]) -> None:
    # one-element tuples print with a trailing comma; empty ones as ()
    assert HashIndex(base).digest(EpisodeData.fork(base)) == data_hash(base)


def test_index_rejects_non_table_data() -> None:
    with pytest.raises(ValueError, match=r"data\['x'\]"):
        HashIndex({"x": [1, 2]})


@pytest.mark.parametrize("domain_name", ["retail", "airline"])
def test_random_edits_on_real_data(domain_name: str) -> None:
    domain = load_domain("tau2", domain_name)
    rng = random.Random(7)
    for _ in range(5):
        data = domain.fresh_data()
        for _ in range(rng.randint(1, 6)):
            table = data[rng.choice(sorted(data))]
            key = rng.choice(sorted(table))
            choice = rng.random()
            if choice < 0.4:
                record = table[key]
                record[rng.choice(sorted(record))] = rng.choice([0, 0.0, "x", None, [1]])
            elif choice < 0.7:
                del table[key]
            else:
                table[key + rng.choice(["", "_new", "0"])] = {"copied": key}
        assert domain.hash_index.digest(data) == data_hash(data.materialize())


@pytest.mark.parametrize("domain_name", ["retail", "airline"])
def test_ground_truth_end_states_hash_like_full_computation(domain_name: str) -> None:
    domain = load_domain("tau2", domain_name)
    for task in domain.tasks("test")[::3]:  # every third task keeps the suite fast
        episode = Episode(domain, task)
        for action in task.actions:
            episode.call_tool(action.name, action.kwargs)
        assert episode.data_hash() == data_hash(episode.data.materialize())


def test_live_digest_is_data_hash_table_by_table_and_whole() -> None:
    """Live data's digest is tau-bench's hash of its dump: table by table under each table's
    JSON where the database's dump is its tables' dumps, whole under the database's JSON where
    it is not (a computed field; a table of a subclass), on new states and states seen again;
    values equal in Python but not in text never share an entry."""
    from pydantic import BaseModel, computed_field

    from tau_bench_env.backends.tau2_models import LiveData, LiveState, _tables_of, live_digest

    class Table(BaseModel):
        data: dict[str, dict[str, Any]] = {}
        notes: str = ""

    class Wider(Table):
        extra: int = 1

    class Db(BaseModel):
        b: Table = Table()
        a: Table = Table()

    class Computed(Db):
        @computed_field  # type: ignore[prop-decorator]
        @property
        def size(self) -> int:
            return len(self.a.data)

    assert _tables_of(Db) is not None and _tables_of(Computed) is None
    memo = HashMemo()
    values = [1, 1.0, True, 0.0, -0.0, None, float("nan"), "x", [1, {"k": 2}]]
    for database in (Db, Computed):
        for value in values:
            for wider in (False, True):
                state = LiveState.of(database(b=Table(data={"r": {"v": 0}})), None, memo)
                data = LiveData(state)
                data.fork()
                db = data.databases()[0]
                db.a.data["r"] = {"v": value}
                if wider:
                    db.b = Wider(data=db.b.data)
                for _ in range(2):
                    assert live_digest(data, memo) == data_hash(data.materialize()), (value, wider)
