"""The service's settings (:class:`ServeConfig`) and the rule for where it may listen.

Loopback by default. A host that other machines can reach needs a token: the
service refuses to start without one (:func:`check_bind`), and with a token set
every scoring route answers 401 to a request that does not carry it
(``Authorization: Bearer TOKEN`` or ``x-api-key: TOKEN``). The token comes from
a file or the environment variable :data:`TOKEN_ENV`, never from the command line
(where ``ps`` shows it to every user of the machine).

>>> check_bind(ServeConfig(host="127.0.0.1"))  # loopback: no token needed
>>> is_loopback("0.0.0.0")
False
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

TOKEN_ENV = "SKYRL_REWARDS_SERVE_TOKEN"
"""The environment variable that holds the service's token when no token file is named."""


@dataclass(frozen=True)
class ServeConfig:
    """How ``skyrl-rewards serve`` listens, which pool it serves and what it admits."""

    host: str = "127.0.0.1"
    """Address the HTTP proxy listens on; anything but loopback needs ``token``."""
    port: int = 8000
    """HTTP port of the proxy (Ray Serve's, on the head node)."""
    token: str | None = field(default=None, repr=False)
    """Bearer token every scoring route requires (None: no token; loopback only)."""
    app_name: str = "skyrl_rewards"
    """The Ray Serve application's name."""
    route_prefix: str = "/"
    """Where the application's routes start (``/`` : ``/v1/score``, ``/get_reward``, ...)."""
    pool_name: str = "skyrl_rewards_pool"
    """The running reward pool the scorers connect to (``RewardPool.connect``)."""
    pool_namespace: str = "skyrl_rewards"
    """Its Ray namespace."""
    num_scorers: int = 2
    """Scorer replicas (each a client of the pool); a killed one's requests run again on another."""
    scorer_max_ongoing_requests: int = 256
    """Requests one scorer replica takes at once (they wait on the pool, not on the replica's CPU)."""
    max_body_bytes: int = 32 * 1024 * 1024
    """Largest request body; a larger one is answered 413 before it is read."""
    max_rows: int = 4096
    """Most rows in one request; more is answered 413."""
    max_queued_rows: int = 16384
    """Rows admitted and not yet answered, per gateway replica; past it a request gets 429."""
    max_queued_bytes: int = 256 * 1024 * 1024
    """Request bodies being read or scored, per gateway replica (a body without a
    ``Content-Length`` counts as ``max_body_bytes``); past it a request gets 429 before its
    body is read, so many large requests at once cannot exhaust the gateway's memory."""
    retry_after_s: int = 1
    """The ``Retry-After`` of a 429, in seconds."""
    request_timeout_s: float = 900.0
    """Longest a request waits for its scores (then 504); the pool's own limits come first."""

    def __post_init__(self) -> None:
        for name in ("num_scorers", "scorer_max_ongoing_requests", "max_rows", "retry_after_s"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)}")
        if self.max_body_bytes < 1024:
            raise ValueError(f"max_body_bytes: must be at least 1024, got {self.max_body_bytes}")
        if self.max_queued_bytes < self.max_body_bytes:
            raise ValueError(
                f"max_queued_bytes: must be at least max_body_bytes ({self.max_body_bytes}), "
                f"got {self.max_queued_bytes}: a full-size request could never be admitted"
            )
        if self.max_queued_rows < self.max_rows:
            raise ValueError(
                f"max_queued_rows: must be at least max_rows ({self.max_rows}), "
                f"got {self.max_queued_rows}: a full-size request could never be admitted"
            )
        if not 0 < self.port < 65536:
            raise ValueError(f"port: must be in 1..65535, got {self.port}")
        if self.token is not None and not self.token.strip():
            raise ValueError("token: empty; give a token of at least 16 characters or none")
        if self.token is not None and len(self.token.strip()) < 16:
            raise ValueError("token: shorter than 16 characters; use e.g. `openssl rand -hex 24`")


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable only from this machine (``localhost``, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def check_bind(config: ServeConfig) -> None:
    """Raise ``ValueError`` when ``config`` would listen beyond this machine without a token."""
    if config.token is None and not is_loopback(config.host):
        raise ValueError(
            f"host: {config.host} is reachable from other machines and no token is set; "
            f"set one with --token-file FILE or the {TOKEN_ENV} environment variable, "
            "or listen on 127.0.0.1"
        )


def read_token(token_file: str | Path | None) -> str | None:
    """The token in ``token_file`` (stripped), else in :data:`TOKEN_ENV`, else ``None``.

    Raises ``ValueError`` naming the file when it cannot be read or is empty.
    """
    if token_file is None:
        return (os.environ.get(TOKEN_ENV) or "").strip() or None
    try:
        token = Path(token_file).read_text(encoding="utf-8").strip()
    except OSError as error:
        raise ValueError(f"--token-file {token_file}: cannot be read ({error.strerror})") from None
    if not token:
        raise ValueError(f"--token-file {token_file}: empty")
    return token
