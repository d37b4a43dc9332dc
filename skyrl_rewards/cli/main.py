"""The ``skyrl-rewards`` command line.

Commands::

    skyrl-rewards score --config CFG --input IN.jsonl --output OUT.jsonl [key=value ...]
    skyrl-rewards check --config CFG --input IN.jsonl [key=value ...]
    skyrl-rewards bench [options of scripts/benchmarks/bench_pool.py]
    skyrl-rewards pool start --config CFG [key=value ...]
    skyrl-rewards pool status --name NAME [--address ADDR]
    skyrl-rewards pool stop --name NAME [--address ADDR]
    skyrl-rewards judge-server [--host HOST] [--port PORT]
    skyrl-rewards serve --config CFG [--host HOST] [--port PORT] [--token-file F] [key=value ...]

``CFG`` is an omegaconf YAML file: a reward mix (``configs/rec.yaml``,
``configs/detection.yaml``, ``configs/math.yaml``) and/or pool settings
(``configs/pool.yaml``), named by its path or, for a bundled one, by its
bare name (``rec.yaml``) or ``bundled:rec.yaml``; ``key=value`` arguments
override it (``num_workers=4 rewards.iou.weight=2``: merged into the mix).
Each command prints the file it read and the resulting mix.

``score`` checks the config (every reward name and parameter), the input
and the output path first, then scores a small input (at most
:data:`~skyrl_rewards.cli.in_process.IN_PROCESS_MAX_ROWS` rows, rule-based
rewards) in this process, without Ray (``--local`` asks for that on any
size); a larger input, a mix with a judge or reward model, ``--pool`` or
``address=...`` goes through a reward pool: a local Ray started for it (each
start-up phase printed with its time), or the cluster at ``address``. It
says which and why in one line, scores every row with a progress bar,
writes each row with its ``reward`` (total, components, statuses, errors) to
``OUT.jsonl``, prints a summary table per component and writes one
histogram PNG per component next to the output. Masked rows (a component
timed out or errored: its value is a fallback) stay out of the statistics
and plots, are counted per component, and are listed by line. ``check`` is
the pre-flight pass: it lists the rows that would score as dataset errors.

``serve`` serves a pool over HTTP until Ctrl-C (:mod:`skyrl_rewards.serve`,
docs/service.md): the batch route ``/v1/score``, OpenRLHF's ``/get_reward``,
NeMo-Gym's ``/verify``; loopback unless a token is set.

``judge-server`` serves a rule-based stand-in for a judge model (an
OpenAI-compatible endpoint, :mod:`skyrl_rewards.cli.judge_server`) until
Ctrl-C, to try judge configs without a GPU.

Rows are named by their line in the input file, counted from 1.

Exit codes: 0 success; 1 the dataset has problems (``check``) or some rows
were masked (``score`` without ``--allow-errors``; the scores are still
written); 2 bad usage, config or input (invalid YAML, an unknown reward, an
empty input, an output that cannot be written; the message names the field
and the line), reported before Ray starts; 130 interrupted. A Ctrl-C is
answered at once with what stopping waits for; the command then stops what it
started and says, for ``score``, which rows were written and how to go on. A
second Ctrl-C ends it at once, its Ray processes killed
(:mod:`skyrl_rewards.cli.interrupts`).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf.errors import OmegaConfBaseException

from skyrl_rewards.cli.interrupts import INTERRUPTED, StopOnCtrlC, ctrl_c_handled
from skyrl_rewards.cli.judge_server import DEFAULT_HOST as DEFAULT_JUDGE_HOST
from skyrl_rewards.cli.judge_server import DEFAULT_MODEL as DEFAULT_JUDGE_MODEL
from skyrl_rewards.cli.judge_server import DEFAULT_PORT as DEFAULT_JUDGE_PORT
from skyrl_rewards.cli.phase_lines import phases_shown
from skyrl_rewards.cli.serve_command import add_serve_parser, serve_until_stopped
from skyrl_rewards.data.jsonl import check_writable, read_numbered_rows, to_samples, write_rows
from skyrl_rewards.pool.config import PoolConfig, load_pool_config
from skyrl_rewards.rewards.contract.result import RewardResult

PROGRESS_CHUNK = 16
POOL_COUNTERS = (
    "items",
    "worker_calls",
    "cache_hits",
    "timeouts",
    "errors",
    "retries",
    "worker_restarts",
)


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> PoolConfig:
    """Pool defaults <- the YAML at ``path`` <- ``key=value`` overrides.

    Raises ``ValueError`` naming the file, the key or the override that is wrong
    (invalid YAML included: the message gives the line).
    """
    for override in overrides:
        if "=" not in override:
            raise ValueError(
                f"override {override!r} has no '=': write it key=value "
                f"(e.g. {override}={'1.0' if override.endswith('weight') else 'VALUE'})"
            )
    try:
        return load_pool_config(Path(path), overrides)
    except yaml.YAMLError as e:
        where = f"config {path}" + (f" with overrides {list(overrides)}" if overrides else "")
        raise ValueError(f"{where}: not valid YAML: {_one_line(e)}") from e
    except OmegaConfBaseException as e:
        raise ValueError(f"config {path} with overrides {list(overrides)}: {e}") from e


def report_config(path: str | Path, cfg: PoolConfig) -> None:
    """Print which config file ``path`` named (a bundled one is marked so) and the mix it gives.

    The mix is printed after the overrides: ``rewards.NAME.KEY=value`` changes
    or adds one entry of the file's mix, it does not replace the mix.
    """
    from skyrl_rewards.bundled import describe

    print(f"config: {describe(path)}")
    print(f"rewards: {format_mix(cfg.rewards)}")


def format_mix(rewards: Mapping[str, Mapping[str, Any]]) -> str:
    """``iou (weight 1.0), format_rec (weight 1.0)``: the mix in config order.

    >>> format_mix({"iou": {"weight": 2}, "format": {}})
    'iou (weight 2), format (weight 1.0)'
    """
    return ", ".join(
        f"{name} (weight {entry.get('weight', 1.0)})" for name, entry in rewards.items()
    )


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


def load_rows(path: str | Path, verb: str) -> tuple[list[dict[str, Any]], list[int]]:
    """The input's rows and their line numbers; ``ValueError`` when there is nothing to ``verb``.

    A missing or unreadable input is an ``OSError`` naming ``--input``, the
    path and, for a relative path, the directory it was looked for in.
    """
    try:
        rows, lines = read_numbered_rows(path)
    except OSError as error:
        where = "" if Path(path).is_absolute() else f" (looked for in {Path.cwd()})"
        why = "no such file" if isinstance(error, FileNotFoundError) else error.strerror or error
        raise OSError(f"--input: cannot read {path}: {why}{where}") from error
    if not rows:
        raise ValueError(f"nothing to {verb}: {path} has no rows (it is empty or blank lines only)")
    return rows, lines


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def score_chunks(
    pool: Any, samples: Sequence[dict[str, Any]], *, progress: bool = True
) -> Iterator[list[RewardResult]]:
    """Score ``samples`` through ``pool`` in chunks, yielding each chunk's results (tqdm bar)."""
    from tqdm import tqdm

    with tqdm(
        total=len(samples), unit="row", desc="scoring", disable=not progress, file=sys.stderr
    ) as bar:
        for chunk in _chunks(samples, PROGRESS_CHUNK):
            results = pool.score(list(chunk))
            bar.update(len(chunk))
            yield results


def _count_lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


def interrupted_message(scored: int, lines: Sequence[int], input_path: Path, output: Path) -> str:
    """The one line ``score`` prints on Ctrl-C: which rows were written and how to go on."""
    total = len(lines)
    if not scored:
        return (
            f"skyrl-rewards score: interrupted before any row was scored (0 of {total}); "
            f"nothing written to {output}; rerun the same command to score {input_path}"
        )
    rest = f"tail -n +{lines[scored]} {input_path} > rest.jsonl" if scored < total else ""
    return (
        f"skyrl-rewards score: interrupted: {scored} of {total} rows scored and written to "
        f"{output} (input lines {lines[0]}-{lines[scored - 1]}); rerun the same command to "
        f"score them all"
        + (f", or score the rest on its own: `{rest}`, then --input rest.jsonl" if rest else "")
    )


def _stop_ray() -> None:
    """After Ctrl-C: stop (or leave) this process's Ray now, every process of a local one with it."""
    if "ray" not in sys.modules:  # scored in this process: no Ray to stop
        return
    import ray

    if ray.is_initialized():
        ray.shutdown()


def unjudged_warning(mix: Any, samples: Sequence[Mapping[str, Any]], input_path: Path) -> str:
    """The warning for a mix with a judge that no row of the input goes to; ``""`` otherwise.

    The ``accuracy`` reward asks its judge only for rows whose
    ``accu_reward_method`` is ``llm``: on a file without such rows a judge
    config scores by rules alone and the judge is never asked.
    """
    from skyrl_rewards.bundled import SAMPLE_DATA
    from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE

    judged = [name for name in mix.names if JUDGE_LANE in mix.component(name).lanes()]
    if not judged or any(
        mix.lane(name, sample) == JUDGE_LANE for sample in samples for name in judged
    ):
        return ""
    methods = Counter(str(sample.get("accu_reward_method", "default")) for sample in samples)
    found = ", ".join(f"{method} {n}" for method, n in methods.most_common())
    return (
        f"skyrl-rewards score: warning: the config has a judge ({', '.join(judged)}) but no row "
        f"of {input_path} goes to it, so it will get no request: accuracy asks its judge only "
        f"for rows with accu_reward_method: llm (this file's accu_reward_method: {found}). "
        f"A sample with such rows: {SAMPLE_DATA / 'vqa.jsonl'}"
    )


MAX_LISTED_ROWS = 20
"""Masked rows listed by line after the table; the rest are counted."""


def cmd_score(args: argparse.Namespace) -> int:
    """``score``: rows in, scored rows, summary table and histograms out.

    Everything that can be checked without Ray is checked first: the config
    (and its mix), the input rows, the output path.
    """
    from skyrl_rewards.cli.in_process import IN_PROCESS, InProcessScorer, choose_runner
    from skyrl_rewards.cli.summary import (
        clamped_lines,
        format_table,
        judge_lines,
        masked_rows,
        summarize,
        unreachable_lines,
        write_histograms,
    )
    from skyrl_rewards.rewards.mix import RewardMix

    cfg = load_config(args.config, args.overrides)
    mix = RewardMix.from_config(cfg.rewards)  # unknown names and bad parameters, before Ray
    report_config(args.config, cfg)
    input_path = Path(args.input)
    rows, lines = load_rows(input_path, "score")
    samples = to_samples(rows, input_path.resolve().parent, lines)
    output = check_writable(args.output)
    runner, why = choose_runner(
        rows=len(rows), mix=mix, address=cfg.address, local=args.local, pool=args.pool
    )
    unjudged = unjudged_warning(mix, samples, input_path)
    if unjudged:
        print(unjudged, file=sys.stderr)
    where = "in this process, without Ray" if runner == IN_PROCESS else "on a Ray reward pool"
    print(f"skyrl-rewards score: scoring {where} ({why})", file=sys.stderr, flush=True)

    results: list[RewardResult] = []
    writing: list[bool] = []  # set once write_rows has opened the output

    def scored_rows() -> Iterator[dict[str, Any]]:
        writing.append(True)
        for chunk in score_chunks(pool, samples, progress=not args.no_progress):
            start = len(results)
            results.extend(chunk)
            for row, result in zip(rows[start : len(results)], chunk, strict=True):
                yield {**row, "reward": result.to_dict()}

    try:
        if runner == IN_PROCESS:
            pool: Any = InProcessScorer(mix)
        else:
            from skyrl_rewards.pool.reward_pool import RewardPool

            args.ctrl_c.cleanup = (
                "the pool's workers"
                + ("" if cfg.address else " and this command's local Ray")
                + " to stop"
            )
            # a Ctrl-C while Ray starts ends the command there: nothing scored yet
            args.ctrl_c.ended = interrupted_message(0, lines, input_path, output)
            with phases_shown("score"):
                pool = RewardPool.from_config(cfg)
        try:
            write_rows(output, scored_rows())  # row by row: an interrupted run keeps what it has
            metrics = pool.metrics()
        finally:
            pool.shutdown()
    except KeyboardInterrupt:
        _stop_ray()
        written = _count_lines(output) if writing else 0
        print(interrupted_message(written, lines, input_path, output), file=sys.stderr)
        return INTERRUPTED
    weights = {n: float(e.get("weight", 1.0)) for n, e in cfg.rewards.items()}
    unreachable = unreachable_lines(metrics.get("judge", {}))
    for line in unreachable:
        print(line, end="\n\n")  # once, above the table: the cause of the rows masked below
    print(format_table(summarize(results, weights)))
    print(f"\nscored {len(results)} rows -> {output}", *clamped_lines(results), sep="\n")
    for path in write_histograms(results, output, weights):
        print(f"histogram: {path}")
    latency = metrics.get("latency_s", {})
    counts = ", ".join(f"{key} {metrics[key]}" for key in POOL_COUNTERS if key in metrics)
    label = "in-process" if runner == IN_PROCESS else "pool"
    print(
        f"{label}: {counts}; latency p50 {latency.get('p50', 0.0):.3f}s "
        f"p99 {latency.get('p99', 0.0):.3f}s"
    )
    for line in judge_lines(metrics.get("judge", {})):
        print(line)
    masked = masked_rows(rows, lines, results)
    if not masked:
        return 0
    print(
        f"\n{len(masked)} of {len(results)} rows masked (a component timed out or errored; "
        "their fallback values are left out of the statistics and plots):"
    )
    for line in masked[:MAX_LISTED_ROWS]:
        print(f"  {line}")
    if len(masked) > MAX_LISTED_ROWS:
        print(f"  ... and {len(masked) - MAX_LISTED_ROWS} more (should_mask in {output})")
    if args.allow_errors:
        return 0
    first = ", ".join(line.split(":")[0] for line in masked[:5])
    fix = (
        "the judge endpoint was unreachable (above): start the judge server or fix the "
        "config's endpoint.base_url, then rerun"
        if unreachable
        else "run `skyrl-rewards check` on the input to see why"
    )
    print(
        f"skyrl-rewards score: error: {len(masked)} of {len(results)} rows are errors or "
        f"timeouts ({first}{', ...' if len(masked) > 5 else ''}); {fix}, or pass "
        "--allow-errors to accept them",
        file=sys.stderr,
    )
    return 1


def cmd_check(args: argparse.Namespace) -> int:
    """``check``: list rows that would score as dataset errors; exit 1 if any."""
    from skyrl_rewards.data.check import check_rows
    from skyrl_rewards.rewards.mix import RewardMix

    cfg = load_config(args.config, args.overrides)
    mix = RewardMix.from_config(cfg.rewards)  # a mix that cannot be built is refused first
    report_config(args.config, cfg)
    input_path = Path(args.input)
    rows, lines = load_rows(input_path, "check")
    problems = check_rows(rows, input_path.resolve().parent, mix, lines)
    for problem in problems:
        print(problem)
    bad_rows = len({p.line for p in problems})
    print(f"checked {len(rows)} rows with rewards {', '.join(mix.names)}: {bad_rows} with problems")
    return 1 if problems else 0


BENCH_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "benchmarks" / "bench_pool.py"


def cmd_bench(args: argparse.Namespace) -> int:
    """``bench``: the pool benchmark of ``scripts/benchmarks/bench_pool.py``, its own options passed through."""
    import importlib.util

    if not BENCH_SCRIPT.is_file():
        raise FileNotFoundError(
            f"{BENCH_SCRIPT}: the benchmark ships with the repository; run from a checkout"
        )
    spec = importlib.util.spec_from_file_location("bench_pool", BENCH_SCRIPT)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"{BENCH_SCRIPT}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return int(module.main(args.bench_args) or 0)


def cmd_pool_start(args: argparse.Namespace) -> int:
    """``pool start``: a named pool on the running cluster that outlives this command."""
    from skyrl_rewards.pool import service as pool_service
    from skyrl_rewards.rewards.mix import RewardMix

    cfg = load_config(args.config, args.overrides)
    RewardMix.from_config(cfg.rewards)  # a mix that cannot be built is refused first
    report_config(args.config, cfg)
    args.ctrl_c.cleanup = "the pool's workers to stop"
    with phases_shown("pool start"):
        config = pool_service.start(cfg)
    print(
        f"reward pool {config['name']!r} started in namespace {config['namespace']!r}: "
        f"{config['num_workers']} workers running, rewards {format_mix(config['rewards'])}"
    )
    print(
        f"connect with RewardPool.connect({config['name']!r}); stop with "
        f"`skyrl-rewards pool stop --name {config['name']}`"
    )
    return 0


def cmd_pool_status(args: argparse.Namespace) -> int:
    """``pool status``: settings and workers of a running pool."""
    from skyrl_rewards.pool import service as pool_service

    info = pool_service.status(args.name, namespace=args.namespace, address=args.address)
    for key in ("name", "namespace"):
        print(f"{key}: {info[key]}")
    failed = f", {info['workers_failed']} failed" if info["workers_failed"] else ""
    print(
        f"workers: {info['workers']} ({info['workers_running']} running, "
        f"{info['workers_pending']} pending{failed})"
    )
    print(f"worker_replacements: {info['worker_replacements']}")
    for lane, counts in info["lanes"].items():
        print(f"{lane} lane: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    print(f"rewards: {format_mix(info['rewards'])}")
    for key in ("batch_size", "timeout_s", "max_retries", "fallback", "placement"):
        print(f"{key}: {info['config'][key]}")
    return 0


def cmd_pool_stop(args: argparse.Namespace) -> int:
    """``pool stop``: stop a running pool's workers and directory."""
    from skyrl_rewards.pool import service as pool_service

    pool_service.stop(args.name, namespace=args.namespace, address=args.address)
    print(f"reward pool {args.name!r} stopped")
    return 0


def cmd_judge_server(args: argparse.Namespace) -> int:
    """``judge-server``: serve the rule-based stand-in judge until Ctrl-C."""
    from skyrl_rewards.cli.judge_server import base_url, make_server

    server = make_server(args.host, args.port, model=args.model)
    url = base_url(server)
    print(
        f"local judge: serving {url} (POST /chat/completions, GET /models), model "
        f"{args.model!r} (any model name is answered).\n"
        "A rule-based stand-in, not a model: '1.0' when the student's answer matches the "
        "solution\n(same text after case, spacing and a trailing dot, same number, or the "
        "solution's words inside),\nelse '0.0'; for trying judge configs without a GPU.\n"
        f"Point a config at it with rewards.accuracy.judge.endpoint.base_url={url}\n"
        "Ctrl-C stops it.",
        flush=True,
    )
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """``serve``: the pool behind HTTP (Ray Serve) until Ctrl-C; stops what it started."""
    from skyrl_rewards.serve.settings import ServeConfig, check_bind, read_token

    cfg = load_config(args.config, args.overrides)
    settings = ServeConfig(
        host=args.host,
        port=args.port,
        token=read_token(args.token_file),
        pool_name=cfg.name,
        pool_namespace=cfg.namespace,
        num_scorers=args.scorers,
        max_rows=args.max_rows,
        max_queued_rows=args.max_queued_rows,
    )
    check_bind(settings)  # refused before Ray starts
    report_config(args.config, cfg)
    args.ctrl_c.cleanup = "the service and the pool it started to stop"
    return serve_until_stopped(cfg, settings)


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of all commands."""
    parser = argparse.ArgumentParser(
        prog="skyrl-rewards", description="Score, check and serve SkyRL rewards."
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{score,check,bench,judge-server,pool,serve}"
    )

    score = commands.add_parser("score", help="score a JSONL file through a reward pool")
    score.add_argument(
        "--config", required=True, help="YAML with a rewards mix and optional pool settings"
    )
    score.add_argument(
        "--input", required=True, help="JSONL rows with completion, solution and columns"
    )
    score.add_argument("--output", required=True, help="JSONL to write; histograms go next to it")
    score.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    runner = score.add_mutually_exclusive_group()
    runner.add_argument(
        "--local",
        action="store_true",
        help="score in this process, without Ray, whatever the input's size (rule-based rewards;"
        " the default for inputs of at most 256 rows)",
    )
    runner.add_argument(
        "--pool",
        action="store_true",
        help="score on a Ray reward pool (a local Ray started for it, or address=...) even for a"
        " small input",
    )
    score.add_argument(
        "--allow-errors",
        action="store_true",
        help="exit 0 even when some rows are masked (a component timed out or errored)",
    )
    score.add_argument("overrides", nargs="*", help="config overrides key=value")
    score.set_defaults(func=cmd_score)

    check = commands.add_parser("check", help="pre-flight: list rows that would be dataset errors")
    check.add_argument("--config", required=True, help="YAML with a rewards mix")
    check.add_argument("--input", required=True, help="JSONL rows with solution and columns")
    check.add_argument("overrides", nargs="*", help="config overrides key=value")
    check.set_defaults(func=cmd_check)

    bench = commands.add_parser(
        "bench",
        help="benchmark the pool (scripts/benchmarks/bench_pool.py; its options after the command)",
        add_help=False,
    )
    bench.set_defaults(func=cmd_bench)

    judge = commands.add_parser(
        "judge-server",
        help="serve a rule-based stand-in judge (OpenAI-compatible) to try judge configs",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    judge.add_argument("--host", default=DEFAULT_JUDGE_HOST, help="address to listen on")
    judge.add_argument(
        "--port", type=int, default=DEFAULT_JUDGE_PORT, help="port (0: a free one, printed)"
    )
    judge.add_argument("--model", default=DEFAULT_JUDGE_MODEL, help="model name in /v1/models")
    judge.set_defaults(func=cmd_judge_server)

    pool = commands.add_parser("pool", help="a named pool on a running Ray cluster")
    pool_commands = pool.add_subparsers(
        dest="pool_command", required=True, metavar="{start,status,stop}"
    )
    start = pool_commands.add_parser("start", help="start a named pool that outlives this command")
    start.add_argument(
        "--config", required=True, help="pool YAML (configs/pool.yaml) or a reward mix"
    )
    start.add_argument(
        "overrides", nargs="*", help="config overrides key=value (address=auto by default)"
    )
    start.set_defaults(func=cmd_pool_start)
    for verb, func, text in (
        ("status", cmd_pool_status, "settings and workers of a running pool"),
        ("stop", cmd_pool_stop, "stop a running pool"),
    ):
        sub = pool_commands.add_parser(verb, help=text)
        sub.add_argument(
            "--name", default=PoolConfig.name, help=f"pool name (default {PoolConfig.name})"
        )
        sub.add_argument(
            "--namespace", default=PoolConfig.namespace, help="Ray namespace of the pool"
        )
        sub.add_argument("--address", default=None, help="Ray address (default: auto)")
        sub.set_defaults(func=func)

    add_serve_parser(commands, cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "bench":
        args.bench_args = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.ctrl_c = StopOnCtrlC(args.command)
    with ctrl_c_handled(args.ctrl_c):
        try:
            return int(args.func(args))
        except KeyboardInterrupt:
            print(f"skyrl-rewards {args.command}: interrupted (Ctrl-C)", file=sys.stderr)
            return INTERRUPTED
        except (
            ValueError,
            OSError,
        ) as e:  # OSError: a missing or unreadable file, a refused address
            print(f"skyrl-rewards {args.command}: error: {e}", file=sys.stderr)
            return 2
