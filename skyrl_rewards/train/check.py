"""``python -m skyrl_rewards.train --check``: what a run would trip on first, phase by phase.

SkyRL's own parser takes ``trainer.epochs=abc`` (its dataclasses hold the
string) and never opens ``data.train_data``; a run finds out minutes later,
on GPUs. :func:`check` runs, with one line per phase and its time:

1. ``config``: SkyRL's parser on
   :class:`~skyrl_rewards.train.config.TrainConfig` (importing SkyRL imports
   vLLM and torch: most of the time);
2. ``types``: every field of the config against its declared type
   (:func:`type_problems`);
3. ``skyrl``: SkyRL's own ``validate_cfg`` (once the types are right) and, for a
   fully-async config, its trainer's own assertions
   (:func:`~skyrl_rewards.train.fully_async.check_fully_async`);
4. ``files``: every file the config names: ``data.train_data`` (and
   ``data.val_data`` when ``trainer.eval_interval`` > 0) exist, are parquet or
   JSON files SkyRL reads, and hold the prompt and env-class columns; the
   policy when given as a local path; the pool's config files;
5. ``envs``: each env's section (those of ``environment.env_class`` and of the
   data's ``env_class`` column) through the env's own validation
   (:class:`~skyrl_rewards.train.env.RewardEnvConfig`, its in-process mix,
   :func:`~skyrl_rewards.train.tau_bench_config.env_config_from`);
6. ``pool``: the reward pool the run starts (``reward_pool.*``: its config
   and every reward and parameter of its mix).

Then notes: what it sees but does not refuse (fewer training rows than
``trainer.train_batch_size``: the sample data in a check) and what it cannot
see (the running pool the env connects to without ``reward_pool.config``).

A phase that fails lists its problems (field, value, fix) and the later
phases still run where they can; any problem makes the exit code 2.
No Ray, no GPU.
"""

import dataclasses
import os
import time
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

PREFIX = "python -m skyrl_rewards.train --check"
PROMPT_KEY, ENV_CLASS_KEY = "prompt", "env_class"
"""The columns SkyRL's ``PromptDataset`` reads (its defaults; the entry point keeps them)."""
DATA_SUFFIXES = (".parquet", ".json", ".jsonl")
"""What SkyRL's ``PromptDataset`` reads as a file; any other string is a Hugging Face dataset name."""


class ConfigProblems(ValueError):
    """The problems of one phase, one per line."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


def check(
    overrides: Sequence[str],
    pool_config: Callable[[Any], Any],
    say: Callable[[str], None] = print,
) -> tuple[Any, int]:
    """Run every phase on ``overrides``; ``(cfg or None, number of problems)``.

    ``pool_config(cfg)`` is the ``PoolConfig`` the run starts (the entry
    point's ``reward_pool_config``). Each phase prints ``check: PHASE: ok
    (1.2 s)`` or its problems, one per line.
    """
    say("check: config: SkyRL's parser (imports SkyRL, vLLM, torch) ...")
    cfg = _phase("config", lambda: _parse(overrides), say)
    if cfg is None:
        return None, 1
    problems = 0
    types_found = _phase("types", lambda: type_problems(cfg), say)
    problems += len(types_found)
    if types_found:
        say("check: skyrl: skipped (SkyRL's validate_cfg needs the types right)")
    elif _phase("skyrl", lambda: _validate(cfg), say) is None:
        problems += 1
    for name, run in (
        ("files", lambda: file_problems(cfg)),
        ("envs", lambda: env_problems(cfg)),
        ("pool", lambda: pool_problems(cfg, pool_config)),
    ):
        found = _phase(name, run, say)
        problems += len(found) if found is not None else 1
    for note in notes(cfg):
        say(f"note: {note}")
    return cfg, problems


def _parse(overrides: Sequence[str]) -> Any:
    from skyrl_rewards.train.config import TrainConfig

    return TrainConfig.from_cli_overrides(list(overrides))


def _validate(cfg: Any) -> list[str]:
    """SkyRL's ``validate_cfg``, then (fully async) its fully-async trainer's own assertions."""
    from skyrl.train.utils import validate_cfg

    from skyrl_rewards.train.fully_async import check_fully_async

    validate_cfg(cfg)
    check_fully_async(cfg)
    return []


def _phase(name: str, run: Callable[[], Any], say: Callable[[str], None]) -> Any:
    """Run one phase; its line; for a list result, one line per problem."""
    start = time.monotonic()
    try:
        result = run()
    except (ValueError, FileNotFoundError, AssertionError) as error:  # SkyRL asserts
        say(f"check: {name}: FAILED ({time.monotonic() - start:.1f} s)")
        say(f"  {error}")
        return None
    took = f"{time.monotonic() - start:.1f} s"
    if isinstance(result, list) and result:
        say(f"check: {name}: {len(result)} problem{'s' * (len(result) > 1)} ({took})")
        for problem in result:
            say(f"  {problem}")
    else:
        say(f"check: {name}: ok ({took})")
    return result


def _fields(node: Any, prefix: str = "") -> Iterator[tuple[str, Any, Any, Any]]:
    """``(dotted name, value, declared type, default)`` of every leaf field under ``node``."""
    hints = typing.get_type_hints(type(node))
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        name = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from _fields(value, f"{name}.")
            continue
        default = f.default if f.default is not dataclasses.MISSING else None
        yield name, value, hints.get(f.name, Any), default


def _fits(value: Any, expected: Any) -> bool:
    """Whether ``value`` has the declared type ``expected`` (scalars, optionals, literals, lists)."""
    origin = typing.get_origin(expected)
    if expected is Any or isinstance(expected, typing.TypeVar):
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arm) for arm in typing.get_args(expected))
    if origin is typing.Literal:
        return value in typing.get_args(expected)
    if expected is type(None):
        return value is None
    if expected is bool:
        return isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is str:
        return isinstance(value, str)
    if origin in (list, Sequence, typing.Sequence) or expected is list:
        return isinstance(value, (list, tuple)) or _is_omegaconf_list(value)
    return True  # mappings, dataclass unions, classes: SkyRL's own checks and the envs' own


def _is_omegaconf_list(value: Any) -> bool:
    return type(value).__name__ == "ListConfig"


def type_problems(cfg: Any) -> list[str]:
    """Every field whose value is not of its declared type (``trainer.epochs='abc'``).

    A field declared ``int`` or ``float`` whose default is ``None`` also takes
    ``None`` (SkyRL declares some optional fields that way).
    """
    problems = []
    for name, value, expected, default in _fields(cfg):
        if value is None and default is None:
            continue
        if not _fits(value, expected):
            shown = getattr(expected, "__name__", None) or str(expected).replace("typing.", "")
            problems.append(f"{name}: expected {shown}, got {value!r} ({type(value).__name__})")
    return problems


def _dataset_problems(key: str, sources: Sequence[str], cfg: Any) -> list[str]:
    problems = []
    for source in sources:
        source = str(source)
        if not source.lower().endswith(DATA_SUFFIXES):
            continue  # a Hugging Face dataset name: read by SkyRL at start
        path = Path(os.path.expanduser(source))
        where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        if not path.is_file():
            problems.append(
                f"{key}: {source}: no such file{where}; write it with "
                "scripts/data/prepare_skyrl_data.py, or fix the path"
            )
            continue
        columns = _columns(path)
        if isinstance(columns, str):
            problems.append(f"{key}: {source}: cannot be read ({columns})")
            continue
        for column in (PROMPT_KEY, ENV_CLASS_KEY):
            if columns is not None and column not in columns:
                problems.append(
                    f"{key}: {source}: no column {column!r} (columns: {sorted(columns)}); "
                    "prepare it with scripts/data/prepare_skyrl_data.py"
                )
    return problems


def _columns(path: Path) -> set[str] | str | None:
    """The columns of a parquet file (``None`` for JSON: read by SkyRL); an error as text."""
    if path.suffix.lower() != ".parquet":
        return None
    import pyarrow.parquet as pq

    try:
        return set(pq.read_schema(path).names)
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
        return str(error)


def file_problems(cfg: Any) -> list[str]:
    """Every file the config names that is missing, unreadable or lacks the columns SkyRL reads."""
    from skyrl_rewards.bundled import config_file

    problems = _dataset_problems("data.train_data", cfg.data.train_data, cfg)
    if cfg.trainer.eval_interval > 0 and cfg.data.val_data:
        problems += [
            f"{problem} (read since trainer.eval_interval={cfg.trainer.eval_interval}; "
            "trainer.eval_interval=0 reads none)"
            for problem in _dataset_problems("data.val_data", cfg.data.val_data, cfg)
        ]
    model = str(cfg.trainer.policy.model.path or "")
    if model.startswith(("/", "./", "../", "~")) and not Path(model).expanduser().is_dir():
        problems.append(f"trainer.policy.model.path: {model}: no such folder")
    for key in ("config", "rewards"):
        named = getattr(cfg.reward_pool, key)
        if named is not None:
            try:
                config_file(named)
            except FileNotFoundError as error:
                problems.append(f"reward_pool.{key}: {error}")
    return problems


def _env_classes(cfg: Any) -> list[str]:
    """``environment.env_class`` and the ``env_class`` values of the training parquet files."""
    classes = [cfg.environment.env_class]
    for source in cfg.data.train_data:
        path = Path(os.path.expanduser(str(source)))
        if path.suffix.lower() == ".parquet" and path.is_file():
            import pyarrow.parquet as pq

            try:
                table = pq.read_table(path, columns=[ENV_CLASS_KEY])
            except (OSError, ValueError, KeyError):
                continue  # said by the files phase
            classes += [str(v) for v in table.column(0).unique().to_pylist() if v is not None]
    return list(dict.fromkeys(classes))


def env_problems(cfg: Any) -> list[str]:
    """Each env the run builds, its section through the env's own validation."""
    from skyrl_rewards.rewards.mix import RewardMix
    from skyrl_rewards.train.env import RewardEnvConfig
    from skyrl_rewards.train.tau_bench_config import env_config_from

    gym = cfg.environment.skyrl_gym
    problems = []
    for env_class in _env_classes(cfg):
        section = f"environment.skyrl_gym.{env_class}"
        try:
            if env_class == "skyrl_rewards":
                env = RewardEnvConfig.from_any(dataclasses.asdict(gym.skyrl_rewards))
                if env.in_process:
                    RewardMix.from_config(env.rewards)
            elif env_class in ("tau_bench_env", "tau_bench") and hasattr(gym, env_class):
                env_config_from(dataclasses.asdict(getattr(gym, env_class)))
        except ValueError as error:
            problems.append(f"{section}: {error}")
    return problems


def pool_problems(cfg: Any, pool_config: Callable[[Any], Any]) -> list[str]:
    """The pool the run starts (``reward_pool.*``), built as far as it goes without Ray."""
    from skyrl_rewards.rewards.mix import RewardMix

    if not cfg.reward_pool.config:
        return []
    try:
        RewardMix.from_config(pool_config(cfg).rewards)
    except FileNotFoundError:
        return []  # said by the files phase
    except ValueError as error:
        return [f"reward_pool: {error}"]
    return []


def notes(cfg: Any) -> list[str]:
    """What ``--check`` sees but does not refuse, and what it cannot see (no Ray)."""
    found = []
    rows = _parquet_rows(cfg.data.train_data)
    if rows is not None and rows < cfg.trainer.train_batch_size:
        found.append(
            f"data.train_data holds {rows} rows, fewer than trainer.train_batch_size="
            f"{cfg.trainer.train_batch_size}: SkyRL's trainer refuses to start on it (fine for "
            "a check on the sample data; a run needs more rows or a smaller batch)"
        )
    env = cfg.environment.skyrl_gym.skyrl_rewards
    if not cfg.reward_pool.config and not env.in_process and "skyrl_rewards" in _env_classes(cfg):
        found.append(
            f"no reward_pool.config: the skyrl_rewards env connects to the running pool "
            f"{env.pool!r} (start it with `skyrl-rewards pool start --config CFG "
            f"name={env.pool}`), not checked here (no Ray)"
        )
    return found


def _parquet_rows(sources: Sequence[str]) -> int | None:
    """Rows of the training parquet files (``None`` when any source is not a readable parquet)."""
    import pyarrow.parquet as pq

    total = 0
    for source in sources:
        path = Path(os.path.expanduser(str(source)))
        if path.suffix.lower() != ".parquet" or not path.is_file():
            return None
        try:
            total += pq.read_metadata(path).num_rows
        except (OSError, ValueError):
            return None
    return total
