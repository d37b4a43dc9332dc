"""``skyrl-rewards serve``: its options, and the service run until Ctrl-C (docs/service.md).

Without ``address`` a loopback Ray is started for it; with ``address=auto`` (or
``host:port``) it joins that cluster. The pool named in the config is served
if it runs, else started (and stopped again at the end). Ctrl-C deletes the
application and stops the pool it started.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from skyrl_rewards.cli.phase_lines import phases_shown
from skyrl_rewards.pool.config import PoolConfig
from skyrl_rewards.serve.settings import TOKEN_ENV, ServeConfig


def add_serve_parser(commands: Any, func: Callable[[argparse.Namespace], int]) -> None:
    """Add the ``serve`` command, run by ``func``, to the command line's subparsers."""
    served = commands.add_parser(
        "serve",
        help="serve a reward pool over HTTP (Ray Serve): /v1/score, /get_reward, /verify",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    served.add_argument(
        "--config", required=True, help="pool YAML (configs/pool.yaml) or a reward mix"
    )
    served.add_argument(
        "--host", default=ServeConfig.host, help="address to listen on (not loopback: a token)"
    )
    served.add_argument("--port", type=int, default=ServeConfig.port, help="HTTP port")
    served.add_argument(
        "--token-file",
        default=None,
        help=f"file holding the token clients must send (default: ${TOKEN_ENV}, else none)",
    )
    served.add_argument(
        "--scorers", type=int, default=ServeConfig.num_scorers, help="scorer replicas"
    )
    served.add_argument(
        "--max-rows", type=int, default=ServeConfig.max_rows, help="most rows in one request"
    )
    served.add_argument(
        "--max-queued-rows",
        type=int,
        default=ServeConfig.max_queued_rows,
        help="rows in flight before requests get 429",
    )
    served.add_argument(
        "overrides",
        nargs="*",
        help="pool config overrides key=value (address=auto joins a cluster)",
    )
    served.set_defaults(func=func)


def serve_until_stopped(cfg: PoolConfig, settings: ServeConfig) -> int:
    """Start Ray (or join ``cfg.address``), the pool if it is not running, and the service;
    print its URL and serve until ``KeyboardInterrupt``; then stop what was started."""
    import ray
    from ray import serve

    from skyrl_rewards.pool import service as pool_service
    from skyrl_rewards.pool.cluster import join_cluster, start_local_ray
    from skyrl_rewards.serve.launch import start_service, stop_service

    with phases_shown("serve"):
        if cfg.address is None:
            start_local_ray(cfg.namespace, worker_niceness=cfg.worker_niceness)
        else:
            join_cluster(cfg.address, cfg.namespace)
    started_pool = False
    try:
        ray.get_actor(cfg.name, namespace=cfg.namespace)
        print(f"skyrl-rewards serve: serving the running reward pool {cfg.name!r}")
    except ValueError:
        with phases_shown("serve"):
            pool_service.start(cfg)
        started_pool = True
    deployed = False
    try:
        url = start_service(settings)
        deployed = True
        token = ", a token required" if settings.token else ""
        print(
            f"skyrl-rewards serve: {url} (POST /v1/score, /get_reward, /verify; GET "
            f"/v1/metrics, /v1/health{token}). Ctrl-C stops it.",
            flush=True,
        )
        while True:
            time.sleep(3600)
    finally:
        if deployed and settings.app_name in serve.status().applications:
            stop_service(settings)  # this command's own service, never another's
        if started_pool:
            pool_service.stop(cfg.name, namespace=cfg.namespace)
