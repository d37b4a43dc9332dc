"""The judge component, accu_reward_method llm, prompts, verdicts and TRL batches against a loopback endpoint."""

from __future__ import annotations

import asyncio
import base64
import io
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
from judge_server import JudgeServer, Response
from PIL import Image

from skyrl_rewards.rewards.batch import make_reward
from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE
from skyrl_rewards.rewards.contract.result import Status
from skyrl_rewards.rewards.mix import RewardMix
from skyrl_rewards.rewards.models.judge_client import judge_metrics, run_judge_requests
from skyrl_rewards.rewards.models.judge_prompts import VLM_R1_INSTRUCTIONS, JudgeTemplate
from skyrl_rewards.rewards.models.verdicts import UnparseableVerdict, Verdict
from skyrl_rewards.rewards.registry import build_component

_STUDENT = re.compile(r"Student's response: (.*)\nCorrect solution: (.*)\nOutput only", re.DOTALL)


def vlm_r1_grader(body: dict[str, Any]) -> str:
    """A stand-in judge model: 1.0 when the student's answer equals the solution (VLM-R1 prompt)."""
    match = _STUDENT.search(body["messages"][-1]["content"])
    if match is None:
        return "no idea"
    return "1.0" if match.group(1).strip() == match.group(2).strip() else "0.0"


def endpoint(server: JudgeServer, **fields: Any) -> dict[str, Any]:
    return {"base_url": server.url, "model": "judge", "backoff_base_s": 0.01, **fields}


def test_accuracy_llm_sends_vlm_r1_prompt_and_reads_its_verdict() -> None:
    with JudgeServer(reply=vlm_r1_grader) as server:
        accuracy = build_component("accuracy", {"judge": {"endpoint": endpoint(server)}})
        row = {"accu_reward_method": "llm", "solution": "<answer> a red car </answer>"}
        right = accuracy.score({**row, "completion": "<think>x</think><answer>a red car</answer>"})
        wrong = accuracy.score({**row, "completion": "<answer>a bus</answer>"})
        rules = accuracy.score({"completion": "<answer>2</answer>", "solution": "2"})
    assert (right.value, right.status) == (1.0, Status.OK)
    assert (wrong.value, wrong.status) == (0.0, Status.OK)
    assert rules.value == 1.0 and server.calls == 2  # rows of other methods use the rules
    assert server.bodies[0]["messages"] == [
        {"role": "user", "content": VLM_R1_INSTRUCTIONS},
        {
            "role": "user",
            "content": "Student's response: a red car\nCorrect solution: a red car\n"
            "Output only 1.0 or 0.0:",
        },
    ]
    assert server.bodies[0]["temperature"] == 0


def test_accuracy_llm_without_a_judge_is_a_config_error() -> None:
    score = build_component("accuracy").score(
        {"accu_reward_method": "llm", "completion": "<answer>a</answer>", "solution": "a"}
    )
    assert score.status is Status.ERROR and "rewards.accuracy.judge" in score.error


def test_length_refuses_llm_rows() -> None:
    score = build_component("length").score(
        {"accu_reward_method": "llm", "completion": "<answer>a</answer>", "solution": "a"}
    )
    assert score.status is Status.ERROR and "'llm' is not supported" in score.error


@pytest.mark.parametrize(
    "plan, reply, status, error",
    [
        # an unparseable verdict is masked, never 0.0 (VLM-R1 would fall back to string equality)
        (None, "The answer is correct.", Status.ERROR, "judge: unparseable verdict"),
        (None, "0.5", Status.ERROR, "judge: unparseable verdict"),  # binary: exactly 1.0 or 0.0
        (lambda n, b: Response(500), "1.0", Status.ERROR, "judge http_status: HTTP 500"),
        (lambda n, b: Response(400), "1.0", Status.ERROR, "judge http_status: HTTP 400"),
        (
            lambda n, b: Response(429, {"Retry-After": "0"}),
            "1.0",
            Status.ERROR,
            "judge rate_limited",
        ),
        (lambda n, b: Response(delay_s=1.0), "1.0", Status.TIMEOUT, "judge timeout"),
        (lambda n, b: Response(drop=True), "1.0", Status.ERROR, "judge connect"),
    ],
)
def test_failures_are_masked_with_their_cause(
    plan: Any, reply: str, status: Status, error: str
) -> None:
    with JudgeServer(plan=plan, reply=lambda body: reply) as server:
        judge = build_component(
            "judge", endpoint(server, timeout_s=0.3, retries={"max_retries": 1})
        )
        score = judge.score({"completion": "<answer>1</answer>", "solution": "1"})
    assert (score.value, score.status) == (0.0, status)
    assert score.error.startswith(error), score.error


def test_outage_then_recovery() -> None:
    with JudgeServer() as server:
        judge = build_component(
            "judge",
            endpoint(server, retries={"max_retries": 0}, breaker={"failures": 2, "reset_s": 0.3}),
        )
        server.down = True
        down = [
            judge.score({"completion": f"<answer>{i}</answer>", "solution": "1"}) for i in range(4)
        ]
        assert [s.error.split(":")[0] for s in down] == ["judge connect"] * 2 + [
            "judge breaker_open"
        ] * 2
        assert all(s.status is Status.ERROR for s in down) and server.calls == 2
        server.down = False
        asyncio.run(asyncio.sleep(0.4))
        up = judge.score({"completion": "<answer>9</answer>", "solution": "1"})
    assert (up.value, up.status) == (1.0, Status.OK)


@pytest.mark.parametrize(
    "parser, reply, value",
    [
        ("binary", "1.0", 1.0),
        ("binary", " 0.0\n", 0.0),
        ("binary", "1", 1.0),  # float("1") as VLM-R1 reads it
        ({"kind": "scale", "lo": 0, "hi": 10}, "7", 0.7),
        ({"kind": "scale", "lo": 1, "hi": 5}, "5.", 1.0),  # a trailing full stop
        ({"kind": "regex", "pattern": r"Score: (\d+)/10", "hi": 10}, "ok. Score: 8/10", 0.8),
        (
            {"kind": "regex", "pattern": r"\[\[(\w+)\]\]", "values": {"correct": 1, "wrong": 0}},
            "[[Correct]]",
            1.0,
        ),
        ({"kind": "json", "field": "score", "hi": 10}, '```json\n{"score": 4}\n```', 0.4),
        (
            {"kind": "json", "field": "verdict.correct"},
            'I think {"verdict": {"correct": true}}',
            1.0,
        ),
        ({"kind": "json", "field": "grade", "values": {"a": 1, "b": 0.5}}, '{"grade": "B"}', 0.5),
    ],
)
def test_verdict_parsers(parser: Any, reply: str, value: float) -> None:
    assert Verdict.from_config(parser).read(reply) == pytest.approx(value)


@pytest.mark.parametrize(
    "parser, reply",
    [
        ("binary", "Yes"),
        ("binary", "nan"),
        ("binary", ""),
        ({"kind": "scale", "lo": 0, "hi": 10}, "11"),  # out of range
        ({"kind": "scale", "lo": 0, "hi": 10}, "Score: 7"),  # use regex for prose
        ({"kind": "regex", "pattern": r"Score: (\d+)"}, "no score"),
        ({"kind": "regex", "pattern": r"(\w+)", "values": {"yes": 1}}, "maybe"),
        ({"kind": "json", "field": "score"}, "{broken"),
        ({"kind": "json", "field": "score"}, '{"other": 1}'),
    ],
)
def test_unparseable_verdicts_raise(parser: Any, reply: str) -> None:
    with pytest.raises(UnparseableVerdict):
        Verdict.from_config(parser).read(reply)


@pytest.mark.parametrize(
    "parser, match",
    [
        ("likert", "parser.kind"),
        ({"kind": "scale", "lo": 0}, "needs lo and hi"),
        ({"kind": "scale", "lo": 5, "hi": 1}, "lo < hi"),
        ({"kind": "regex", "pattern": "("}, "not a regular expression"),
        ({"kind": "regex", "pattern": "x", "group": 1}, "has 0 groups"),
        ({"kind": "json"}, "parser.field"),
    ],
)
def test_bad_parsers_are_named(parser: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Verdict.from_config(parser)


def test_template_fields_question_fallbacks_and_caps() -> None:
    template = JudgeTemplate.from_config(
        [
            {"role": "system", "content": 'Grade. Reply {"score": n}.'},
            {
                "role": "user",
                "content": "Q: {question}\nA: {answer}\nFull: {completion}\nRef: {solution}",
            },
        ],
        max_field_chars=40,
    )
    completion = "<think>" + "x" * 100 + "</think><answer>42</answer>"
    messages = template.render(
        {
            "prompt": [{"role": "user", "content": "What is 6*7?"}],
            "completion": completion,
            "solution": "<answer>42</answer>",
        }
    )
    assert messages[0] == {"role": "system", "content": 'Grade. Reply {"score": n}.'}
    text = messages[1]["content"]
    assert text.startswith("Q: What is 6*7?\nA: 42\nFull: <think>xx") and "[...]" in text
    assert text.endswith("</answer>\nRef: 42")
    with pytest.raises(ValueError, match="no problem, question or prompt"):
        template.render({"completion": "a", "solution": "b"})
    assert JudgeTemplate.from_config("Is {answer} right?").render({"completion": "z"}) == [
        {"role": "user", "content": "Is z right?"}
    ]


@pytest.mark.parametrize(
    "template, field, hint",
    [
        # the typo that used to reach the judge as it is, every row then scoring 0.0
        ("Grade {answr} against {solution}", "answr", " (did you mean 'answer'?)"),
        ({"system": "Grade.", "user": "{questoin}: {answer}"}, "questoin", "'question'"),
        ([{"role": "user", "content": "{answer} {score}"}], "score", ""),  # nothing near
    ],
)
def test_an_unknown_template_field_is_refused_when_the_config_is_built(
    template: Any, field: str, hint: str
) -> None:
    judge = {"endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}, "template": template}
    with pytest.raises(ValueError) as raised:
        RewardMix.from_config({"accuracy": {"judge": judge}})
    message = str(raised.value)
    assert message.startswith(f"rewards.accuracy: judge.template: unknown field {{{field}}}")
    assert hint in message
    assert message.endswith("{question}, {answer}, {completion}, {solution}, {image}")


def image_row(tmp_path: Path, size: tuple[int, int]) -> dict[str, Any]:
    path = tmp_path / "big.png"
    Image.new("RGB", size, (200, 30, 30)).save(path)
    return {"image_path": [str(path)], "problem": "What colour?", "solution": "red"}


def decoded_image(part: dict[str, Any]) -> Image.Image:
    url = part["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))


def test_images_go_as_size_capped_image_parts(tmp_path: Path) -> None:
    with JudgeServer(reply=lambda body: "1.0") as server:
        judge = build_component(
            "judge",
            {
                "endpoint": endpoint(server),
                "template": {
                    "system": "Judge the answer to the picture.",
                    "user": "{image}Q: {question} A: {answer}",
                },
                "max_image_side": 256,
            },
        )
        score = judge.score(
            {**image_row(tmp_path, (3000, 1500)), "completion": "<answer>red</answer>"}
        )
    assert score.value == 1.0
    content = server.bodies[0]["messages"][1]["content"]
    assert [part["type"] for part in content] == ["image_url", "text"]
    assert decoded_image(content[0]).size == (256, 128)
    assert content[1]["text"] == "Q: What colour? A: red"


def test_images_true_puts_images_before_the_last_message_text(tmp_path: Path) -> None:
    template = JudgeTemplate.from_config("vlm_r1_llm", images=True, max_image_bytes=2_000)
    messages = template.render({**image_row(tmp_path, (800, 800)), "completion": "a"})
    assert messages[0]["content"] == VLM_R1_INSTRUCTIONS  # the shared prefix stays plain text
    parts = messages[1]["content"]
    assert [p["type"] for p in parts] == ["image_url", "text"]
    assert len(base64.b64decode(parts[0]["image_url"]["url"].split(",", 1)[1])) <= 2_000
    with pytest.raises(ValueError, match="asks for images but the row has none"):
        template.render({"completion": "a", "solution": "b"})


def test_work_key() -> None:
    judge = build_component("judge", {"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    row = {"completion": "<think>a</think><answer>1</answer>", "solution": "1"}
    same = {"completion": "<think>b</think><answer>1</answer>", "solution": "1"}  # same answer span
    assert judge.work_key(row) == judge.work_key(same) is not None
    assert judge.work_key(row) != judge.work_key({**row, "solution": "2"})
    other = build_component("judge", {"base_url": "http://127.0.0.1:9/v1", "model": "n"})
    assert other.work_key(row) != judge.work_key(row)
    seeing = build_component(
        "judge", {"base_url": "http://127.0.0.1:9/v1", "model": "m", "images": True}
    )
    assert seeing.work_key({**row, "images": [Image.new("RGB", (2, 2))]}) is None
    assert seeing.work_key({**row, "image_path": "a.png"}) != seeing.work_key(
        {**row, "image_path": "b.png"}
    )


def test_lane_contract() -> None:
    judge = build_component("judge", {"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    sample = {"completion": "<answer>1</answer>", "solution": "1"}
    request = judge.lane_request(sample)
    assert judge.lane(sample) == request.lane == JUDGE_LANE
    assert list(judge.endpoints()) == [request.endpoint]
    accuracy = build_component(
        "accuracy", {"judge": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}}
    )
    assert accuracy.lane({**sample, "accu_reward_method": "llm"}) == JUDGE_LANE
    assert (
        accuracy.lane(sample) is None
        and accuracy.lane({**sample, "accu_reward_method": "mcq"}) is None
    )


def test_trl_batch_masks_failures_and_pickles() -> None:
    def plan(n: int, body: dict) -> Response | None:
        return (
            Response(400) if "Student's response: boom" in body["messages"][-1]["content"] else None
        )

    with JudgeServer(reply=vlm_r1_grader, plan=plan) as server:
        reward = make_reward(
            "judge", base_url=server.url, model="judge", limits={"max_in_flight": 4}
        )
        reward = pickle.loads(pickle.dumps(reward))
        completions = [
            [{"role": "assistant", "content": f"<answer>{a}</answer>"}]
            for a in ("1", "2", "boom", "1")
        ]
        values = reward(completions, solution=["1", "1", "1", "1"], prompts=["p"] * 4)
        accuracy = make_reward("accuracy", judge={"base_url": server.url, "model": "judge"})
        mixed = accuracy(
            ["<answer>cat</answer>", "<answer>B</answer>", "<answer>dog</answer>"],
            solution=["cat", "B", "cat"],
            accu_reward_method=["llm", "mcq", "llm"],
        )
    assert values == [1.0, 0.0, None, 1.0]
    assert reward.__name__ == "judge_reward" and server.calls == 5  # the repeated row was cached
    assert mixed == [1.0, 1.0, 0.0]
    assert any(m.get("cache_hits", 0) >= 1 for m in judge_metrics().values())


def test_mix_combines_rules_and_judge() -> None:
    with JudgeServer(reply=vlm_r1_grader) as server:
        mix = RewardMix.from_config(
            {"format": {"weight": 0.5}, "judge": {"weight": 1.0, "endpoint": endpoint(server)}}
        )
        result = mix.score({"completion": "<think>t</think><answer>7</answer>", "solution": "7"})
    assert result.total == 1.5 and result.status == {"format": "ok", "judge": "ok"}


def test_run_judge_requests_inside_a_running_event_loop() -> None:
    with JudgeServer(latency_s=0.2) as server:
        judge = build_component("judge", endpoint(server))
        requests = [judge.lane_request({"completion": str(i), "solution": "1"}) for i in range(20)]

        async def caller() -> list[Any]:  # e.g. a Ray async actor or TRL's loop
            return run_judge_requests(requests, judge.endpoints())

        start = asyncio.get_event_loop_policy().new_event_loop()
        try:
            outcomes = start.run_until_complete(caller())
        finally:
            start.close()
    assert [o.ok for o in outcomes] == [True] * 20 and server.peak > 1  # concurrently
