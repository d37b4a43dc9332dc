"""Tokenizers by name or path, failing at once (with the fix) when the Hugging Face Hub is out of reach.

``transformers`` retries an unreachable hub for about 50 s before it gives
up. Here a name is looked up in this order, and every step is bounded:

1. an existing local folder: loaded from disk, never from the network;
2. the local Hugging Face cache (``local_files_only=True``): no network;
3. the hub, only if it is allowed (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``
   unset) and answers a TCP connect within :data:`HUB_PROBE_TIMEOUT_S`.

Otherwise ``ValueError`` says why and how to fix it: pass a local folder.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any
from urllib.parse import urlsplit

HUB_PROBE_TIMEOUT_S = 3.0
"""Longest wait for the hub to accept a connection before the tokenizer is declared unreachable."""

_FIX = (
    "Pass a local folder instead: where there is network, run "
    "AutoTokenizer.from_pretrained({name!r}).save_pretrained('DIR') (or "
    "`hf download {name} --local-dir DIR`), copy DIR here and give tokenizer='DIR'"
)


def load_pretrained_tokenizer(name: str, *, probe_timeout_s: float = HUB_PROBE_TIMEOUT_S) -> Any:
    """``AutoTokenizer.from_pretrained`` for a folder or hub name, in the order of the module doc.

    Raises ``ValueError`` naming ``tokenizer``, the cause and the fix when the
    folder does not hold a tokenizer, or the name is neither cached nor
    reachable.

    >>> load_pretrained_tokenizer("/no/such/folder")
    Traceback (most recent call last):
    ...
    ValueError: tokenizer: '/no/such/folder' is not a folder (it looks like a path, not a hub name)
    """
    if os.path.isdir(name):
        return _from_pretrained(name, f"cannot load the folder {name!r}", local_files_only=True)
    if _looks_like_path(name):
        raise ValueError(
            f"tokenizer: {name!r} is not a folder (it looks like a path, not a hub name)"
        )
    fix = _FIX.format(name=name)
    if _in_local_cache(name):
        return _from_pretrained(
            name, f"cannot load {name!r} from the local cache", local_files_only=True
        )
    if hub_offline():
        raise ValueError(
            f"tokenizer: {name!r} is not in the local Hugging Face cache and the hub is switched "
            f"off (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set). {fix}"
        )
    endpoint = hub_endpoint()
    problem = probe(endpoint, probe_timeout_s)
    if problem is not None:
        raise ValueError(
            f"tokenizer: {name!r} is not in the local Hugging Face cache and the hub "
            f"({endpoint}) cannot be reached: {problem}. {fix}"
        )
    return _from_pretrained(name, f"cannot load {name!r}", fix=fix)


def _from_pretrained(name: str, what: str, fix: str = "", **kwargs: Any) -> Any:
    from transformers import AutoTokenizer  # imported only when needed: it takes seconds

    try:
        return AutoTokenizer.from_pretrained(name, **kwargs)
    except (OSError, ValueError) as error:
        raise ValueError(f"tokenizer: {what}: {error}{'. ' + fix if fix else ''}") from error


def _in_local_cache(name: str) -> bool:
    """True when the hub cache holds ``name``'s tokenizer config (no network, no transformers import)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(name, "tokenizer_config.json"), str)
    except ValueError:  # not a valid repo id
        return False


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` is set to a true value."""
    return any(
        os.environ.get(var, "").strip().upper() in {"1", "ON", "YES", "TRUE"}
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def hub_endpoint() -> str:
    """The hub's base URL: ``HF_ENDPOINT`` if set, else ``huggingface_hub``'s default."""
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT") or constants.ENDPOINT


def probe(url: str, timeout_s: float) -> str | None:
    """``None`` when ``url``'s host accepts a TCP connection within ``timeout_s``, else why not.

    Name resolution has no timeout of its own, so the whole probe runs in a
    daemon thread that is waited for at most ``timeout_s``.
    """
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return f"{url!r} names no host"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                outcome.append(None)
        except OSError as error:
            outcome.append(f"{type(error).__name__}: {error}")

    thread = threading.Thread(target=connect, name="hub-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        return f"no answer within {timeout_s:g} s"
    return outcome[0]


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.count("/") > 1
