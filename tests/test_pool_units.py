"""The pool's pieces without Ray: settings, micro-batcher, alarm, replay log."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from skyrl_rewards.pool.batching import MicroBatcher
from skyrl_rewards.pool.config import PoolConfig, load_pool_config
from skyrl_rewards.pool.metrics import ErrorRateAlarm, PoolMetrics
from skyrl_rewards.pool.replay_log import ReplayLog, read_replay_log
from skyrl_rewards.pool.tasks import WorkCache
from skyrl_rewards.pool.worker import FIRST_PASS_MAX_S, RewardWorker, first_pass_cap
from skyrl_rewards.pool.worker_calls import SECOND_PASS_S
from skyrl_rewards.rewards.contract.result import ComponentScore
from skyrl_rewards.rewards.mix import RewardMix

REPO = Path(__file__).resolve().parents[1]


def test_configs_pool_yaml_holds_the_defaults() -> None:
    assert load_pool_config(REPO / "configs" / "pool.yaml") == PoolConfig()


@pytest.mark.parametrize(
    ("overrides", "key", "value"),
    [
        (["num_workers=3"], "num_workers", 3),
        (["timeout_s=2"], "timeout_s", 2.0),  # an int where a float is expected
        (["address=auto"], "address", "auto"),
        (["replay_path=null"], "replay_path", None),
        (["local_rewards=[]"], "local_rewards", []),
        (
            ["rewards.format.weight=0.25"],
            "rewards",
            {"accuracy": {"weight": 1.0}, "format": {"weight": 0.25}},
        ),
    ],
)
def test_key_value_overrides(overrides: list[str], key: str, value: object) -> None:
    assert getattr(load_pool_config(None, overrides), key) == value


def test_a_given_mix_replaces_the_default_mix() -> None:
    assert load_pool_config({"rewards": {"iou": {"weight": 2}}}).rewards == {"iou": {"weight": 2}}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"num_workers": 0}, "num_workers: must be > 0"),
        ({"num_workers": "two"}, "num_workers: expected"),
        ({"alarm_stop": 1}, "alarm_stop: expected"),  # no int for a bool
        ({"timeout_s": True}, "timeout_s: expected"),  # no bool for a number
        ({"placement": "pack"}, "placement: expected one of"),
        ({"alarm_error_rate": 0}, "alarm_error_rate"),
        ({"rewards": {}}, "rewards: the reward mix is empty"),
        ({"rewards": {"format": 1}}, "rewards.format: expected a mapping"),
        ({"workers": 2}, "unknown key 'workers'"),
        ({"num_worker": 2}, r"unknown key 'num_worker' \(did you mean 'num_workers'\?\)"),
    ],
)
def test_bad_settings_name_the_key(source: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_pool_config(source)


def test_micro_batcher_sends_full_batches_at_once_and_the_rest_after_the_delay() -> None:
    # No wall-clock upper bound (a loaded machine delays any wakeup): "at once" is checked
    # inside add(), before the loop runs anything else; "after the delay" by the timer's lower
    # bound (it never fires early) and by the partial batch being out after ten times the delay.
    wait_s = 0.05

    async def run() -> None:
        loop = asyncio.get_running_loop()
        sent: list[tuple[float, list[int]]] = []
        batcher = MicroBatcher(
            lambda b: sent.append((loop.time(), b)), batch_size=3, batch_wait_s=wait_s
        )
        start = loop.time()
        batcher.add([1, 2])
        assert sent == []  # a partial batch waits
        batcher.add([3, 4])  # fills the first batch: sent within add()
        assert [batch for _, batch in sent] == [[1, 2, 3]]
        await asyncio.sleep(10 * wait_s)
        assert [batch for _, batch in sent] == [[1, 2, 3], [4]]
        assert sent[1][0] - start >= wait_s - 1e-6  # the timer armed by the first add
        batcher.add([5])
        assert batcher.drain() == [5]  # taken back: never sent
        await asyncio.sleep(10 * wait_s)
        assert [batch for _, batch in sent] == [[1, 2, 3], [4]]

    asyncio.run(run())


def test_alarm_fires_at_the_rate_and_clears_below_it() -> None:
    alarm = ErrorRateAlarm(window_items=10, max_rate=0.5, min_items=4, stop=False, pool_name="p")
    alarm.record([True, True, True])
    assert not alarm.firing  # fewer than min_items
    alarm.record([False])
    assert alarm.firing and not alarm.stopped
    alarm.record([False] * 10)
    assert not alarm.firing and alarm.rate == 0.0


def test_stopping_alarm_stays_stopped() -> None:
    alarm = ErrorRateAlarm(window_items=4, max_rate=0.5, min_items=4, stop=True, pool_name="p")
    alarm.record([True] * 4 + [False] * 4)
    assert alarm.stopped and not alarm.firing


def test_metrics_histogram_and_percentiles() -> None:
    metrics = PoolMetrics("units")
    metrics.record_items([0.001, 0.003, 0.2, 100.0], errors=2, masked=1)
    snapshot = metrics.snapshot()
    assert (snapshot["items"], snapshot["errors"], snapshot["masked_items"]) == (4, 2, 1)
    buckets = snapshot["latency_s"]["buckets"]
    assert (buckets["le_0.001"], buckets["le_0.005"], buckets["le_0.25"], buckets["inf"]) == (
        1,
        1,
        1,
        1,
    )
    assert snapshot["latency_s"]["p50"] == 0.2 and snapshot["latency_s"]["p99"] == 100.0


def test_replay_log_writes_one_json_line_per_event(tmp_path: Path) -> None:
    log = ReplayLog(tmp_path / "sub" / "replay.jsonl", pool_name="p", max_field_chars=5)
    log.append("timeout", "accuracy", {"completion": "0123456789", "grid": (1, 2, 3)}, "slow")
    log.append("crash", "iou", {"completion": "x"}, "died")
    events = read_replay_log(tmp_path / "sub" / "replay.jsonl")
    assert [(e["kind"], e["component"], e["message"]) for e in events] == [
        ("timeout", "accuracy", "slow"),
        ("crash", "iou", "died"),
    ]
    assert events[0]["sample"] == {"completion": "01234", "grid": [1, 2, 3]}


def test_work_cache_is_bounded_by_bytes_not_by_answer_length() -> None:
    # issue 11: 6,000 distinct 50 KB completions grew the driver by 50 MB per 1,000 items
    mix = RewardMix.from_config({"accuracy": {}})
    cache = WorkCache(1000)
    for i in range(2000):
        sample = {"completion": f"{i} " + "x" * 50_000, "solution": "<answer>1</answer>"}
        cache.put(("accuracy", mix.work_key("accuracy", sample)), ComponentScore(0.0))
    assert len(cache) == 1000
    assert cache.nbytes < 1000 * 1_000  # under 1 KB per entry, whatever the completion's length
    assert cache.get(("accuracy", mix.work_key("accuracy", sample))) == ComponentScore(0.0)


def test_the_first_pass_cap_stays_between_the_setting_and_its_ceiling() -> None:
    assert first_pass_cap(0.0) == 0.0  # no first pass
    assert 0.1 <= first_pass_cap(0.1) <= FIRST_PASS_MAX_S
    assert first_pass_cap(SECOND_PASS_S) == SECOND_PASS_S  # a second pass keeps its cap


def test_a_worker_stops_a_call_before_the_tasks_handed_to_another() -> None:
    # the body of a worker, in this process: stop_at ends the stream before task 1, as when an
    # idle worker took over the tasks behind a slow one; a call without an id runs to its end
    worker = RewardWorker({"format": {"weight": 1.0}})
    samples = [{"completion": f"<think>t</think><answer>{i}</answer>"} for i in range(3)]
    tasks = [(i, "format") for i in range(3)]
    stream = worker.score_tasks(samples, tasks, 0.02, 0.0, True, 0.0, 0, "call-1")
    assert next(stream).fenced == (True, True, True)  # before the first task
    worker.stop_at("call-1", 1)
    assert [len(p.scores) for p in stream] == [1]  # task 0 only
    worker.stop_at("call-1", 0)  # the call is over: nothing to stop, nothing remembered
    unnamed = worker.score_tasks(samples, tasks, 0.02, 0.0, True)
    assert sum(len(p.scores) for p in unnamed) == 3
    again = worker.score_tasks(samples, tasks, 0.02, 0.0, True, 0.0, 0, "call-1")
    assert sum(len(p.scores) for p in again) == 3
