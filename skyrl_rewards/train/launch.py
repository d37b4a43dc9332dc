"""GRPO in SkyRL with this project's envs: dataset to parquet, env overrides, the pool, the run.

What ``scripts/launch_grpo_*.sh`` call (``python -m skyrl_rewards.train.launch``):

1. ``--input`` rows (JSONL: ``problem``, ``solution`` and columns, as in
   ``skyrl_rewards/sample_data``) become SkyRL prompt rows in
   ``--data-dir/{train,validation}.parquet``: ``prompt`` (a user message:
   the problem with VLM-R1's think/answer instruction, preceded by the image
   as a data URI when the row has one), ``env_class``,
   ``reward_spec: {method: rule, ground_truth: solution}`` and the row's
   columns (``image_path`` made absolute). A ``.parquet`` input is already
   in SkyRL's form (``scripts/tau_bench_dataset.py`` writes one) and is used
   as is, with ``--val-input`` as the validation data.
2. ``--env-config`` (``configs/skyrl_env_*.yaml``) becomes SkyRL overrides,
   the way SkyRL passes settings to a custom env:
   ``environment.env_class=NAME`` and ``+environment.skyrl_gym.NAME.KEY=VALUE``.
   ``--env-settings`` (an env's own config file, e.g. ``configs/tau_bench.yaml``)
   is placed under ``environment.skyrl_gym.NAME`` first, the snippet's keys win.
3. With ``--pool-config``, the named reward pool is started on the Ray cluster
   (local, ``address=auto`` or an address) before training, so every env
   connects to it by name; ``--rewards`` merges a reward mix into it.
4. The run: ``skyrl.train`` (or the older ``skyrl_train``) builds its config
   from the overrides, and a Ray task registers the envs (importing
   ``--env-module``, then every env installed packages declare in the
   ``skyrl_gym.envs`` entry-point group) and runs ``BasePPOExp``, as SkyRL's
   own examples do.

``--dry-run`` does 1-3 and then, instead of training, builds one env per row
(the first ``--dry-run-rows``) through ``skyrl_gym.make`` exactly as SkyRL's
generator does (env_config from the overrides, extras from the parquet row),
from a thread pool; when the JSONL row has a ``completion`` it also calls
``init`` and ``step`` with it. It prints the SkyRL overrides and the rewards.
It needs neither GPUs nor SkyRL-train, and no user model for tau-bench (its
envs are built, not run: ``init`` would ask the user simulator).
"""

from __future__ import annotations

import argparse
import base64
import importlib
import json
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from skyrl_rewards.data.jsonl import read_rows, resolve_image_path, row_label
from skyrl_rewards.train.env import close_shared_pools
from skyrl_rewards.train.registration import register_installed_envs

PROMPT_KEY = "prompt"
ENV_CLASS_KEY = "env_class"
NOT_COLUMNS = frozenset({"problem", "solution", "completion"})
QUESTION_TEMPLATE = (
    "{problem} First output the thinking process in <think> </think> tags and then output the "
    "final answer in <answer> </answer> tags."
)
"""VLM-R1's instruction after the question: what the format rewards pay for."""


def image_data_uri(path: str | Path) -> str:
    """A ``data:image/...;base64,`` URI of the image file (for OpenAI-format image messages)."""
    path = Path(path)
    kind = path.suffix.lstrip(".").lower().replace("jpg", "jpeg") or "png"
    return f"data:image/{kind};base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def skyrl_record(
    row: Mapping[str, Any], index: int, base_dir: Path, env_class: str, data_source: str
) -> dict[str, Any]:
    """One SkyRL prompt row from a dataset row (see the module docstring).

    Raises ``ValueError`` naming the field and the row when ``problem`` or
    ``solution`` is missing, ``FileNotFoundError`` when the image is.
    """
    for name in ("problem", "solution"):
        if name not in row:
            raise ValueError(f"{row_label(row, index)}: missing field '{name}'")
    columns = {k: v for k, v in row.items() if k not in NOT_COLUMNS}
    question = QUESTION_TEMPLATE.format(problem=row["problem"])
    content: str | list[dict[str, Any]] = question
    if "image_path" in row:
        image_path = resolve_image_path(row["image_path"], base_dir)
        columns["image_path"] = image_path
        first = image_path[0] if isinstance(image_path, list) else image_path
        content = [
            {"type": "image_url", "image_url": {"url": image_data_uri(first)}},
            {"type": "text", "text": question},
        ]
    return {
        "data_source": data_source,
        PROMPT_KEY: [{"role": "user", "content": content}],
        ENV_CLASS_KEY: env_class,
        "reward_spec": {"method": "rule", "ground_truth": row["solution"]},
        **columns,
    }


def write_parquet(records: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Write records as a parquet file (nested prompts as JSON-compatible structs)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([dict(r) for r in records]), path)


def prepare_data(
    input_path: Path, data_dir: Path, env_class: str, *, val_fraction: float = 0.25
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Write ``train.parquet`` and ``validation.parquet``; return (rows, records) in file order.

    The last ``val_fraction`` of the rows (at least one) is the validation split.
    """
    rows = read_rows(input_path)
    if not rows:
        raise ValueError(f"{input_path}: no rows")
    base_dir = input_path.resolve().parent
    records = [
        skyrl_record(row, i, base_dir, env_class, input_path.stem) for i, row in enumerate(rows)
    ]
    n_val = max(1, int(len(records) * val_fraction)) if len(records) > 1 else 0
    write_parquet(records[: len(records) - n_val], data_dir / "train.parquet")
    write_parquet(records[len(records) - n_val :] or records, data_dir / "validation.parquet")
    return rows, records


def env_overrides(env_cfg: DictConfig) -> list[str]:
    """SkyRL overrides from an env snippet: ``environment.env_class=NAME`` and one
    ``+environment.skyrl_gym.NAME.KEY=VALUE`` per leaf of ``environment.skyrl_gym.NAME``,
    then every other top-level leaf (``generator.max_turns=...``) as is.

    >>> env_overrides(OmegaConf.create({"environment": {"env_class": "e", "skyrl_gym": {"e": {"pool": "p"}}}}))
    ['environment.env_class=e', '+environment.skyrl_gym.e.pool=p']
    """
    env_class = OmegaConf.select(env_cfg, "environment.env_class")
    if not env_class:
        raise ValueError("env config: environment.env_class is missing")
    overrides = [f"environment.env_class={env_class}"]
    settings = OmegaConf.select(env_cfg, f"environment.skyrl_gym.{env_class}")
    if settings is not None:
        for key, value in _leaves(OmegaConf.to_container(settings, resolve=True)):
            overrides.append(f"+environment.skyrl_gym.{env_class}.{key}={_override_value(value)}")
    for top, node in OmegaConf.to_container(env_cfg, resolve=True).items():
        if top != "environment":
            overrides += [
                f"{key}={_override_value(value)}" for key, value in _leaves(node, f"{top}.")
            ]
    return overrides


def _leaves(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(node, Mapping) and node:
        return [leaf for key, value in node.items() for leaf in _leaves(value, f"{prefix}{key}.")]
    return [(prefix.rstrip("."), node)]


def _override_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return (
            value
            if value and all(c.isalnum() or c in "-_./:" for c in value)
            else json.dumps(value)
        )
    return json.dumps(value)


def with_env_settings(env_cfg: DictConfig, settings_path: Path) -> DictConfig:
    """``env_cfg`` with the env's own config file under ``environment.skyrl_gym.<env_class>``."""
    env_class = OmegaConf.select(env_cfg, "environment.env_class")
    if not env_class:
        raise ValueError("env config: environment.env_class is missing")
    base = OmegaConf.create(
        {"environment": {"skyrl_gym": {env_class: OmegaConf.load(settings_path)}}}
    )
    merged = OmegaConf.merge(base, env_cfg)
    if not isinstance(merged, DictConfig):
        raise ValueError(f"{settings_path}: expected a mapping at the top level")
    return merged


def split_overrides(env_cfg: DictConfig, overrides: Sequence[str]) -> tuple[DictConfig, list[str]]:
    """Apply the overrides that touch the env snippet to it; return it and the others.

    An override touches the snippet when its key (``+``/``++`` stripped) is
    under ``environment.`` or already set in the snippet (``generator.max_turns``),
    so each setting reaches SkyRL once, and the dry run sees it too.
    """
    touched, rest = [], []
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+")
        if "=" in override and (
            key.startswith("environment.") or OmegaConf.select(env_cfg, key) is not None
        ):
            touched.append(f"{key}={override.split('=', 1)[1]}")
        else:
            rest.append(override)
    merged = OmegaConf.merge(env_cfg, OmegaConf.from_dotlist(touched)) if touched else env_cfg
    if not isinstance(merged, DictConfig):
        raise ValueError("env config: expected a mapping at the top level")
    return merged, rest


def read_parquet(path: Path) -> list[dict[str, Any]]:
    """The rows of a SkyRL parquet file as plain dicts."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def env_config_of(env_cfg: DictConfig) -> DictConfig:
    """The ``env_config`` SkyRL will hand the env: ``environment.skyrl_gym.<env_class>``."""
    env_class = env_cfg.environment.env_class
    node = OmegaConf.select(env_cfg, f"environment.skyrl_gym.{env_class}")
    return node if node is not None else OmegaConf.create({})


def start_pool(pool_config: Path, rewards_config: Path | None, overrides: Sequence[str]) -> Any:
    """Start the named reward pool from ``pool_config``, its mix replaced by ``rewards_config``'s."""
    from skyrl_rewards.pool.config import load_pool_config
    from skyrl_rewards.pool.reward_pool import RewardPool

    source = OmegaConf.to_container(OmegaConf.load(pool_config), resolve=True)
    if rewards_config is not None:
        source["rewards"] = OmegaConf.to_container(
            OmegaConf.load(rewards_config).rewards, resolve=True
        )
    return RewardPool.from_config(load_pool_config(source, overrides))


def dry_run(
    env_cfg: DictConfig,
    rows: Sequence[Mapping[str, Any]],
    records: Sequence[Mapping[str, Any]],
    *,
    max_workers: int = 8,
) -> list[dict[str, Any]]:
    """Build one env per record through ``skyrl_gym.make`` as SkyRL's generator does
    (``max_turns`` from ``generator.max_turns``) and, when the row has a completion,
    ``init`` it with the prompt and ``step`` it with the completion; all from a thread pool. Returns one ``{"env_class", "reward", "metadata"}`` per record
    (``reward`` is None without a completion).
    """
    import skyrl_gym

    env_config = env_config_of(env_cfg)
    max_turns = int(OmegaConf.select(env_cfg, "generator.max_turns", default=1))

    def run(pair: tuple[Mapping[str, Any], Mapping[str, Any]]) -> dict[str, Any]:
        row, record = pair
        extras = {k: v for k, v in record.items() if k not in (PROMPT_KEY, ENV_CLASS_KEY)}
        extras["max_turns"] = max_turns
        env = skyrl_gym.make(record[ENV_CLASS_KEY], env_config=env_config, extras=extras)
        out: dict[str, Any] = {"env_class": record[ENV_CLASS_KEY], "reward": None, "metadata": {}}
        if "completion" in row:
            env.init(list(record[PROMPT_KEY]))
            step = env.step(row["completion"])
            out["reward"], out["metadata"] = step["reward"], step["metadata"]
        env.close()
        return out

    with ThreadPoolExecutor(
        max_workers=max_workers, thread_name_prefix="skyrl-gym-env-"
    ) as executor:
        return list(executor.map(run, zip(rows, records, strict=True)))


def run_grpo(
    overrides: Sequence[str],
    env_modules: Sequence[str],
    pool_args: tuple[Path, Path | None, Sequence[str]] | None,
) -> None:
    """Train with SkyRL: config from ``overrides``, envs registered in the entrypoint task."""
    import ray

    try:
        from skyrl.train.config import SkyRLTrainConfig as Config
        from skyrl.train.entrypoints.main_base import BasePPOExp, validate_cfg
        from skyrl.train.utils import initialize_ray
    except ImportError:
        try:
            from skyrl_train.config import SkyRLConfig as Config  # type: ignore[no-redef]
            from skyrl_train.entrypoints.main_base import BasePPOExp, validate_cfg  # type: ignore[no-redef]
            from skyrl_train.utils import initialize_ray  # type: ignore[no-redef]
        except ImportError as e:
            raise SystemExit(
                "SkyRL is not installed: pip install 'skyrl[fsdp,vllm]' (needs GPUs), "
                "or use --dry-run to check configs and envs without it"
            ) from e

    cfg = Config.from_cli_overrides(list(overrides))
    validate_cfg(cfg)
    initialize_ray(cfg)
    pool = start_pool(*pool_args) if pool_args else None

    @ray.remote(num_cpus=1)
    def skyrl_entrypoint(cfg: Any, modules: Sequence[str]) -> None:
        for module in modules:
            importlib.import_module(module)  # registers the env with skyrl-gym in this worker
        register_installed_envs()  # and every env installed packages declare as entry points
        BasePPOExp(cfg).run()

    try:
        ray.get(skyrl_entrypoint.remote(cfg, list(env_modules)))
    finally:
        if pool is not None:
            pool.shutdown()


def build_parser() -> argparse.ArgumentParser:
    """Arguments of the launcher; anything after them is a SkyRL override."""
    parser = argparse.ArgumentParser(
        prog="python -m skyrl_rewards.train.launch", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--env-config", type=Path, required=True, help="configs/skyrl_env_*.yaml")
    parser.add_argument(
        "--env-module", action="append", default=[], help="module whose import registers the env"
    )
    parser.add_argument(
        "--env-settings", type=Path, help="the env's own config file (configs/tau_bench.yaml)"
    )
    parser.add_argument(
        "--input", type=Path, help="JSONL rows to turn into SkyRL parquet, or a SkyRL parquet"
    )
    parser.add_argument(
        "--val-input", type=Path, help="validation parquet when --input is a parquet"
    )
    parser.add_argument("--data-dir", type=Path, help="where train.parquet / validation.parquet go")
    parser.add_argument("--pool-config", type=Path, help="start this reward pool before training")
    parser.add_argument("--rewards", type=Path, help="reward mix merged into the pool config")
    parser.add_argument(
        "--pool-override", action="append", default=[], help="key=value for the pool config"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="build the envs and score the rows; no training"
    )
    parser.add_argument(
        "--dry-run-rows", type=int, default=32, help="envs the dry run builds (default 32)"
    )
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="SkyRL overrides key=value")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the launcher (see the module docstring); returns the exit code."""
    args = build_parser().parse_args(argv)
    env_cfg = OmegaConf.load(args.env_config)
    if not isinstance(env_cfg, DictConfig):
        raise SystemExit(f"{args.env_config}: expected a mapping at the top level")
    if args.env_settings is not None:
        env_cfg = with_env_settings(env_cfg, args.env_settings)
    env_cfg, overrides = split_overrides(env_cfg, [o for o in args.overrides if o != "--"])
    skyrl_overrides = env_overrides(env_cfg)
    rows: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    if args.input is not None and args.input.suffix == ".parquet":
        records = read_parquet(args.input)
        rows = [{} for _ in records]
        train, val = args.input.resolve(), (args.val_input or args.input).resolve()
        skyrl_overrides += [f"data.train_data=['{train}']", f"data.val_data=['{val}']"]
    elif args.input is not None:
        if args.data_dir is None:
            raise SystemExit("--input needs --data-dir")
        rows, records = prepare_data(args.input, args.data_dir, env_cfg.environment.env_class)
        skyrl_overrides += [
            f"data.train_data=['{args.data_dir.resolve() / 'train.parquet'}']",
            f"data.val_data=['{args.data_dir.resolve() / 'validation.parquet'}']",
        ]
    skyrl_overrides += overrides
    for module in args.env_module:
        importlib.import_module(module)
    register_installed_envs()
    pool_args = (args.pool_config, args.rewards, args.pool_override) if args.pool_config else None
    if not args.dry_run:
        run_grpo(skyrl_overrides, args.env_module, pool_args)
        return 0
    print("SkyRL overrides:\n  " + " \\\n  ".join(skyrl_overrides))
    pool = start_pool(*pool_args) if pool_args else None
    try:
        outcomes = dry_run(env_cfg, rows[: args.dry_run_rows], records[: args.dry_run_rows])
    finally:
        close_shared_pools()  # the envs' own clients of the pool
        if pool is not None:
            pool.shutdown()
    scored = [o for o in outcomes if o["reward"] is not None]
    print(
        f"built {len(outcomes)} {env_cfg.environment.env_class} envs through skyrl_gym.make; stepped {len(scored)}"
    )
    if scored:
        mean = sum(o["reward"] for o in scored) / len(scored)
        masked = sum(1 for o in scored if o["metadata"].get("should_mask"))
        print(f"mean reward {mean:.3f}, {masked} to mask")
    return 0


if __name__ == "__main__":
    sys.exit(main())
