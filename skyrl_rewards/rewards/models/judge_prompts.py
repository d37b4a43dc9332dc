"""Judge prompt templates: chat messages with placeholders for one row's fields and images.

A template is a list of chat messages whose text may hold these placeholders
(other braces are left as they are, so JSON examples need no escaping; a
single word in braces that is not one of these is refused when the template
is built, as a misspelt field would otherwise reach the judge as it is):

- ``{question}``: the row's question: its ``problem`` column (VLM-R1's name),
  else ``question``, else ``prompt`` (a string, or a chat whose last user
  message is taken);
- ``{answer}``: the answer span of the completion (inside its last
  ``<answer>...</answer>``, else the whole text, stripped);
- ``{completion}``: the whole completion text;
- ``{solution}``: the answer span of the row's ground truth;
- ``{image}``: the row's images (``image_path``: a path or list of paths,
  ``image`` or ``images``: PIL images, bytes or paths), sent as ``image_url``
  parts holding JPEG data URLs, downscaled to ``max_image_side`` pixels and
  to at most ``max_image_bytes`` bytes each.

A template with ``images: true`` and no ``{image}`` sends the images at the
start of its last message. Put the shared instructions first (a system
message, or the first user message): they are the same for every row, so a
server's prefix cache serves them once for a whole group.

Each text field is cut to ``max_field_chars`` before templating (its head and
tail are kept: the final answer of a long completion is at its end).
"""

from __future__ import annotations

import base64
import io
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

from skyrl_rewards.rewards.contract.text import answer_span, completion_text
from skyrl_rewards.rewards.geometry.box_formats import image_column
from skyrl_rewards.suggest import did_you_mean

VLM_R1_INSTRUCTIONS = (
    "You are a evaluation expert. First, analyze the student's response to identify and extract "
    "their final answer. Then, compare the extracted answer with the correct solution. Output "
    "ONLY '1.0' if the extracted answer matches the correct solution in meaning, or '0.0' if the "
    "student's response does not contain a clear or correct answer. No other output is allowed."
)
"""VLM-R1's ``llm`` accuracy instructions, word for word (its typo included)."""

TEMPLATES: dict[str, tuple[tuple[str, str], ...]] = {
    # VLM-R1's llm accuracy prompt: two user messages, the instructions first
    "vlm_r1_llm": (
        ("user", VLM_R1_INSTRUCTIONS),
        (
            "user",
            "Student's response: {answer}\nCorrect solution: {solution}\nOutput only 1.0 or 0.0:",
        ),
    ),
    # a graded judgement for open answers, read with parser {kind: scale, lo: 0, hi: 10}
    "score_0_10": (
        (
            "system",
            "You grade answers to questions. Compare the student's final answer with the "
            "reference answer and rate how correct and complete it is on a scale from 0 (wrong "
            "or missing) to 10 (fully correct). Output ONLY the number.",
        ),
        (
            "user",
            "Question: {question}\nReference answer: {solution}\nStudent's answer: {answer}\n"
            "Score (0-10):",
        ),
    ),
}
"""Built-in templates by name; ``vlm_r1_llm`` is the default (``accu_reward_method: llm``)."""

DEFAULT_TEMPLATE = "vlm_r1_llm"

PLACEHOLDERS = ("question", "answer", "completion", "solution", "image")
_PLACEHOLDER = re.compile(r"\{(question|answer|completion|solution|image)\}")
_WORD_IN_BRACES = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ROLES = ("system", "user", "assistant")

MAX_FIELD_CHARS = 8_000
"""Default cut of each text field before templating."""

MAX_IMAGE_SIDE = 1024
"""Default longest side of an image sent to a judge, in pixels."""

MAX_IMAGE_BYTES = 1_000_000
"""Default largest encoded image sent to a judge."""


@dataclass(frozen=True)
class JudgeTemplate:
    """Chat messages ``(role, text)`` with placeholders, and how to cut fields and images."""

    messages: tuple[tuple[str, str], ...]
    images: bool = False
    max_field_chars: int = MAX_FIELD_CHARS
    max_image_side: int = MAX_IMAGE_SIDE
    max_image_bytes: int = MAX_IMAGE_BYTES

    @classmethod
    def from_config(
        cls,
        template: Any = None,
        *,
        images: bool = False,
        max_field_chars: int = MAX_FIELD_CHARS,
        max_image_side: int = MAX_IMAGE_SIDE,
        max_image_bytes: int = MAX_IMAGE_BYTES,
    ) -> JudgeTemplate:
        """A template from a built-in name, a text (one user message), ``{system, user}``, or a message list.

        Raises ``ValueError`` naming the problem; a word in braces that is not a
        placeholder is refused with the known ones and the nearest name.

        >>> JudgeTemplate.from_config({"system": "Grade.", "user": "{answer} vs {solution}"}).fields()
        ('answer', 'solution')
        """
        if template is None:
            template = DEFAULT_TEMPLATE
        if isinstance(template, str) and template in TEMPLATES:
            messages = TEMPLATES[template]
        elif isinstance(template, str):
            messages = (("user", template),)
        elif isinstance(template, Mapping):
            unknown = sorted(set(template) - {"system", "user"})
            if unknown or "user" not in template:
                raise ValueError(
                    f"template: a mapping needs 'user' (and may have 'system'), got keys {sorted(template)}"
                )
            messages = tuple(
                (role, template[role]) for role in ("system", "user") if role in template
            )
        elif isinstance(template, Sequence):
            messages = tuple(_message(item) for item in template)
        else:
            raise ValueError(f"template: expected a name, a text or messages, got {template!r:.80}")
        if not messages or any(not isinstance(text, str) or not text for _, text in messages):
            raise ValueError("template: every message needs a non-empty text")
        for _, text in messages:
            for word in _WORD_IN_BRACES.findall(text):
                if word not in PLACEHOLDERS:
                    known = ", ".join("{" + name + "}" for name in PLACEHOLDERS)
                    raise ValueError(
                        f"template: unknown field {{{word}}}{did_you_mean(word, PLACEHOLDERS)}; "
                        f"the fields a template may use are {known}"
                    )
        for name, value in (
            ("max_field_chars", max_field_chars),
            ("max_image_side", max_image_side),
            ("max_image_bytes", max_image_bytes),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 16:
                raise ValueError(f"{name}: expected an integer of at least 16, got {value!r}")
        if not isinstance(images, bool):
            raise ValueError(f"images: expected true or false, got {images!r}")
        return cls(tuple(messages), images, max_field_chars, max_image_side, max_image_bytes)

    def fields(self) -> tuple[str, ...]:
        """The placeholders the template uses, in :data:`PLACEHOLDERS` order."""
        used = {m for _, text in self.messages for m in _PLACEHOLDER.findall(text)}
        return tuple(name for name in PLACEHOLDERS if name in used)

    def wants_images(self) -> bool:
        """True when the row's images go to the judge."""
        return self.images or "image" in self.fields()

    def text_fields(self, sample: Mapping[str, Any]) -> dict[str, str]:
        """The capped text of every text placeholder the template uses; ``ValueError`` for a missing one."""
        values = {}
        for name in self.fields():
            if name != "image":
                values[name] = _cut(_FIELD_READERS[name](sample), self.max_field_chars)
        return values

    def render(self, sample: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The chat messages for one row (images encoded); ``ValueError`` for a missing field or image."""
        values = self.text_fields(sample)
        images = self.image_parts(sample) if self.wants_images() else []
        messages: list[dict[str, Any]] = []
        for role, text in self.messages:
            parts: list[dict[str, Any]] = []
            position = 0
            for match in _PLACEHOLDER.finditer(text):
                parts.append({"type": "text", "text": text[position : match.start()]})
                if match.group(1) == "image":
                    parts.extend(images)
                else:
                    parts.append({"type": "text", "text": values[match.group(1)]})
                position = match.end()
            parts.append({"type": "text", "text": text[position:]})
            messages.append({"role": role, "content": _join(parts)})
        if self.images and "image" not in self.fields():
            last = messages[-1]
            content = last["content"]
            text_parts = (
                [{"type": "text", "text": content}] if isinstance(content, str) else content
            )
            last["content"] = [*images, *text_parts]
        return messages

    def image_parts(self, sample: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The row's images as ``image_url`` parts; ``ValueError`` when it has none or one is unreadable."""
        return image_url_parts(
            sample,
            self.max_image_side,
            self.max_image_bytes,
            asked_by="the judge template asks for images",
        )


def image_url_parts(
    sample: Mapping[str, Any], max_side: int, max_bytes: int, *, asked_by: str
) -> list[dict[str, Any]]:
    """The row's images (``image_path``, ``image`` or ``images``) as chat ``image_url`` parts.

    Each is a JPEG data URL, downscaled to ``max_side`` and to fit ``max_bytes``.
    ``ValueError`` naming the column when the row has none (``asked_by`` says
    who wanted them), or an image is unreadable or does not fit.
    """
    column = image_column(sample)
    if column is None:
        raise ValueError(
            f"image_path: {asked_by} but the row has none (image_path, image or images)"
        )
    value = sample[column]
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    parts = []
    for item in items:
        data = encode_image(load_image(item, column), max_side, max_bytes)
        if data is None:
            raise ValueError(
                f"{column}: image does not fit max_image_bytes={max_bytes} even downscaled"
            )
        url = "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii")
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def in_memory_images(sample: Mapping[str, Any]) -> bool:
    """True when the row's images are objects or bytes rather than paths (no stable work key)."""
    column = image_column(sample)
    if column is None:
        return False
    value = sample[column]
    items = value if isinstance(value, (list, tuple)) else [value]
    return not all(isinstance(item, (str, os.PathLike)) for item in items)


def load_image(item: Any, field: str) -> Image.Image:
    """A PIL image from a path, bytes, a ``{"bytes"|"path": ...}`` dict or an image; ``ValueError`` naming ``field``."""
    if isinstance(item, Image.Image):
        return item
    if isinstance(item, Mapping):
        item = item.get("bytes") or item.get("path")
    try:
        if isinstance(item, (bytes, bytearray)):
            image = Image.open(io.BytesIO(item))
            image.load()
            return image
        if isinstance(item, (str, os.PathLike)) and os.fspath(item):
            return _read_image_file(os.fspath(item), field)
    except (OSError, Image.DecompressionBombError, SyntaxError, ValueError) as error:
        raise ValueError(f"{field}: cannot read image: {error}") from error
    raise ValueError(f"{field}: expected a path, bytes or an image, got {item!r:.80}")


def _read_image_file(path: str, field: str) -> Image.Image:
    # non-blocking open: a FIFO without a writer would otherwise wait for one
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise ValueError(f"{field}: {path!r} is not a regular file; point the dataset at an image")
    with os.fdopen(descriptor, "rb") as file:
        image = Image.open(file)
        image.load()
        return image


def encode_image(image: Image.Image, max_side: int, max_bytes: int) -> bytes | None:
    """JPEG bytes of ``image``, its longest side at most ``max_side``, at most ``max_bytes`` (else ``None``).

    >>> len(encode_image(Image.new("RGB", (4000, 100)), 512, 100_000)) < 100_000
    True
    """
    image = image.convert("RGB")
    side = min(max_side, max(image.size))
    for _ in range(12):
        resized = downscale(image, side)
        buffer = io.BytesIO()
        resized.save(buffer, format="JPEG", quality=85)
        if buffer.tell() <= max_bytes:
            return buffer.getvalue()
        side = max(1, int(side * 0.7))
    return None


def downscale(image: Image.Image, max_side: int) -> Image.Image:
    """``image`` with its longest side at most ``max_side`` (bicubic; unchanged when it fits).

    >>> downscale(Image.new("RGB", (4000, 100)), 512).size
    (512, 13)
    """
    scale = min(1.0, max_side / max(image.size))
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(size, Image.Resampling.BICUBIC) if size != image.size else image


def question_text(sample: Mapping[str, Any]) -> str:
    """The row's question: ``problem``, else ``question``, else ``prompt`` (last user message of a chat)."""
    for key in ("problem", "question", "prompt"):
        value = sample.get(key)
        if isinstance(value, list):
            users = [m for m in value if isinstance(m, dict) and m.get("role", "user") == "user"]
            value = _content_text(users[-1].get("content")) if users else None
        if isinstance(value, str) and value.strip():
            return value.strip()
    raise ValueError(
        "question: the judge template uses {question} but the row has no problem, question or "
        "prompt column"
    )


def solution_text(sample: Mapping[str, Any]) -> str:
    """The answer span of the row's ground truth."""
    solution = sample.get("solution")
    if solution is None:
        raise ValueError("solution: missing from the row (the judge template uses {solution})")
    if not isinstance(solution, str):
        solution = str(solution)
    return answer_span(solution)


def _content_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and "text" in p)
    return None


_FIELD_READERS = {
    "question": question_text,
    "answer": lambda sample: answer_span(completion_text(sample.get("completion"))),
    "completion": lambda sample: completion_text(sample.get("completion")),
    "solution": solution_text,
}


def _cut(text: str, limit: int) -> str:
    """``text`` with at most ``limit`` characters: its head and tail around a marker."""
    if len(text) <= limit:
        return text
    marker = "\n[...]\n"
    keep = limit - len(marker)
    return text[: keep // 2] + marker + text[len(text) - (keep - keep // 2) :]


def _message(item: Any) -> tuple[str, str]:
    if not isinstance(item, Mapping) or item.get("role") not in _ROLES:
        raise ValueError(
            f"template: each message needs a role in {_ROLES} and a content, got {item!r:.80}"
        )
    return item["role"], item.get("content")


def _join(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Plain text when there is no image part; else the parts, neighbouring texts joined, empty ones dropped."""
    if all(part["type"] == "text" for part in parts):
        return "".join(part["text"] for part in parts)
    joined: list[dict[str, Any]] = []
    for part in parts:
        if part["type"] == "text" and joined and joined[-1]["type"] == "text":
            joined[-1] = {"type": "text", "text": joined[-1]["text"] + part["text"]}
        else:
            joined.append(part)
    return [part for part in joined if part["type"] != "text" or part["text"]]
