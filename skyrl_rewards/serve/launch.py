"""Start and stop the service on the connected Ray cluster (``skyrl-rewards serve`` and the tests).

:func:`start_service` refuses a non-loopback host without a token, checks that
the pool runs, starts Ray Serve's HTTP proxy on the head node only (every
node of a loopback cluster shares one port) and deploys the application; it
returns once every replica is up. :func:`stop_service` deletes the application.
"""

from __future__ import annotations

from dataclasses import replace

import ray
from ray import serve

from skyrl_rewards.serve.app import build_app, first_line
from skyrl_rewards.serve.settings import ServeConfig, check_bind


class NoPoolToServeError(ValueError):
    """Raised when the pool the service should serve does not run."""


class ServeAddressError(ValueError):
    """Raised when Ray Serve already listens on another address than the one asked for."""


class ServiceStartError(ValueError):
    """Raised when the application's replicas do not start (the CLI exits 2 with the cause)."""


class ServiceExistsError(ValueError):
    """Raised when an application of the service's name already runs on the cluster."""


def base_url(config: ServeConfig) -> str:
    """``http://HOST:PORT`` plus the route prefix, without a trailing slash."""
    host = f"[{config.host}]" if ":" in config.host else config.host
    return f"http://{host}:{config.port}{config.route_prefix.rstrip('/')}"


def start_service(config: ServeConfig) -> str:
    """Deploy the service for ``config`` on the connected cluster; return its base URL.

    Raises ``ValueError`` for a non-loopback host without a token (before
    anything starts), :class:`NoPoolToServeError` when ``config.pool_name``
    does not run (start it with ``skyrl-rewards pool start``) and
    :class:`ServiceExistsError` when ``config.app_name`` already runs (Serve
    would replace it). Ray Serve has one HTTP host and port per cluster: when
    it already listens elsewhere, :class:`ServeAddressError` (before deploying).
    """
    check_bind(config)
    if config.app_name in serve.status().applications:
        raise ServiceExistsError(
            f"app_name: a service {config.app_name!r} already runs on this cluster; stop it "
            "(Ctrl-C its `skyrl-rewards serve`, or `serve.delete`) before starting another"
        )
    try:
        ray.get_actor(config.pool_name, namespace=config.pool_namespace)
    except ValueError:
        raise NoPoolToServeError(
            f"pool_name: no reward pool {config.pool_name!r} runs in namespace "
            f"{config.pool_namespace!r}; start it first (`skyrl-rewards pool start --config CFG`)"
        ) from None
    serve.start(
        proxy_location="HeadOnly",
        http_options={"host": config.host, "port": config.port},
    )
    check_listening(config)
    try:
        serve.run(
            build_app(config),
            name=config.app_name,
            route_prefix=config.route_prefix,
            blocking=False,
        )
    except RuntimeError as error:  # Serve's "deploying ... failed": a replica did not start
        raise ServiceStartError(
            f"the service did not start: {first_line(error)} (the replicas' logs: "
            "<ray session>/logs/serve/replica_*.log)"
        ) from error
    return base_url(config)


def check_listening(config: ServeConfig) -> None:
    """Raise :class:`ServeAddressError` unless Serve listens on ``config.host:config.port``.

    A Serve already started on the cluster keeps its own HTTP options (``serve.start``
    only logs that the new ones are not applied): a loopback, tokenless service could then
    answer on a public address, or at a URL other than the one printed.
    """
    from ray.serve.context import _get_global_client

    http = _get_global_client().http_config
    if (http.host, http.port) != (config.host, config.port):
        raise ServeAddressError(
            f"host/port: Ray Serve already listens on {http.host}:{http.port} on this cluster, "
            f"not on the {config.host}:{config.port} asked for (Serve has one address per "
            "cluster); serve on that address (with a token unless it is loopback), or stop "
            "Serve first (`serve shutdown`)"
        )
    check_bind(replace(config, host=http.host))


def stop_service(config: ServeConfig) -> None:
    """Delete the application (its replicas stop; the pool and Serve's proxy stay)."""
    serve.delete(config.app_name)
