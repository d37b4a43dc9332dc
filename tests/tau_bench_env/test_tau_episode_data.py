"""Copy-on-write episode data: the shared base is never mutated."""

from __future__ import annotations

import pytest

from tau_bench_env.backends import load_domain
from tau_bench_env.data_model.episode_data import EpisodeData, clone
from tau_bench_env.data_model.hashing import data_hash


def _base() -> dict:
    return {"users": {"a": {"cards": [1]}, "b": {"cards": []}}}


def test_write_mode_clones_on_access() -> None:
    base = _base()
    data = EpisodeData.fork(base)
    data["users"]["a"]["cards"].append(2)
    assert base["users"]["a"]["cards"] == [1]
    assert data["users"]["a"]["cards"] == [1, 2]
    assert data.own_records() == 1


def test_read_only_mode_shares_records() -> None:
    base = _base()
    data = EpisodeData.fork(base)
    with data.read_only():
        assert data["users"]["a"] is base["users"]["a"]
    assert data.own_records() == 0
    assert data["users"]["a"] is not base["users"]["a"]  # writable again after the block


@pytest.mark.parametrize(
    ("edit", "keys", "length"),
    [
        (lambda t: t.__delitem__("a"), ["b"], 1),  # delete a base record
        (lambda t: t.__setitem__("c", {}), ["a", "b", "c"], 3),  # add a record
        (lambda t: (t.__setitem__("c", {}), t.__delitem__("c")), ["a", "b"], 2),  # add then delete
        (
            lambda t: (t.__delitem__("a"), t.__setitem__("a", {})),
            ["a", "b"],
            2,
        ),  # delete then re-add (base order kept)
    ],
)
def test_mapping_protocol(edit, keys: list[str], length: int) -> None:
    data = EpisodeData.fork(_base())
    edit(data["users"])
    assert list(data["users"]) == keys
    assert len(data["users"]) == length
    assert all(key in data["users"] for key in keys)


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: None,  # unchanged: the base's own views
        lambda t: t.__delitem__("a"),
        lambda t: t.__setitem__("c", {"cards": [3]}),
        lambda t: t["b"]["cards"].append(5),  # a cloned record in its base key's place
        lambda t: (t.__delitem__("a"), t.__setitem__("a", {"new": 1}), t.__setitem__("0", {})),
    ],
)
def test_read_only_views_equal_indexing_each_key(edit) -> None:
    # keys/values/items read-only come from a plain dict: same order and records
    # as iterating and indexing the table
    base = _base()
    data = EpisodeData.fork(base)
    table = data["users"]
    edit(table)
    own = dict(table.own)
    with data.read_only():
        expected = [(key, table[key]) for key in table]
        assert list(table.keys()) == [key for key, _ in expected]
        assert [id(v) for v in table.values()] == [id(v) for _, v in expected]
        assert [(k, id(v)) for k, v in table.items()] == [(k, id(v)) for k, v in expected]
    assert table.own == own  # reading cloned nothing
    assert base == _base()
    assert [id(v) for v in table.values()] == [id(table[key]) for key in table]  # writable: cloned


def test_deleting_a_missing_key_raises() -> None:
    data = EpisodeData.fork(_base())
    del data["users"]["a"]
    with pytest.raises(KeyError):
        del data["users"]["a"]
    with pytest.raises(KeyError):
        data["users"]["a"]


def test_clone_is_deep() -> None:
    value = {"a": [{"b": {1, 2}}]}
    copied = clone(value)
    copied["a"][0]["b"].add(3)
    assert value == {"a": [{"b": {1, 2}}]}


@pytest.mark.parametrize("domain_name", ["retail", "airline"])
def test_base_untouched_after_every_task(domain_name: str) -> None:
    # runs every ground-truth action of every task, read-only tools included
    domain = load_domain("tau2", domain_name)
    before = data_hash(domain.base_data)
    for task in domain.tasks("base"):
        data = domain.fresh_data()
        for action in task.actions:
            if action.name in domain.tools:
                try:
                    domain.run_tool(data, action.name, action.kwargs)
                except (ValueError, KeyError, TypeError):
                    pass
    assert data_hash(domain.base_data) == before
