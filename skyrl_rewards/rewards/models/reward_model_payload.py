"""What a reward model reads: a row's images (:func:`row_images`) and a payload rendered to
text (:func:`render`: a ``text`` as is, ``messages`` through the tokenizer's chat template,
or joined by newlines without one; see :mod:`~skyrl_rewards.rewards.models.reward_model`).
Shared by the local runner and the served reward model (:func:`render_payload`); no
``torch`` here (``jinja2`` only for a template's error type).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


class InputError(Exception):
    """An input that cannot be scored (unreadable payload, too long)."""


def render(tokenizer: Any, payload: Any) -> tuple[str, bool]:
    """A payload's text and whether the tokenizer adds its special tokens (see the module doc).

    ``InputError`` for a payload that cannot be read or that the chat template refuses.
    """
    if not isinstance(payload, Mapping):
        raise InputError(f"payload: expected a mapping, got {type(payload).__name__}")
    if "text" in payload:
        text = payload["text"]
        if not isinstance(text, str):
            raise InputError(f"payload.text: expected a string, got {type(text).__name__}")
        return text, True
    messages = payload_messages(payload)
    if not getattr(tokenizer, "chat_template", None):
        return "\n".join(message["content"] for message in messages), True
    from jinja2 import TemplateError

    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False)
    except (TemplateError, ValueError, TypeError, KeyError) as error:
        raise InputError(f"chat template: {type(error).__name__}: {error}") from error
    if not isinstance(text, str):
        raise InputError(f"chat template: rendered {type(text).__name__}, not text")
    return text, False


def row_images(sample: Mapping[str, Any]) -> list[Any]:
    """The row's images for a reward model's payload: paths as strings, in-memory images as they are.

    Read from the first of ``image_path``, ``image``, ``images`` the row fills
    (one item or a list). A path (``str`` or ``os.PathLike``) becomes a string:
    cheap to send between processes, read where the model runs. An in-memory
    image (a PIL image, bytes, a ``{"bytes"|"path"}`` dict: TRL's rows) is
    kept as the object it is, pickled with the request when it crosses
    processes; such a row has no work key (no cache entry). Empty when the row
    has no image.

    >>> row_images({"image_path": ["a.png", "b.png"]})
    ['a.png', 'b.png']
    """
    from skyrl_rewards.rewards.geometry.box_formats import image_column

    column = image_column(sample)
    if column is None:
        return []
    value = sample[column]
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    return [os.fspath(item) if isinstance(item, os.PathLike) else item for item in items]


def render_payload(tokenizer: Any, payload: Any) -> str:
    """A payload's text as this runner renders it (what a served reward model's text input sends).

    ``tokenizer`` may be ``None`` (the contents joined by newlines); ``ValueError`` when unreadable.
    """
    try:
        return render(tokenizer, payload)[0]
    except InputError as error:
        raise ValueError(str(error)) from error


def payload_messages(payload: Mapping[str, Any]) -> list[dict[str, str]]:
    """The payload's ``messages``, each ``{"role": str, "content": str}``; ``InputError`` otherwise."""
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InputError("payload: expected 'messages' (a non-empty list) or 'text'")
    for position, message in enumerate(messages):
        if not (
            isinstance(message, Mapping)
            and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), str)
        ):
            raise InputError(
                f"payload.messages[{position}]: expected {{'role': str, 'content': str}}"
            )
    return [dict(message) for message in messages]
