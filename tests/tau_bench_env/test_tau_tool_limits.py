"""Bounds on tool calls: explosive calculate input, CPU budget, argument nesting, deep data."""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import threading
from typing import Any

import pytest
from tau_helpers import replay_env_config, tool_text

from tau_bench_env.backends import load_domain, tool_limits
from tau_bench_env.backends.tool_limits import (
    ToolLimitError,
    check_argument_shape,
    check_calculate,
    run_with_cpu_limit,
)
from tau_bench_env.config import env_config_from
from tau_bench_env.episode.env import TauBenchEnv
from tau_bench_env.episode.episode import Episode

SLOW_SUM = "+".join(["(9**20000)*(7**15000)"] * 2500)
"""Each term is cheap and allowed; together they take seconds (many bytecodes). Not ``//``:
Python 3.12 divides such integers in its ``_pylong`` module, which it imports on first use,
and calculate's builtins-free eval cannot import (every term is then an error at once)."""


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"city": "Paris"}
    for _ in range(depth - 1):
        value = {"inner": value}
    return value


def _env(**overrides: Any) -> TauBenchEnv:
    extras = {"task_index": 0, "user_turns": ["thanks", "###STOP###"] * 3}
    env = TauBenchEnv(replay_env_config("tau2", "retail", **overrides), extras)
    env.init([])
    return env


def _calculate(env: TauBenchEnv, expression: str) -> str:
    out = env.step(tool_text("calculate", {"expression": expression}))
    assert not out["done"]
    return out["observations"][0]["content"]


@pytest.mark.parametrize(
    "expression",
    [
        "9**9**9",  # the input: minutes of one C operation
        "2**(2**40)",  # exponent known, result far too large
        "(10**60000)*(10**60000)",  # each factor allowed, the product is not
        "-(7**7**7)",  # under a unary minus
    ],
)
def test_explosive_calculate_is_refused_before_it_runs(expression: str) -> None:
    with pytest.raises(ToolLimitError, match="was not evaluated"):
        check_calculate({"expression": expression})


@pytest.mark.parametrize(
    ("expression", "observation"),
    [
        ("2**3**2", "512.0"),  # nested powers with small exponents are exact
        ("(2 + 3) * 4", "20.0"),
        ("2**-1", "0.5"),  # negative exponent: a float
        ("1**(9**99)", "1.0"),  # base 1: any exponent is cheap
        (
            "2.5**1000000",
            "Error: (34, 'Numerical result out of range')",
        ),  # float: overflows at once
        ("9**99999", "Error: calculate: the expression would compute an integer"),
        ("1/0", "Error: division by zero"),  # the tool's own errors still come through
        ("import os", "Error: Invalid characters in expression"),
    ],
)
def test_calculate_through_the_env(expression: str, observation: str) -> None:
    env = _env()
    assert _calculate(env, expression).startswith(observation)


def test_cpu_budget_stops_a_long_calculation_and_the_episode_goes_on() -> None:
    env = _env(tool_timeout_s=0.2)
    text = _calculate(env, SLOW_SUM)
    assert text == (
        "Error: tool 'calculate' used more than 0.2 s of CPU time and was stopped (tool_timeout_s)"
    )
    assert _calculate(env, "1+1") == "2.0"
    out = env.step(tool_text("transfer_to_human_agents", {"summary": "done"}))
    assert out["done"] and out["reward"] == 0.0


def test_cpu_budget_stops_a_python_loop_and_restores_the_tracer() -> None:
    def spin() -> None:
        while True:
            pass

    def tracer(frame: Any, event: str, arg: Any) -> None:
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        with pytest.raises(ToolLimitError, match="'spin' used more than 0.05 s"):
            run_with_cpu_limit(spin, cpu_limit_s=0.05, tool="spin")
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(previous)


def test_cpu_budget_stops_loop_free_code_called_in_a_loop_of_c() -> None:
    """Code without a loop is traced at its calls only; a C loop calling it is still stopped."""

    def step(value: int) -> int:
        return value + 1

    def spin() -> int:
        return sum(map(step, itertools.count()))

    with pytest.raises(ToolLimitError, match="'spin' used more than 0.05 s"):
        run_with_cpu_limit(spin, cpu_limit_s=0.05, tool="spin")


def test_domain_code_catching_exception_cannot_swallow_the_stop() -> None:
    def stubborn() -> str:
        while True:
            try:
                sum(range(1000))
            except Exception:  # noqa: BLE001 - what a tool might do
                return "swallowed"

    with pytest.raises(ToolLimitError):
        run_with_cpu_limit(stubborn, cpu_limit_s=0.05, tool="stubborn")


@pytest.mark.parametrize(
    ("arguments", "refused"),
    [
        ({"payment": [{"id": "x", "amount": 1}]}, False),  # the deepest shape real tools take
        ({"address": _nested(15)}, False),
        ({"address": _nested(16)}, True),
        ({"address": _nested(495)}, True),  # the input
        ({"items": [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]}, True),
    ],
)
def test_argument_nesting(arguments: dict[str, Any], refused: bool) -> None:
    if refused:
        with pytest.raises(ToolLimitError, match="nested deeper than 16 levels"):
            check_argument_shape(arguments)
    else:
        check_argument_shape(arguments)


def test_deeply_nested_address_is_refused_and_the_episode_ends_normally() -> None:
    env = _env()
    user_id = env.task.user_id or "mia_li_3668"
    arguments = {
        "user_id": user_id,
        "address1": _nested(495),
        "address2": "",
        "city": "Paris",
        "country": "FR",
        "state": "",
        "zip": "75001",
    }
    out = env.step(
        "<tool_call>"
        + json.dumps({"name": "modify_user_address", "arguments": arguments})
        + "</tool_call>"
    )
    assert out["observations"][0]["content"] == (
        "Error: tool arguments are nested deeper than 16 levels"
    )
    out = env.step(tool_text("transfer_to_human_agents", {"summary": "done"}))
    assert out["done"] and out["reward"] == 0.0


def test_data_too_deep_to_hash_fails_the_data_check_instead_of_raising() -> None:
    domain = load_domain("tau2", "retail")
    episode = Episode(domain, domain.tasks("test")[0])
    user_id = next(iter(episode.data["users"]))
    episode.data["users"][user_id]["address"] = _nested(5000)
    assert episode.data_hash().startswith("unhashable: record")
    result = episode.score()
    assert result.reward == 0.0 and "data_hash" in result.failed


@pytest.mark.parametrize("value", [0, -1.0, float("inf"), "3", True])
def test_tool_timeout_is_validated(value: Any) -> None:
    with pytest.raises(ValueError, match="tool_timeout_s"):
        env_config_from({"tool_timeout_s": value})


def test_cpu_budget_stops_a_generator_driven_by_c() -> None:
    """A generator resumed by a C loop (``yield from`` a C iterator: no call, no loop of its
    own) is still stopped: its resumptions count."""

    def numbers() -> Any:
        yield from itertools.count()

    with pytest.raises(ToolLimitError, match="'spin' used more than 0.05 s"):
        run_with_cpu_limit(lambda: sum(numbers()), cpu_limit_s=0.05, tool="spin")


@pytest.mark.skipif(sys.version_info[:2] != (3, 12), reason="sys.monitoring is used on 3.12")
def test_cpu_budget_uses_sys_monitoring_on_312() -> None:
    assert tool_limits._monitor() is not None


def test_cpu_budget_is_per_thread() -> None:
    """Concurrent calls in two threads each get their own budget: one stopped while the other
    runs on; a call that ends while another thread's call spins leaves it watched; a thread
    outside any call is never stopped."""
    results: dict[str, Any] = {}

    def spin() -> None:
        while True:
            pass

    def bounded() -> int:
        total = 0
        for number in range(300_000):
            total += number
        return total

    def call(name: str, work: Any, limit: float) -> None:
        try:
            results[name] = run_with_cpu_limit(work, cpu_limit_s=limit, tool=name)
        except ToolLimitError as error:
            results[name] = error

    spinning = threading.Thread(target=call, args=("spin", spin, 0.3))
    spinning.start()
    short = [threading.Thread(target=call, args=(f"short{i}", bounded, 30.0)) for i in range(3)]
    plain = threading.Thread(target=lambda: results.setdefault("plain", bounded()))
    for thread in (*short, plain):
        thread.start()
    for thread in (*short, plain, spinning):
        thread.join(timeout=60)
        assert not thread.is_alive()
    assert isinstance(results["spin"], ToolLimitError)
    assert [results[f"short{i}"] for i in range(3)] == [sum(range(300_000))] * 3
    assert results["plain"] == sum(range(300_000))


@pytest.mark.skipif(sys.version_info[:2] != (3, 12), reason="sys.monitoring is used on 3.12")
def test_cpu_budget_stops_a_loop_in_a_finally_after_the_stop() -> None:
    """Code the tool runs while the stop unwinds it (a ``finally`` that loops) is stopped
    too: the budget keeps counting after its first stop. (A trace function is unset by
    CPython once it raises, so before 3.12 such a ``finally`` runs unwatched.)"""

    def spin() -> None:
        while True:
            pass

    def spin_then_spin_again() -> None:
        try:
            spin()
        finally:
            spin()

    with pytest.raises(ToolLimitError, match="'spin' used more than 0.05 s"):
        run_with_cpu_limit(spin_then_spin_again, cpu_limit_s=0.05, tool="spin")


@pytest.mark.skipif(sys.version_info[:2] != (3, 12), reason="sys.monitoring is used on 3.12")
def test_cpu_budget_leaves_no_events_on_code_run_by_eval() -> None:
    """Code run by ``eval`` is watched instruction by instruction during a call only:
    dataclasses' generated ``__init__`` (also ``<string>`` code) is not left watched for the
    rest of the process, in this thread or any other."""

    @dataclasses.dataclass
    class Point:
        x: int

    def tool() -> Any:
        return Point(1), eval("[n for n in range(3)]")

    assert run_with_cpu_limit(tool, cpu_limit_s=1.0, tool="t") == (Point(1), [0, 1, 2])
    monitor = tool_limits._monitor()
    assert monitor is not None
    init = Point.__init__.__code__
    assert init.co_filename == "<string>"
    assert sys.monitoring.get_local_events(monitor._tool_id, init) == 0
    assert sys.monitoring.get_events(monitor._tool_id) == 0


@pytest.mark.skipif(sys.version_info[:2] != (3, 12), reason="sys.monitoring is used on 3.12")
def test_cpu_budget_after_its_events_failed_to_switch_on() -> None:
    """A call whose events cannot be switched on (another tool freed the id) raises and
    leaves nothing behind: once the id is back, the next call is watched again (a stale
    count of running calls kept the events off for good, every later call unbounded)."""
    monitor = tool_limits._monitor()
    assert monitor is not None
    sys.monitoring.free_tool_id(monitor._tool_id)
    try:
        with pytest.raises(ValueError, match="not in use"):
            run_with_cpu_limit(lambda: 1, cpu_limit_s=1.0, tool="t")
    finally:
        sys.monitoring.use_tool_id(monitor._tool_id, "tau_bench_env")

    def spin() -> None:
        while True:
            pass

    with pytest.raises(ToolLimitError, match="'spin' used more than 0.05 s"):
        run_with_cpu_limit(spin, cpu_limit_s=0.05, tool="spin")
