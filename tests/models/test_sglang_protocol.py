"""The served reward model against SGLang's own protocol classes, where its protocol module imports.

sglang cannot be a dependency beside vLLM 0.30 (sglang 0.5.23 pins
``openai==2.8.0`` and ``flashinfer-python==0.7.2``; vLLM 0.30's venv has
openai 3.63 and flashinfer 0.6.18), so the test server's SGLang routes answer
in shapes pinned to SGLang's source (``reward_model_server.py``) and this
module is skipped in both test venvs. Its protocol module itself imports on
``.venv-skyrl``'s packages once the wheel and IPython (which the package's
``__init__`` imports) are beside them, without SGLang's engine::

    pip install --target /tmp/sglang --no-deps sglang==0.5.23
    pip install --target /tmp/sglang-ipython ipython
    PYTHONPATH=$PWD:/tmp/sglang:/tmp/sglang-ipython \\
        .venv-skyrl/bin/python -m pytest -q tests/models/test_sglang_protocol.py

Then every body the client sends is validated by SGLang's ``EmbeddingRequest``
or ``ClassifyRequest`` (no field it would ignore), and the test server's
replies parse as its ``EmbeddingResponse`` and ``ClassifyResponse`` with the
same fields.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

protocol = pytest.importorskip("sglang.srt.entrypoints.openai.protocol")

from pydantic import ValidationError  # noqa: E402
from reward_model_server import RewardModelServer, expected_logits, expected_score  # noqa: E402

from skyrl_rewards.rewards.batch import make_reward  # noqa: E402

CLASSES = {
    # api: (SGLang's request class, its response class)
    "embeddings": (protocol.EmbeddingRequest, protocol.EmbeddingResponse),
    "classify": (protocol.ClassifyRequest, protocol.ClassifyResponse),
}


@pytest.mark.parametrize(
    ("api", "num_labels", "extra"),
    [
        ("embeddings", 1, {}),  # a one-label reward model served with --is-embedding
        ("classify", 2, {"labels": ["bad", "good"], "label": "good"}),  # a two-label classifier
    ],
)
def test_the_client_speaks_sglangs_protocol(api: str, num_labels: int, extra: Any) -> None:
    texts = [f"q{i}\na{i}" for i in range(4)]
    with RewardModelServer(server="sglang", num_labels=num_labels) as server:
        values = make_reward(
            "reward_model",
            base_url=server.base_url + "/v1",
            model="rm",
            server="sglang",
            api=api,
            priority=1,
            **extra,
        )([f"a{i}" for i in range(4)], prompts=[f"q{i}" for i in range(4)])
        body, path = server.bodies[-1], server.paths[-1]
        reply = httpx.post(server.base_url + path, json=body).json()
    request_class, response_class = CLASSES[api]
    request_class.model_validate(body)
    assert set(body) <= set(request_class.model_fields)  # nothing SGLang would ignore
    parsed = response_class.model_validate(reply).model_dump()
    assert set(reply) == set(parsed)
    assert [set(entry) for entry in reply["data"]] == [set(entry) for entry in parsed["data"]]
    expected = [
        expected_logits(t, 1)[0] if api == "embeddings" else expected_score(t) for t in texts
    ]
    assert values == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("api", list(CLASSES))
def test_a_body_without_input_is_refused_by_both(api: str) -> None:
    request_class, _ = CLASSES[api]
    with pytest.raises(ValidationError):
        request_class.model_validate({"model": "m"})
    with RewardModelServer(server="sglang") as server:
        reply = httpx.post(f"{server.base_url}/v1/{api}", json={"model": "m"})
    assert reply.status_code == 400


def test_sglang_classify_takes_neither_use_activation_nor_messages() -> None:
    # ignored, not refused: a one-label model's softmax would be 1.0 (the config refuses it)
    fields = protocol.ClassifyRequest.model_fields
    assert "use_activation" not in fields and "messages" not in fields
    assert protocol.ClassifyRequest.model_config.get("extra") in (None, "ignore")
