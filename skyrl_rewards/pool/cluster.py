"""Reaching Ray for a pool: a loopback-only local Ray, or a running cluster, every wait bounded.

- :func:`start_local_ray` starts a fresh Ray on this machine whose every
  socket (GCS, raylet, workers, agents) listens on 127.0.0.1 only, without
  token authentication (nothing outside the machine can reach it), so it
  neither writes ``~/.ray/auth_token`` nor turns token authentication on for
  the user's own ``ray start --head`` later (Ray 2.60's ``ray.init`` does
  both when ``RAY_AUTH_MODE`` is unset). A ``RAY_AUTH_MODE`` the user set is kept.
- :func:`join_cluster` joins a running cluster (``"auto"`` or ``"host:port"``).
  Before Ray's own connect, which retries for minutes, it checks within
  ``timeout_s`` that something listens at the address, and that the cluster
  accepts this process: Ray >= 2.5x clusters started by ``ray start --head``
  ask for a token when ``~/.ray/auth_token`` exists. Ray sends that token
  only when ``RAY_AUTH_MODE=token`` is set, and sets it by itself only for
  ``address="auto"``; this module sets it whenever ``RAY_AUTH_MODE`` is
  unset and a token is available (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``
  or ``~/.ray/auth_token``). A cluster without authentication accepts a
  token too.
- :func:`check_free_cpus` (and :func:`check_free_gpus`, for reward-model
  workers) refuses a pool that asks for more CPUs (GPUs) than the cluster has
  free, instead of leaving its workers pending for ever.

Ctrl-C while Ray starts (in :func:`start_local_ray` and :func:`join_cluster`)
is held until ``ray.init`` returns and delivered then: a Ray interrupted half
way leaves its agents running for a minute after the process has gone
(:func:`sigint_held`; the command line instead ends the processes Ray started
and exits at once).

Every failure raises an error naming the cause and the fix.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import ray

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
CONNECT_TIMEOUT_S = 10.0
"""Longest to wait for a TCP connection to a cluster's address."""
CPU_SETTLE_S = 15.0
"""How long a shortfall of free CPUs is looked at again before it is an error."""
_SETTLE_POLL_S = 0.25
AUTH_MODE_ENV = "RAY_AUTH_MODE"
_CLUSTERS_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_NICENESS_ENV = "RAY_worker_niceness"


class NoClusterError(ConnectionError):
    """No running Ray cluster can be reached at the address."""


class ClusterAuthError(NoClusterError):
    """The cluster runs but refuses this process: it requires Ray token authentication."""


class LocalRayStartError(ConnectionError):
    """A local Ray did not come up within Ray's own start-up limit (a busy machine)."""


class NotEnoughCpusError(ValueError):
    """The pool asks for more CPUs than the cluster has free."""


class NotEnoughGpusError(ValueError):
    """The pool's reward-model workers ask for more GPUs than the cluster has free."""


def token_available() -> bool:
    """Whether Ray finds an authentication token here (env variables or ``~/.ray/auth_token``)."""
    try:
        from ray._raylet import AuthenticationTokenLoader
    except ImportError:  # a Ray without token authentication
        return False
    return bool(AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True))


def _enable_token_auth() -> None:
    """Send the token when ``RAY_AUTH_MODE`` is unset and a token is available."""
    if os.environ.get(AUTH_MODE_ENV) is not None or not token_available():
        return
    from ray._raylet import Config

    os.environ[AUTH_MODE_ENV] = "token"
    Config.initialize("")  # Ray caches the mode; re-read it, as Ray's own auto-connect does
    logger.info("Ray token authentication enabled (%s=token): a token was found", AUTH_MODE_ENV)


def _resolve(address: str) -> tuple[str, str]:
    """``host:port`` of ``address`` and where it came from (``""``: given as such).

    ``auto`` is Ray's own lookup: ``RAY_ADDRESS``, else Ray's current-cluster
    file (written by the last ``ray start`` on this machine, kept after that
    cluster is gone), else a Ray GCS process running here.
    """
    if address != "auto":
        return address, ""
    from ray._common.utils import get_ray_address_file
    from ray._private.services import canonicalize_bootstrap_address_or_die

    try:
        target = canonicalize_bootstrap_address_or_die("auto")
    except ConnectionError as error:
        raise NoClusterError(
            f"address: no running Ray cluster found for address='auto' ({error}); start one "
            "with `ray start --head`, or pass address=HOST:PORT"
        ) from error
    from_env = os.environ.get("RAY_ADDRESS")
    if from_env:
        return target, f"that address is RAY_ADDRESS={from_env} (unset it, or fix it)"
    record = Path(get_ray_address_file(None))
    try:
        recorded = record.read_text().strip()
    except OSError:
        recorded = ""
    if recorded == target:
        return target, (
            f"that address was read from {record}, Ray's record of the last cluster that "
            "`ray start` started on this machine, kept after that cluster stopped; if it is "
            f"gone, delete the record (`rm {record}`) or start a cluster (`ray start --head`)"
        )
    return target, "that address is of a Ray GCS process running on this machine"


def _probe(address: str, timeout_s: float, origin: str = "") -> None:
    host, _, port = address.rpartition(":")
    try:
        port_number = int(port)
    except ValueError as error:
        raise NoClusterError(
            f"address: {address!r} is not 'auto' or HOST:PORT (e.g. 10.0.0.5:6379)"
        ) from error
    try:
        with socket.create_connection((host.strip("[]"), port_number), timeout=timeout_s):
            pass
    except OSError as error:
        fix = (
            f"; {origin}; or give the cluster's address (pool status/stop: --address "
            "HOST:PORT; pool start, score: address=HOST:PORT)"
            if origin
            else f"; start one with `ray start --head --port={port}` on that host, or fix the "
            "address (`ray status` on the head prints it)"
        )
        raise NoClusterError(
            f"address: no Ray cluster at {address} (nothing accepted a connection within "
            f"{timeout_s:g}s: {error}){fix}"
        ) from error


def _check_auth(address: str) -> None:
    """Ask the cluster's GCS once; an authentication refusal comes back at once."""
    from ray._raylet import GcsClient
    from ray.exceptions import AuthenticationError

    try:
        GcsClient(address=address)
    except AuthenticationError as error:
        mode = os.environ.get(AUTH_MODE_ENV, "unset")
        raise ClusterAuthError(
            f"address: the Ray cluster at {address} requires token authentication and "
            f"refused this process ({AUTH_MODE_ENV}={mode}, token found here: "
            f"{token_available()}). Fix: on the head node `ray get-auth-token` prints the "
            "token; put it in ~/.ray/auth_token on this machine or export RAY_AUTH_TOKEN, "
            f"and leave {AUTH_MODE_ENV} unset or set it to 'token'"
        ) from error


def join_cluster(address: str, namespace: str, *, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Connect this process to the running cluster at ``address`` (``auto`` or ``host:port``).

    Raises :class:`NoClusterError` within about ``timeout_s`` when nothing
    listens there, :class:`ClusterAuthError` when the cluster wants a token
    this process does not have.

    >>> join_cluster("127.0.0.1:1", "ns", timeout_s=1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    skyrl_rewards.pool.cluster.NoClusterError: address: no Ray cluster at 127.0.0.1:1 ...
    """
    _enable_token_auth()
    target, origin = _resolve(address)
    _probe(target, timeout_s, origin)
    _check_auth(target)
    try:
        with sigint_held():
            ray.init(address=target, namespace=namespace, log_to_driver=False)
    except ConnectionError as error:
        raise NoClusterError(
            f"address: could not join the Ray cluster at {target} ({error}); check that "
            "`ray status --address` works from this machine"
        ) from error


@contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """``os.environ[name] = value`` inside the block; the earlier value (or none) after it."""
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


@contextmanager
def _loopback_node() -> Iterator[None]:
    """While Ray starts, make it resolve this node's address to 127.0.0.1.

    Ray turns ``_node_ip_address="127.0.0.1"`` into the host's address unless
    its multi-node support is off (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``,
    read once at import into ``ray_constants``); then GCS, raylet, workers and
    agents all listen on loopback. Both are set for the start only.
    """
    from ray._private import ray_constants

    saved_flag = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        with _environment(_CLUSTERS_ENV, "0"):
            yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag


@contextmanager
def sigint_held() -> Iterator[None]:
    """Hold SIGINT (Ctrl-C) inside the block; one that came is delivered when the block ends.

    Ray's start is bounded but cannot be undone half way: interrupted inside
    ``ray.init`` it leaves agents running and can crash the process at exit.
    A SIGINT received in the block is re-raised to the handler in place before
    it (by default: ``KeyboardInterrupt`` right after the block). Outside the
    main thread, where Python runs no signal handler, the block runs as is.
    A handler with a ``hold(what)`` context manager (the command line's
    :class:`~skyrl_rewards.cli.interrupts.StopOnCtrlC`) stays in place and takes
    the interrupt itself: it says at once that it is stopping, ends the
    processes Ray has started and exits.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    hold = getattr(signal.getsignal(signal.SIGINT), "hold", None)
    # a handler that holds Ctrl-C itself (the command line's: it answers at once)
    if hold is not None:
        with hold("Ray's start"):
            yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            signal.raise_signal(signal.SIGINT)


@contextmanager
def _no_token() -> Iterator[None]:
    """While a local Ray starts, ``RAY_AUTH_MODE=disabled`` unless the user set a mode.

    With the mode unset, Ray 2.60's ``ray.init`` of a new cluster turns token
    authentication on and writes ``~/.ray/auth_token`` when there is none;
    from then on every ``ray start --head`` of the user asks for that token.
    A loopback-only Ray needs none. Ray caches the mode: it is re-read on
    entry, as Ray's own token set-up does; Ray's processes keep the mode they
    started with.
    """
    if os.environ.get(AUTH_MODE_ENV) is not None:
        yield
        return
    from ray._raylet import Config

    with _environment(AUTH_MODE_ENV, "disabled"):
        Config.initialize("")
        yield


def _worker_niceness(niceness: int | None) -> AbstractContextManager[None]:
    """While Ray starts, have its raylet start workers at ``niceness`` (Ray's default: 15).

    The raylet reads ``RAY_worker_niceness`` from the environment it inherits.
    Raising a process's niceness needs no privileges, lowering it does: a
    worker started at 15 stays there unless privileged, and imports its
    rewards at 15 either way (a pool start took a median 22.7 s instead of
    8.6 s next to two busy CPUs: ``scripts/benchmarks/bench_pool_start.py``). A value the user set is kept; so is Ray's when
    ``niceness`` is None or below 0.
    """
    if niceness is None or niceness < 0 or _NICENESS_ENV in os.environ:
        return nullcontext()
    return _environment(_NICENESS_ENV, str(niceness))


def start_local_ray(namespace: str, *, worker_niceness: int | None = None) -> None:
    """Start a fresh Ray on this machine: every socket on 127.0.0.1, no dashboard.

    ``worker_niceness`` (0 to 19) is the niceness Ray starts its workers at
    (``None``: Ray's 15).
    """
    with sigint_held(), _loopback_node(), _worker_niceness(worker_niceness), _no_token():
        try:
            ray.init(
                address="local",
                _node_ip_address=LOOPBACK,
                include_dashboard=False,
                namespace=namespace,
                log_to_driver=False,
            )
        except Exception as error:  # noqa: BLE001 - Ray raises a bare Exception for this one
            if "timed out during startup" not in str(error):
                raise
            raise LocalRayStartError(
                f"Ray's local start timed out ({error}); the machine is busy (load "
                f"{os.getloadavg()[0]:.0f} on {os.cpu_count()} CPUs): run it again when it is "
                "quieter, or score a small input in this process (skyrl-rewards score --local)"
            ) from error


def _free(resource: str, needed: float, settle_s: float) -> float | None:
    """``None`` when ``needed`` of ``resource`` is free now; else how much is free.

    Ray's view of free resources lags about a second behind actors that just
    ended (a pool stopped right before), so a shortfall is looked at again for
    up to ``settle_s`` seconds before it counts.
    """
    deadline = time.monotonic() + settle_s
    while True:
        free = ray.available_resources().get(resource, 0.0)
        if needed <= free + 1e-9:
            return None
        if time.monotonic() >= deadline:
            return free
        time.sleep(_SETTLE_POLL_S)


def check_free_cpus(
    num_workers: int, num_cpus_per_worker: float, *, settle_s: float = CPU_SETTLE_S
) -> None:
    """Raise :class:`NotEnoughCpusError` when the workers cannot all be placed now.

    Compares ``num_workers * num_cpus_per_worker`` with the CPUs the cluster
    has free (after ``settle_s``, see :func:`_free`).
    """
    needed = num_workers * num_cpus_per_worker
    free = _free("CPU", needed, settle_s)
    if free is None:
        return
    total = ray.cluster_resources().get("CPU", 0.0)
    raise NotEnoughCpusError(
        f"num_workers: the pool asks for {needed:g} CPUs ({num_workers} workers x "
        f"{num_cpus_per_worker:g} num_cpus_per_worker) but the cluster has {free:g} of "
        f"{total:g} CPUs free (other pools or jobs hold the rest); lower num_workers or "
        "num_cpus_per_worker, stop another pool (`skyrl-rewards pool stop --name NAME`), "
        "or add nodes"
    )


def check_free_gpus(
    num_workers: int, num_gpus_per_worker: float, *, settle_s: float = CPU_SETTLE_S
) -> None:
    """Raise :class:`NotEnoughGpusError` when the reward-model workers' GPUs are not free now."""
    needed = num_workers * num_gpus_per_worker
    if needed <= 0:
        return
    free = _free("GPU", needed, settle_s)
    if free is None:
        return
    total = ray.cluster_resources().get("GPU", 0.0)
    raise NotEnoughGpusError(
        f"model_workers.num_gpus_per_worker: the reward-model workers ask for {needed:g} GPUs "
        f"({num_workers} workers x {num_gpus_per_worker:g}) but the cluster has {free:g} of "
        f"{total:g} GPUs free; lower model_workers.num_workers or num_gpus_per_worker "
        "(0.5 packs two workers on a GPU; 0 runs the model on the CPU), or add GPU nodes"
    )
