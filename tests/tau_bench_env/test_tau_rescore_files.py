"""``tau-bench-env rescore`` on files that are not good results files: no traceback, exit 2.

Each bad file (nested past the parser's depth, truncated, empty, not UTF-8,
over the size cap, values of the wrong type anywhere) ends in a one-line
error on stderr that names the file, with exit status 2; nothing on stdout.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tau_helpers import SAMPLES

from tau_bench_env.cli.main import main

TAU_BENCH_FILE = SAMPLES / "airline_results.json"
TAU2_FILE = SAMPLES / "tau2_airline_results.json"


def refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """stderr of a rescore that must exit 2 with one line naming the file (``args[0]``)."""
    assert main(["rescore", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(f"tau-bench-env: error: {args[0]}")
    return captured.err


def test_nested_200000_levels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    err = refused([str(path), "--domain", "airline"], capsys)
    assert "nested deeper than the parser allows" in err


@pytest.mark.parametrize("source", [TAU_BENCH_FILE, TAU2_FILE])
@pytest.mark.parametrize("keep", [0.5, 0.999])
def test_truncated_file_is_named_truncated(
    source: Path, keep: float, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = source.read_text()
    path = tmp_path / "cut.json"
    path.write_text(text[: int(len(text) * keep)])
    err = refused([str(path), "--domain", "airline"], capsys)
    assert "the file is truncated" in err and "write or copy it again" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "the file is empty"),
        (b"  \n", "the file is empty"),
        (b'["\xff\xfe"]', "not UTF-8 text (byte 2)"),
        (b'[{"task_id": 0,, }]', "not valid JSON: Expecting property name"),
        (b"[] []", "not valid JSON: Extra data at line 1 column 4"),
    ],
)
def test_unreadable_file(
    content: bytes, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    assert message in refused([str(path), "--domain", "airline"], capsys)


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rescore", str(tmp_path / "none.json"), "--domain", "airline"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'none.json'}: no such file" in err  # one line, no raw [Errno 2]
    assert "Errno" not in err


def test_size_cap_is_checked_before_parsing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 0.04 MiB: the 41 KiB tau2 sample is over it; the error says how far to raise it
    path = tmp_path / "big.json"
    path.write_bytes(TAU2_FILE.read_bytes())
    err = refused([str(path), "--max-file-mib", "0.01"], capsys)
    assert "over the 0.01 MiB cap on results files; pass --max-file-mib 1 to read it" in err
    assert main(["rescore", str(path), "--max-file-mib", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 9
    # past the cap nothing is parsed: a file of garbage says it is too big, not malformed
    path.write_bytes(b"x" * 20_000)
    assert "over the 0.01 MiB cap" in refused([str(path), "--max-file-mib", "0.01"], capsys)


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _nodes(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _nodes(child, (*path, index))


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    parent = copy
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = new
    return copy


def _deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


WRONG_VALUES: list[Any] = [None, 0, -1, 2.5, True, "x", "", [], {}, [1, "a"], {"a": 1}, _deep(900)]


@pytest.mark.parametrize(
    ("source", "args"), [(TAU_BENCH_FILE, ["--domain", "airline"]), (TAU2_FILE, [])]
)
def test_values_of_the_wrong_type_anywhere(
    source: Path, args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 120 files, each with one value anywhere replaced by one of another type: each is
    # scored (exit 0) or refused in one error naming the file (exit 2), never a traceback
    original = json.loads(source.read_text())
    nodes = list(_nodes(original))
    pick = random.Random(23)
    path = tmp_path / "typed.json"
    outcomes = []
    for _ in range(120):
        node, new = pick.choice(nodes), pick.choice(WRONG_VALUES)
        path.write_text(json.dumps(_replaced(original, node, new)))
        status = main(["rescore", str(path), *args, "--json"])
        captured = capsys.readouterr()
        assert status in (0, 2), (node, new)
        if status == 2:
            assert captured.err.startswith(f"tau-bench-env: error: {path}"), (node, captured.err)
            assert "Traceback" not in captured.err
        outcomes.append(status)
    assert 0 in outcomes and 2 in outcomes
