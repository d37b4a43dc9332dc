"""Faults on a real local Ray with the real reward functions: hangs, killed workers, recycling.

Every test checks the pool's promise: each item gets exactly one result, in
order, and what went wrong is recorded on the item and counted.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from back_to_back import BackToBack
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from skyrl_rewards.pool.replay_log import read_replay_log
from skyrl_rewards.pool.reward_pool import PoolClosedError, RewardPool
from skyrl_rewards.rewards.contract.result import RewardResult
from skyrl_rewards.rewards.mix import RewardMix
from skyrl_rewards.rewards.text.math_screen import too_complex

pytestmark = pytest.mark.slow

# Each makes SymPy compute a giant number inside C ((10^10 - 1)!, 7^99980001, 7^10^8): far
# longer than any limit. The accuracy reward's pre-screen refuses more of them as it learns; the
# first one it lets through is the hang. By default a worker's math child stops it on CPU time;
# with ``math_guard: inline`` (INLINE below) it hangs the worker itself, the way a hang in any
# other reward would, and only the pool's outer deadline can stop it.
HANG_ANSWERS = [
    "$\\Gamma(10^{10})$",
    "\\boxed{7^{\\frac{199960002}{2}}}",
    "\\boxed{7^{\\sqrt{10000000000000000}}}",
]
HANG_ANSWER = next((a for a in HANG_ANSWERS if not too_complex(a)), None)
HANG = {
    "completion": f"<think>t</think><answer>{HANG_ANSWER}</answer>",
    "solution": "<answer>1</answer>",
}
INLINE = {"math_guard": "inline"}
# Tests that wait for a slow-lane math limit to run out let its children compete evenly: at
# niceness 19 next to two CPU burners 5 s of CPU took 141 s and 7.5 s took 277 s, near the
# pool's 300 s wall-clock net of a slow-lane task (test_math_check covers the niceness itself).
EVEN = {"slow_lane_niceness": 0}
# The per-item latency view (a first pass; off by default): slow math checks are deferred.
LATENCY = {"first_pass_s": 0.1}
needs_hang = pytest.mark.skipif(
    HANG_ANSWER is None, reason="the math pre-screen refuses every known hanging answer"
)


WORKER_START_S = 240.0
"""Time a new worker may take to start: seconds on a quiet machine, 35-50 s next to four CPU
burners (a Ray worker process starts at niceness 15)."""


def numbers(count: int, start: int = 0) -> list[dict]:
    """Distinct integer answers: even i right (accuracy 1.0), odd i wrong (0.0)."""
    return [
        {
            "completion": f"<think>t</think><answer>{i}</answer>",
            "solution": f"<answer>{i if i % 2 == 0 else i + 1}</answer>",
        }
        for i in range(start, start + count)
    ]


def fractions(count: int, start: int = 0) -> list[dict]:
    """Distinct LaTeX answers (math-verify costs milliseconds each): even i right, odd i wrong."""
    return [
        {
            "completion": f"<think>t</think><answer>$\\frac{{{i}}}{{{i + 1}}}$</answer>",
            "solution": f"<answer>$\\frac{{{i}}}{{{i + 1 + i % 2}}}$</answer>",
        }
        for i in range(start, start + count)
    ]


def in_process(rewards: dict, samples: list[dict]) -> list[dict]:
    """Components and statuses the same mix gives in this process."""
    mix = RewardMix.from_config(rewards)
    return [{"components": r.components, "status": r.status} for r in map(mix.score, samples)]


def expected_accuracy(samples: list[dict]) -> list[float]:
    return [
        1.0 if int(s["completion"].split("<answer>")[1].split("<")[0]) % 2 == 0 else 0.0
        for s in samples
    ]


def wait_until(condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def score_in_background(pool: RewardPool, samples: list[dict]) -> tuple[threading.Thread, list]:
    out: list[list[RewardResult]] = []
    thread = threading.Thread(target=lambda: out.append(pool.score(samples)))
    thread.start()
    return thread, out


def busy_worker_pid(pool: RewardPool) -> int:
    busy = [w for w in pool.metrics()["workers"] if w["in_flight"] > 0]
    return busy[0]["pid"] if busy else 0


def wait_for_busy_worker(pool: RewardPool, timeout_s: float = 60) -> int:
    """The pid of a worker with tasks in flight, read once (never 0: ``os.kill(0)`` kills us)."""
    deadline = time.monotonic() + timeout_s
    while not (pid := busy_worker_pid(pool)):
        assert time.monotonic() < deadline, "no worker had tasks in flight in time"
        time.sleep(0.02)
    return pid


def assert_math_limit_hit(result: RewardResult) -> None:
    """``result`` ended at accuracy's math limit: a timeout that names the CPU time."""
    assert result.status == {"accuracy": "timeout"}, result.status
    assert "CPU time" in result.errors["accuracy"], result.errors


@needs_hang
def test_hung_worker_is_killed_and_the_rest_of_its_batch_is_not_held(
    ray_local: None, tmp_path: Path
) -> None:
    # 8 s: the bound "one limit, not two" below then leaves 8 s for the rest of the batch and
    # the scheduler, however loaded the machine; a second limit would take it past 16 s
    timeout_s = 8.0
    replay = tmp_path / "replay.jsonl"
    rewards = {"accuracy": {"weight": 1.0, **INLINE}, "format": {"weight": 0.5}}
    cfg = {
        "name": "test_pool_hang",
        "rewards": rewards,
        "timeout_s": timeout_s,
        "replay_path": str(replay),
    }
    with RewardPool.from_config(cfg) as pool:
        pool.score(fractions(20, start=1000))  # warm both workers up
        pids_before = {w["pid"] for w in pool.metrics()["workers"]}
        batch = fractions(10) + [HANG] + fractions(10, start=10)
        started = time.monotonic()
        results = pool.score(batch)
        elapsed_s = time.monotonic() - started

        hung = results[10]
        assert hung.status == {"accuracy": "timeout", "format": "ok"}
        assert hung.components == {"accuracy": 0.0, "format": 1.0} and hung.should_mask
        assert "timeout_s=8" in hung.errors["accuracy"]
        others = results[:10] + results[11:]
        assert [{"components": r.components, "status": r.status} for r in others] == in_process(
            {**rewards, "accuracy": {"math_guard": "inline"}}, batch[:10] + batch[11:]
        )
        # one limit, not two: the hang was pinned on its first run, the rest re-queued at once
        assert timeout_s <= elapsed_s < 2 * timeout_s
        assert max(r.latency_s for r in others) < timeout_s + 2.0

        metrics = pool.metrics()
        assert (metrics["timeouts"], metrics["worker_restarts"], metrics["isolations"]) == (1, 1, 0)
        # one worker replaced (its successor may still be loading: scoring did not wait for it;
        # a worker start took 35-50 s next to four CPU burners)
        wait_until(
            lambda: len(pids_before & {w["pid"] for w in pool.metrics()["workers"]}) == 1,
            timeout_s=WORKER_START_S,
        )
        events = read_replay_log(replay)
        assert [(e["kind"], e["component"]) for e in events] == [("timeout", "accuracy")]
        assert events[0]["sample"]["completion"] == HANG["completion"]

        # seen again: answered as a timeout at once, no worker burnt (running the hang again
        # would take the whole limit; the two numbers take milliseconds)
        started = time.monotonic()
        again = pool.score([HANG, *numbers(2, start=500)])
        assert time.monotonic() - started < timeout_s
        assert again[0].status["accuracy"] == "timeout" and "before" in again[0].errors["accuracy"]
        assert again[1].ok and again[2].ok
        metrics = pool.metrics()
        assert (metrics["remembered_timeouts"], metrics["worker_restarts"]) == (1, 1)


@needs_hang
def test_hang_among_cheap_work_is_pinned_by_a_one_by_one_rerun(ray_local: None) -> None:
    # fence_min_s above the cost of accuracy: the worker reports accuracy in groups, so the
    # first stall cannot tell which task of the group hangs
    timeout_s = 3.0
    cfg = {
        "name": "test_pool_isolate",
        "rewards": {"accuracy": INLINE},
        "num_workers": 1,
        "timeout_s": timeout_s,
        "progress_interval_s": 1.0,
        "fence_min_s": 1.0,
    }
    with RewardPool.from_config(cfg) as pool:
        pool.score(numbers(30, start=2000))  # the worker learns that accuracy is cheap
        # The hang opens the call, so no progress message can come between the call's first
        # one and the hang: cheap tasks before it that took past progress_interval_s on a
        # loaded machine would be reported and pin the hang at once. The pool sees the same
        # stall either way: nothing of the call reported, no task fenced.
        batch = [HANG, *numbers(6)]
        started = time.monotonic()
        results = pool.score(batch)
        elapsed_s = time.monotonic() - started
        assert [r.status["accuracy"] for r in results] == ["timeout"] + ["ok"] * 6
        assert [r.components["accuracy"] for r in results[1:]] == expected_accuracy(batch[1:])
        assert elapsed_s >= 2 * timeout_s  # the price of a hang that could not be pinned at once
        metrics = pool.metrics()
        assert metrics["timeouts"] == 1 and metrics["isolations"] >= 2
        assert metrics["worker_restarts"] == 2


@needs_hang
def test_math_hang_costs_one_math_limit_in_a_child_and_holds_nothing(ray_local: None) -> None:
    rewards = {"accuracy": {"weight": 1.0, "math_timeout_s": 2}, "format": {"weight": 0.5}}
    cfg = {"name": "test_pool_math_hang", "rewards": rewards, "timeout_s": 60.0, **EVEN, **LATENCY}
    with RewardPool.from_config(cfg) as pool:
        pool.score(fractions(20, start=1000))  # warm both workers up
        pids_before = {w["pid"] for w in pool.metrics()["workers"]}
        batch = fractions(10) + [HANG] + fractions(10, start=10)
        results = pool.score(batch)

        hung = results[10]
        assert hung.status == {"accuracy": "timeout", "format": "ok"} and hung.should_mask
        assert "CPU time" in hung.errors["accuracy"]
        others = results[:10] + results[11:]
        assert [{"components": r.components, "status": r.status} for r in others] == in_process(
            {**rewards, "accuracy": INLINE}, batch[:10] + batch[11:]
        )
        # deferred after the first pass: everything else was scored before it was tried again
        assert max(r.latency_s for r in others) < hung.latency_s
        metrics = pool.metrics()
        assert metrics["deferred"] == 1
        assert (metrics["timeouts"], metrics["worker_restarts"], metrics["isolations"]) == (0, 0, 0)
        assert {w["pid"] for w in pool.metrics()["workers"]} == pids_before

        again = pool.score([HANG])  # seen again: answered from the work cache, no worker call
        assert again[0].status["accuracy"] == "timeout"
        after = pool.metrics()
        assert after["worker_calls"] == metrics["worker_calls"]
        assert after["cache_hits"] == metrics["cache_hits"] + 1


@needs_hang
def test_the_slow_lane_runs_beside_ordinary_work_on_a_single_worker(ray_local: None) -> None:
    rewards = {"accuracy": {"weight": 1.0, "math_timeout_s": 4}}
    cfg = {"name": "test_pool_slow_lane", "rewards": rewards, "num_workers": 1, **EVEN, **LATENCY}
    with RewardPool.from_config(cfg) as pool:
        pool.score(fractions(10, start=1000))  # warm up
        hang_thread, hang_out = score_in_background(pool, [HANG])
        wait_until(lambda: pool.metrics()["deferred"] == 1, timeout_s=60)
        ordinary = fractions(40)
        started = time.monotonic()
        results = pool.score(ordinary)  # the only worker's slow lane is busy with the hang
        ordinary_s = time.monotonic() - started
        assert hang_thread.is_alive(), "the ordinary batch waited for the slow check"
        assert [r.components for r in results] == [
            r["components"] for r in in_process({"accuracy": INLINE}, ordinary)
        ]
        # the hang's 5 s of CPU on a loaded machine (141 s at niceness 19 next to two CPU
        # burners); past the pool's slow_lane_timeout_s (300 s) it ends with another error
        hang_thread.join(timeout=400)
        (hung,) = hang_out[0]
        assert_math_limit_hit(hung)
        assert hung.latency_s > ordinary_s
        metrics = pool.metrics()
        assert (metrics["timeouts"], metrics["worker_restarts"]) == (0, 0)


@needs_hang
def test_a_slowish_real_answer_is_not_queued_behind_a_hang_in_the_slow_lane(
    ray_local: None,
) -> None:
    n = 70  # a correct answer whose check costs about 0.4 s of CPU (SymPy expands it)
    slowish = {
        "completion": f"<answer>$1/2 + (x+1)^{{{n}}} (x-1)^{{{n}}} - (x^2-1)^{{{n}}}$</answer>",
        "solution": "<answer>$\\frac{1}{2}$</answer>",
    }
    rewards = {"accuracy": {"weight": 1.0, "math_timeout_s": 6}}
    cfg = {"name": "test_pool_second_pass", "rewards": rewards, "num_workers": 1, **EVEN, **LATENCY}
    with RewardPool.from_config(cfg) as pool:
        hung, slow = pool.score([HANG, slowish])
        assert slow.status == {"accuracy": "ok"} and slow.components["accuracy"] == 1.0
        assert_math_limit_hit(hung)
        assert slow.latency_s < hung.latency_s - 3  # not behind the hang's 6 s last pass
        metrics = pool.metrics()
        assert (metrics["deferred"], metrics["deferred_again"]) == (2, 1)
        assert metrics["second_pass_idle"] >= 1  # the idle ordinary lane took one
        assert (metrics["timeouts"], metrics["worker_restarts"]) == (0, 0)


@needs_hang
def test_by_default_a_slow_check_runs_in_the_ordinary_stream(ray_local: None) -> None:
    # the shipped defaults have no first pass: a hang costs its math limit, nothing deferred
    rewards = {"accuracy": {"weight": 1.0, "math_timeout_s": 1}}
    cfg = {"name": "test_pool_no_first_pass", "rewards": rewards}
    with RewardPool.from_config(cfg) as pool:
        (hung,) = pool.score([HANG])
        assert_math_limit_hit(hung)
        metrics = pool.metrics()
        assert (metrics["deferred"], metrics["timeouts"], metrics["worker_restarts"]) == (0, 0, 0)


@needs_hang
def test_an_idle_worker_takes_over_the_answers_queued_behind_a_hang(ray_local: None) -> None:
    # no first pass: the hang runs its math limit (4 s of CPU) in one worker's ordinary stream;
    # the 20 answers behind it in that worker's call are taken over by the other worker once it
    # is idle, so none of them waits for the hang (the batch's makespan is the hang's)
    rewards = {"accuracy": {"weight": 1.0, "math_timeout_s": 4}}
    cfg = {"name": "test_pool_take_over", "rewards": rewards, "first_pass_s": 0, "timeout_s": 120}
    with RewardPool.from_config(cfg) as pool:
        pool.score(fractions(20, start=1000))  # warm both workers up
        batch = [HANG, *fractions(41)]  # the first call: the hang and 20 answers behind it
        results = pool.score(batch)
        hung, others = results[0], results[1:]
        assert_math_limit_hit(hung)
        assert [{"components": r.components, "status": r.status} for r in others] == in_process(
            {"accuracy": {**rewards["accuracy"], **INLINE}}, batch[1:]
        )
        assert max(r.latency_s for r in others) < hung.latency_s
        metrics = pool.metrics()
        assert metrics["taken_over"] == 20
        assert (metrics["deferred"], metrics["timeouts"], metrics["worker_restarts"]) == (0, 0, 0)


@needs_hang
def test_a_math_check_past_the_wall_deadline_is_waited_on_not_killed(ray_local: None) -> None:
    # timeout_s (1 s, wall) falls before the math limit (3 s of CPU): the quiet call's worker
    # is running a math child, a check bounded on CPU time, so the pool waits for it instead of
    # killing the worker as hung; it ends as the math limit's timeout, the worker kept
    rewards = {"accuracy": {"weight": 1.0, "math_timeout_s": 3}}
    cfg = {"name": "test_pool_math_wait", "rewards": rewards, "num_workers": 1, "timeout_s": 1}
    with RewardPool.from_config(cfg) as pool:
        pid = pool.metrics()["workers"][0]["pid"]
        (hung,) = pool.score([HANG])
        assert_math_limit_hit(hung)
        metrics = pool.metrics()
        assert metrics["math_waits"] >= 2  # asked at 1 s and 2 s at least: 3 s of CPU take longer
        assert (metrics["timeouts"], metrics["worker_restarts"]) == (0, 0)
        assert metrics["workers"][0]["pid"] == pid


@needs_hang
def test_a_slow_lane_stall_kills_the_worker_without_charging_the_ordinary_lane(
    ray_local: None,
) -> None:
    # the slow lane's wall deadline (6 s) falls before the math limit (60 s of CPU)
    rewards = {"accuracy": {"weight": 1.0, "math_timeout_s": 60}}
    cfg = {
        "name": "test_pool_slow_stall",
        "rewards": rewards,
        "num_workers": 1,
        "slow_lane_timeout_s": 6.0,
        **LATENCY,
    }
    with RewardPool.from_config(cfg) as pool:
        first_pid = pool.metrics()["workers"][0]["pid"]
        hang_thread, hang_out = score_in_background(pool, [HANG])
        wait_until(lambda: pool.metrics()["deferred"] == 1, timeout_s=60)
        # Two callers score batches back to back until the stall is over, so the ordinary
        # lane has work in flight when the worker is killed, however fast the machine is.
        # Small batches (20 items: 0.1 s here, 1 s at ten times slower) so that some return
        # while the slow lane is stalled (at least 6 s), however slow the machine is.
        ordinary = BackToBack(pool, fractions, 20, observe=hang_thread.is_alive)
        hang_thread.join(timeout=120)
        ordinary.stop(timeout_s=300)
        (hung,) = hang_out[0]
        assert hung.status == {"accuracy": "timeout"}
        assert "slow_lane_timeout_s=6" in hung.errors["accuracy"]
        assert any(ordinary.observed), "no ordinary batch returned while the slow lane stalled"
        for batch, results in ordinary.scored:
            assert [r.components for r in results] == [
                r["components"] for r in in_process({"accuracy": INLINE}, batch)
            ]
            assert all(r.ok for r in results)
        metrics = pool.metrics()
        assert (metrics["timeouts"], metrics["worker_restarts"], metrics["retries"]) == (1, 1, 0)
        assert metrics["workers"][0]["pid"] != first_pid


@needs_hang
def test_a_worker_that_cannot_be_replaced_ends_the_pool_with_the_cause(
    ray_local: None, tmp_path: Path
) -> None:
    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=60, special_tokens=["[UNK]"])
    bpe.train_from_iterator(["an answer of a few words", "<think> t </think> 0 1 2"] * 20, trainer)
    folder = tmp_path / "tokenizer"
    PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="[UNK]").save_pretrained(folder)
    rewards = {"accuracy": {"weight": 1.0, **INLINE}, "length": {"tokenizer": str(folder)}}
    cfg = {
        "name": "test_pool_no_replacement",
        "rewards": rewards,
        "num_workers": 1,
        "timeout_s": 2.0,
        "start_timeout_s": WORKER_START_S,  # a failing replacement fails fast: its rewards raise
    }
    with RewardPool.from_config(cfg) as pool:
        assert pool.score(numbers(2))[0].ok
        shutil.rmtree(folder)  # a replacement worker can no longer load its rewards
        (hung,) = pool.score([HANG])  # the worker hangs, is killed, and is not replaced
        assert hung.status["accuracy"] == "timeout"
        deadline = time.monotonic() + 120
        with pytest.raises(PoolClosedError) as lost:
            while time.monotonic() < deadline:
                pool.score(numbers(1))
                time.sleep(0.2)
        message = str(lost.value)
        assert "no reward worker is left" in message and "did not start in 3 attempts" in message
        assert "ValueError: tokenizer:" in message and len(message) < 1000  # the cause, not a trace


def test_killed_worker_is_replaced_and_its_items_scored_again(ray_local: None) -> None:
    cfg = {
        "name": "test_pool_crash",
        "rewards": {"accuracy": {}},
        "timeout_s": 30.0,
        "batch_size": 256,
    }
    with RewardPool.from_config(cfg) as pool:
        samples = numbers(1600)
        thread, out = score_in_background(pool, samples)
        wait_until(lambda: pool.metrics()["items"] >= 100, timeout_s=60)
        victim = wait_for_busy_worker(pool)
        os.kill(victim, signal.SIGKILL)
        thread.join(timeout=120)
        results = out[0]
        assert len(results) == len(samples)
        assert [r.components["accuracy"] for r in results] == expected_accuracy(samples)
        assert all(r.ok for r in results)
        metrics = pool.metrics()
        assert metrics["worker_restarts"] == 1 and metrics["retries"] > 0
        wait_until(
            lambda: victim not in {w["pid"] for w in pool.metrics()["workers"]},
            timeout_s=WORKER_START_S,
        )


@needs_hang
def test_item_that_keeps_killing_workers_ends_as_an_error(ray_local: None, tmp_path: Path) -> None:
    replay = tmp_path / "replay.jsonl"
    cfg = {
        "name": "test_pool_retries",
        "rewards": {"accuracy": INLINE},
        "timeout_s": 60.0,
        "max_retries": 1,
        "replay_path": str(replay),
    }
    with RewardPool.from_config(cfg) as pool:
        thread, out = score_in_background(pool, [HANG])
        for kills in (1, 2):  # the worker running it dies twice: once retried, then given up
            os.kill(wait_for_busy_worker(pool), signal.SIGKILL)
            wait_until(lambda k=kills: pool.metrics()["worker_restarts"] >= k, timeout_s=60)
        thread.join(timeout=60)
        (result,) = out[0]
        assert result.status == {"accuracy": "error"} and result.should_mask
        assert "died 2 times" in result.errors["accuracy"]
        metrics = pool.metrics()
        assert (metrics["retries"], metrics["errors"], metrics["timeouts"]) == (1, 1, 0)
        assert [e["kind"] for e in read_replay_log(replay)] == ["crash", "crash"]


def test_workers_are_recycled_after_max_items(ray_local: None) -> None:
    cfg = {
        "name": "test_pool_recycle",
        "rewards": {"accuracy": {}, "format": {}},
        "num_workers": 1,
        "batch_size": 5,
        "max_items_per_worker": 20,
    }
    with RewardPool.from_config(cfg) as pool:
        first_pid = pool.metrics()["workers"][0]["pid"]
        samples = numbers(120)
        results = pool.score(samples)
        assert [r.components["accuracy"] for r in results] == expected_accuracy(samples)
        assert all(r.ok for r in results)
        metrics = pool.metrics()
        assert metrics["workers_recycled"] >= 5  # 120 accuracy computations, 20 per worker
        assert metrics["worker_restarts"] == 0 and metrics["retries"] == 0
        # the last recycling may still be under way when the results are in
        wait_until(
            lambda: pool.metrics()["workers"][0]["generation"] == metrics["workers_recycled"],
            timeout_s=60,
        )
        assert pool.metrics()["workers"][0]["pid"] != first_pid
