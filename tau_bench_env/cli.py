"""Command line: ``tau-bench-env rescore RESULTS.json --domain airline --backend tau2 [--json]``.

``tau-bench-env eval ...`` evaluates a policy endpoint (see :mod:`tau_bench_env.eval_cli`).

Re-scores recorded runs (tau-bench's results format) with this package's
reward (options: ``--score-truncated``, ``--strict-outputs``) and prints runs, success rate, pass^k per k and agreement with the
recorded rewards; ``--json`` prints one JSON object with the keys ``runs``,
``success_rate``, ``agreement``, ``pass_hat_k`` (and ``disagreements``).
A file whose runs are not tasks of ``--domain`` (tools or users the domain
does not have) is refused before anything is replayed.
Exit status: 0 on success, 2 on bad input (a file of another domain included).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from tau_bench_env.backends import BACKENDS, load_domain
from tau_bench_env.eval_cli import add_eval_parser, run_eval
from tau_bench_env.rescore import rescore, summarize


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tau-bench-env", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rescore_cmd = commands.add_parser("rescore", help="re-score recorded tau-bench runs")
    rescore_cmd.add_argument(
        "results", type=Path, help="results JSON written by tau-bench's run.py"
    )
    rescore_cmd.add_argument("--domain", required=True, choices=["airline", "retail"])
    rescore_cmd.add_argument("--backend", default="tau2", choices=sorted(BACKENDS))
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
    rescore_cmd.add_argument("--json", action="store_true", help="print one JSON object")
    add_eval_parser(commands)
    return parser


def _report(summary: dict, results: Path, backend: str, domain: str) -> str:
    lines = [
        f"results: {results}",
        f"backend: {backend}  domain: {domain}",
        f"runs: {summary['runs']}",
        f"success rate: {summary['success_rate']:.4f}",
        "pass^k:",
        *(f"  k={k}: {value:.4f}" for k, value in summary["pass_hat_k"].items()),
        f"agreement with recorded rewards: {summary['agreement']:.4f}",
    ]
    for item in summary["disagreements"]:
        lines.append(
            f"  differs: task_id={item['task_id']} trial={item['trial']} "
            f"recorded={item['recorded_reward']} rescored={item['reward']} "
            f"failed={','.join(item['failed']) or '-'}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tau-bench-env`` console script."""
    args = _parser().parse_args(argv)
    if args.command == "eval":
        return run_eval(args)
    try:
        runs = json.loads(args.results.read_text(encoding="utf-8"))
        domain = load_domain(args.backend, args.domain)
        scores = rescore(
            domain,
            runs,
            score_truncated=args.score_truncated,
            strict_outputs=args.strict_outputs,
        )
        summary = summarize(scores)
    except (OSError, ValueError) as error:
        print(f"tau-bench-env: error: {error}", file=sys.stderr)  # noqa: T201 - CLI output
        return 2
    if args.json:
        print(json.dumps(summary, sort_keys=True))  # noqa: T201 - CLI output
    else:
        print(_report(summary, args.results, args.backend, args.domain))  # noqa: T201 - CLI output
    return 0


if __name__ == "__main__":
    sys.exit(main())
