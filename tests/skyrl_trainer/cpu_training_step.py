"""One real SkyRL 0.4 ``RayPPOTrainer`` step on CPU, through this project's experiment.

``python tests/skyrl_trainer/cpu_training_step.py {math,tau,rec,rec_qwen3} OUT_DIR`` builds a
tiny random policy (Qwen2, or for ``rec*`` a Qwen2.5-VL / Qwen3-VL with its processor) and its
tokenizer under ``OUT_DIR``, a dataset of this project's rows, and a ``TrainConfig`` as
``python -m skyrl_rewards.train`` parses it, then runs
``RewardsPPOExp(cfg).run()`` (``make_generator``, the registered envs, the reward pool the
config names) for one GRPO step: generate, reward, advantages, FSDP2 forward/backward and
AdamW step, weight sync. Only the GPU parts are stood in for (``stand_ins.py``). It writes
``OUT_DIR/summary.json`` (what the test asserts on) and prints a compact summary.

- ``math``: three math rows of ``skyrl_rewards/sample_data``, two samples each, scored by a
  reward pool started from ``configs/math.yaml`` (``reward_pool.config``). Sample 0 of each
  prompt plays the row's own answer; sample 1 is sampled by the engine. The third row names
  an unknown ``accu_reward_method``: a dataset error, so its trajectories are masked.
- ``tau``: two tau-bench retail tasks (backend tau2, replay user), two samples each: sample 0
  plays the gold actions, sample 1 a bad script (it says goodbye at once).
- ``rec`` (Qwen2.5-VL) and ``rec_qwen3`` (Qwen3-VL): three REC rows of
  ``skyrl_rewards/sample_data`` with their images, prepared for the family
  (``skyrl_record(..., box_format=...)``: its grounding prompt, a ``box_format`` column, the
  row's grid checked against the reward's resize), through SkyRL's VLM generator (this
  project's ``MaskingVLMGymGenerator``), three samples each, scored by a reward pool started
  from ``configs/rec.yaml`` (iou + format_rec) told the family's box format and the engine
  processor's pixel bounds. Sample 0 answers the gold box in the family's coordinates (pixels
  of the resized input for Qwen2.5-VL, the 0-1000 grid for Qwen3-VL), sample 1 a wrong box,
  sample 2 is sampled by the engine from the image. The third row's solution is malformed (a
  dataset error), so its trajectories are masked. The engine renders with the model's own
  processor (:class:`~stand_ins.VisionStandInEngine`); the summary shows the training batch's
  ``pixel_values`` / ``image_grid_thw`` and how much the policy's logprobs move when its
  pixels are zeroed.

After the step it also runs SkyRL's ``forward_backward`` on the masked trajectories alone,
with their advantages set to 1.0 and their (all-zero) loss masks kept: the loss and the
gradient norm must be exactly zero; the same rows with loss masks of ones are the control.

A script with a ``__main__`` guard, run in its own process: SkyRL sets the ``spawn`` start
method globally and the trainer needs a Ray of its own (a GPU resource on this CPU node and
the stand-ins' worker setup hook).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT)]

from stand_ins import (  # noqa: E402
    NAMESPACE,
    StandInEngine,
    StandInEngineClient,
    VisionStandInEngine,
    VisionStandInEngineClient,
    install_cpu_device_stand_ins,
    weights_checksum,
)

install_cpu_device_stand_ins()  # before torch or SkyRL is imported

ENGINE = "stand_in_engine"
MAX_NEW_TOKENS = 12
SEED = 7

REC_FAMILIES = {"rec": "qwen2_5_vl", "rec_qwen3": "qwen3_vl"}
"""The REC tasks and the box-format family of each one's policy."""
REC_ROWS = ("rec-001", "rec-005", "rec-009")
"""Sample rows with 224x168 images (whole 28-pixel multiples: Qwen2.5-VL's input is the image
itself, so a gold box in resized pixels is the ground truth, exactly); the last is masked."""
PIXEL_BOUNDS = {
    # at most 48 image tokens (48 merged 28x28 patches); 224x168 is exactly that
    "qwen2_5_vl": {"min_pixels": 56 * 56, "max_pixels": 48 * 28 * 28},
    # at most 48 image tokens of 32x32 (Qwen3-VL's default minimum, 65,536, would make 64)
    "qwen3_vl": {"min_pixels": 4 * 32 * 32, "max_pixels": 48 * 32 * 32},
}
"""The engine processor's pixel bounds per family; the reward is told the same."""


def build_policy(path: Path, corpus: list[str]) -> Path:
    """A tiny random Qwen2 causal LM and the tests' tokenizer (BPE learned from ``corpus``)."""
    import torch
    from skyrl_helpers import build_tokenizer
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer(corpus)
    torch.manual_seed(SEED)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=65536,
        tie_word_embeddings=False,  # as Qwen2.5-7B; SkyRL's FSDP2 step unties tied ones
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    Qwen2ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def image_processor(family: str) -> Any:
    """The family's image processor (Qwen2.5-VL: patch 14, CLIP's normalization; Qwen3-VL:
    patch 16, mean and std 0.5, as their published configs) with :data:`PIXEL_BOUNDS`."""
    from transformers import Qwen2VLImageProcessor

    if family == "qwen2_5_vl":
        return Qwen2VLImageProcessor(**PIXEL_BOUNDS[family])
    return Qwen2VLImageProcessor(
        patch_size=16, image_mean=[0.5] * 3, image_std=[0.5] * 3, **PIXEL_BOUNDS[family]
    )


def vision_tokenizer(corpus: list[str], vocab_size: int = 2048) -> tuple[Any, dict[str, int]]:
    """The tests' tokenizer (BPE learned from ``corpus``) with Qwen's ``<|video_pad|>`` added,
    and the vision tokens' ids under a Qwen-VL config's names (``image_token_id``...)."""
    from skyrl_helpers import build_tokenizer

    tokenizer = build_tokenizer(corpus, vocab_size=vocab_size)
    tokenizer.add_tokens(["<|video_pad|>"], special_tokens=True)
    tokens = {"vision_start": "<|vision_start|>", "vision_end": "<|vision_end|>"}
    tokens |= {"image": "<|image_pad|>", "video": "<|video_pad|>"}
    ids = {f"{name}_token_id": tokenizer.convert_tokens_to_ids(t) for name, t in tokens.items()}
    return tokenizer, ids


def tiny_vl_sizes(tokenizer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The text and vision sizes of the tests' tiny VL models over ``tokenizer``.

    head_dim 16: the 3D rotary sections (time, height, width) split its 8 frequencies.
    """
    text = {
        "vocab_size": len(tokenizer),
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 65536,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    vision = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2}
    return text, vision


def qwen2_5_vl_parts(
    corpus: list[str], vocab_size: int = 2048, text: Mapping[str, Any] | None = None, **fields: Any
) -> tuple[Any, Any]:
    """A tiny Qwen2.5-VL config and its processor (:func:`vision_tokenizer`'s tokenizer with
    TRL's Qwen2.5-VL chat template, :func:`image_processor`); ``text`` is added to the
    config's text part, ``fields`` to the config."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLProcessor, Qwen2VLVideoProcessor
    from trl.chat_template_utils import qwen2_5_vl_chat_template

    tokenizer, token_ids = vision_tokenizer(corpus, vocab_size)
    sizes, vision = tiny_vl_sizes(tokenizer)
    rope = {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1e6}
    config = Qwen2_5_VLConfig(
        text_config={**sizes, "rope_parameters": rope, "bos_token_id": None, **(text or {})},
        vision_config={**vision, "out_hidden_size": 32, "fullatt_block_indexes": [1]},
        **token_ids,
        **fields,
    )
    tokenizer.chat_template = qwen2_5_vl_chat_template
    processor = Qwen2_5_VLProcessor(
        image_processor=image_processor("qwen2_5_vl"),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=qwen2_5_vl_chat_template,
    )
    return config, processor


def build_vision_policy(path: Path, family: str, corpus: list[str]) -> Path:
    """A tiny random Qwen2.5-VL or Qwen3-VL with its processor and the tests' tokenizer.

    The tokenizer (BPE learned from ``corpus``) gains Qwen's ``<|video_pad|>``, which the
    processors look up; the chat template is the family's real one (as TRL ships it). The
    processor (:func:`image_processor`, the family's video processor) is saved beside the
    model, so ``AutoProcessor`` (the engine, SkyRL's HF export) loads it.
    """
    import torch
    from transformers import (
        Qwen2_5_VLForConditionalGeneration,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )
    from trl.chat_template_utils import qwen3_vl_chat_template

    if family == "qwen2_5_vl":
        config, processor = qwen2_5_vl_parts(corpus)
        torch.manual_seed(SEED)
        model = Qwen2_5_VLForConditionalGeneration(config)
    else:
        tokenizer, token_ids = vision_tokenizer(corpus)
        text, vision = tiny_vl_sizes(tokenizer)
        rope = {
            "rope_type": "default",
            "mrope_section": [2, 3, 3],
            "mrope_interleaved": True,
            "rope_theta": 5e5,
        }
        config = Qwen3VLConfig(
            text_config={**text, "head_dim": 16, "rope_parameters": rope},
            vision_config={
                **vision,
                "out_hidden_size": 32,
                "num_position_embeddings": 64,
                "deepstack_visual_indexes": [0],
            },
            **token_ids,
        )
        torch.manual_seed(SEED)
        model = Qwen3VLForConditionalGeneration(config)
        tokenizer.chat_template = qwen3_vl_chat_template
        processor = Qwen3VLProcessor(
            image_processor=image_processor(family),
            tokenizer=tokenizer,
            video_processor=Qwen3VLVideoProcessor(),
            chat_template=qwen3_vl_chat_template,
        )
    model.save_pretrained(path)
    processor.save_pretrained(path)  # the tokenizer with it
    return path


def _iou(a: list[float], b: list[float]) -> float:
    """Plain box IoU, the test's own oracle (not the project's)."""
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def rec_data(out: Path, task: str) -> tuple[list[Path], dict[str, list[str]], list[str], dict]:
    """REC rows for the task's family, the scripted replies, the overrides and the gold boxes.

    Each row's ``image_grid_thw`` is the grid of the engine's image processor
    (:func:`image_processor`) for its image. The fourth value maps each gold trajectory to its
    box and the IoU it must score, computed here from the image size.
    """
    from PIL import Image

    from skyrl_rewards.data.jsonl import read_rows
    from skyrl_rewards.rewards.geometry.box_formats import BoxFormatChoice
    from skyrl_rewards.train.dataset import skyrl_record, write_parquet

    family = REC_FAMILIES[task]
    bounds = PIXEL_BOUNDS[family]
    processor = image_processor(family)
    sample_dir = ROOT / "skyrl_rewards" / "sample_data"
    by_id = {r["id"]: r for r in read_rows(sample_dir / "rec.jsonl")}
    rows = [dict(by_id[i]) for i in REC_ROWS]
    replies: dict[str, list[str]] = {}
    gold: dict[str, dict[str, Any]] = {}
    for n, row in enumerate(rows):
        image = Image.open(sample_dir / row["image_path"]).convert("RGB")
        grid = processor(images=[image], return_tensors="pt")["image_grid_thw"][0].tolist()
        row["image_grid_thw"] = grid
        truth = json.loads(row["solution"].split("<answer>")[1].split("</answer>")[0])
        width, height = image.size
        if family == "qwen2_5_vl":  # pixels of the resized input: the grid's patches x 14
            scale = (
                grid[2] * processor.patch_size / width,
                grid[1] * processor.patch_size / height,
            )
        else:  # the 0-1000 grid
            scale = (1000 / width, 1000 / height)
        box = [round(v * scale[i % 2]) for i, v in enumerate(truth)]
        back = [v / scale[i % 2] for i, v in enumerate(box)]
        label = row["problem"].rsplit("describes: ", 1)[1].rstrip(".")
        answer = {"bbox_2d": box, "label": label}
        wrong = {"bbox_2d": [round(v * scale[i % 2]) for i, v in enumerate([0, 0, 10, 10])]}
        replies[f"{n}_0"] = [
            f"<think>I find {label}.</think> <answer>{json.dumps(answer)}</answer>"
        ]
        replies[f"{n}_1"] = [
            f"<think>It is in the corner.</think> <answer>{json.dumps(wrong)}</answer>"
        ]
        gold[f"{n}_0"] = {"box": box, "iou": _iou(back, truth)}
    rows[2]["solution"] = "<answer>[10, 20, 30]</answer>"  # three numbers: a dataset error, masked
    del gold["2_0"]
    choice = BoxFormatChoice.build(family, **bounds)
    records = [
        skyrl_record(r, i + 1, sample_dir, "skyrl_rewards", "rec", choice)
        for i, r in enumerate(rows)
    ]
    train = out / "train.parquet"
    write_parquet(records, train)
    pixels = "".join(f",rewards.iou.{k}={v}" for k, v in bounds.items())
    overrides = [
        "environment.env_class=skyrl_rewards",
        "environment.skyrl_gym.skyrl_rewards.pool=step_pool",
        "reward_pool.config=configs/rec.yaml",
        "reward_pool.overrides=[name=step_pool,num_workers=1,"
        f"rewards.iou.box_format={family},rewards.format_rec.box_format={family}{pixels}]",
        "generator.vision_language_generator=true",
        "generator.use_conversation_multi_turn=true",
        "generator.max_turns=1",
        "generator.n_samples_per_prompt=3",
        "trainer.train_batch_size=3",
        "trainer.policy_mini_batch_size=3",
        "trainer.micro_train_batch_size_per_gpu=3",
        "trainer.micro_forward_batch_size_per_gpu=3",
    ]
    return [train], replies, overrides, gold


def math_data(out: Path) -> tuple[list[Path], dict[str, list[str]], list[str]]:
    """Three math rows (the third with an unknown accuracy method), the replies, the overrides."""
    from skyrl_rewards.data.jsonl import read_rows
    from skyrl_rewards.train.dataset import skyrl_record, write_parquet

    rows = [r for r in read_rows(ROOT / "skyrl_rewards" / "sample_data" / "math.jsonl")]
    rows = [r for r in rows if "image_path" not in r][:3]
    rows[2] = {**rows[2], "accu_reward_method": "no_such_method"}  # a dataset error: masked
    train = out / "train.parquet"
    sample_dir = ROOT / "skyrl_rewards" / "sample_data"
    records = [
        skyrl_record(r, i + 1, sample_dir, "skyrl_rewards", "math") for i, r in enumerate(rows)
    ]
    write_parquet(records, train)
    replies = {f"{i}_0": [row["completion"]] for i, row in enumerate(rows)}
    overrides = [
        "environment.env_class=skyrl_rewards",
        "environment.skyrl_gym.skyrl_rewards.pool=step_pool",
        "reward_pool.config=configs/math.yaml",
        "reward_pool.overrides=[name=step_pool,num_workers=1]",
        "generator.max_turns=1",
        "trainer.train_batch_size=3",
        "trainer.policy_mini_batch_size=3",
    ]
    return [train], replies, overrides


def retail_writes(n: int) -> tuple[list[Any], list[int]]:
    """The retail test tasks and the indices of the first ``n`` that write data."""
    from tau_bench_env.backends import load_domain
    from tau_bench_env.data_model.tasks import RESPOND

    domain = load_domain("tau2", "retail")
    tasks = domain.tasks("test")
    writes = [
        i
        for i, task in enumerate(tasks)
        if any(a.name not in domain.read_only_tools and a.name != RESPOND for a in task.actions)
    ]
    return tasks, writes[:n]


def gold_and_goodbye(tasks: list[Any], writes: list[int]) -> dict[str, list[str]]:
    """Scripted replies: sample 0 of the n-th task plays its gold actions, sample 1 says goodbye."""
    from tau_bench_env.data_model.tasks import RESPOND

    replies: dict[str, list[str]] = {}
    for n, i in enumerate(writes):
        task = tasks[i]
        turns = [
            str(a.kwargs["content"])
            if a.name == RESPOND
            else "<tool_call>\n"
            + json.dumps({"name": a.name, "arguments": dict(a.kwargs)})
            + "\n</tool_call>"
            for a in task.actions
        ]
        closing = "To confirm: " + ", ".join(task.outputs) + "." if task.outputs else "Done."
        replies[f"{n}_0"] = [*turns, closing]
        replies[f"{n}_1"] = ["Goodbye."]
    return replies


def tau_data(out: Path) -> tuple[list[Path], dict[str, list[str]], list[str]]:
    """Two retail tasks that write data: gold actions for sample 0, goodbye for sample 1."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = out / "tau.parquet"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "data" / "tau_bench_dataset.py"),
            "--domain",
            "retail",
        ]
        + ["--split", "test", "--out", str(parquet)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    tasks, writes = retail_writes(2)
    table = pq.read_table(parquet).to_pylist()
    rows = [{**table[i], "user_turns": ["Hi, I need help with my order."]} for i in writes]
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    replies = gold_and_goodbye(tasks, writes)
    overrides = [
        "environment.env_class=tau_bench_env",
        "environment.skyrl_gym.tau_bench_env.backend=tau2",
        "environment.skyrl_gym.tau_bench_env.domain=retail",
        "environment.skyrl_gym.tau_bench_env.user.kind=replay",
        "generator.use_conversation_multi_turn=true",
        "generator.max_turns=30",
        "generator.max_input_length=400000",
        "trainer.max_prompt_length=400000",
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=2",
    ]
    return [parquet], replies, overrides


def corpus(data: list[Path], replies: dict[str, list[str]]) -> list[str]:
    """Texts to learn the tokenizer's merges from: the rows (prompts, task data) and replies."""
    import pyarrow.parquet as pq

    rows = [
        json.dumps(row, default=str) for path in data for row in pq.read_table(path).to_pylist()
    ]
    return rows + [turn for turns in replies.values() for turn in turns]


def train_config(policy: Path, data: list[Path], out: Path, task_overrides: list[str]) -> Any:
    from skyrl_rewards.train.entrypoint import parse_config

    return parse_config(
        [
            f"trainer.policy.model.path={policy}",
            f"data.train_data={[str(p) for p in data]}",
            "data.val_data=[]",
            "data.dataloader.num_workers=0",
            "trainer.strategy=fsdp",
            "trainer.logger=console",
            "trainer.epochs=1",
            "trainer.max_training_steps=1",
            "trainer.eval_interval=-1",
            "trainer.ckpt_interval=-1",
            "trainer.hf_save_interval=-1",
            "trainer.flash_attn=false",
            "trainer.remove_microbatch_padding=false",
            "trainer.micro_train_batch_size_per_gpu=2",
            "trainer.micro_forward_batch_size_per_gpu=2",
            "trainer.placement.colocate_all=false",
            "trainer.placement.policy_num_gpus_per_node=1",
            "trainer.algorithm.advantage_estimator=grpo",
            "trainer.algorithm.use_kl_loss=false",
            "trainer.policy.optimizer_config.lr=1e-2",
            "trainer.policy.optimizer_config.weight_decay=0.0",
            f"trainer.export_path={out / 'export'}",
            f"trainer.ckpt_path={out / 'ckpt'}",
            f"trainer.log_path={out / 'logs'}",
            f"trainer.seed={SEED}",
            "generator.batched=false",
            "generator.n_samples_per_prompt=2",
            "generator.inference_engine.num_engines=1",
            "generator.inference_engine.enable_prefix_caching=false",
            f"generator.sampling_params.max_generate_length={MAX_NEW_TOKENS}",
            *task_overrides,
        ]
    )


def start_ray(cfg: Any) -> None:
    """A loopback Ray with one GPU resource declared on this CPU node and the CPU stand-ins."""
    import ray
    from skyrl.backends.skyrl_train.utils.ppo_utils import sync_registries
    from skyrl.train.utils.utils import prepare_runtime_environment

    env_vars = prepare_runtime_environment(cfg)
    env_vars["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]
    )
    env_vars["SKYRL_LOG_FILE"] = str(Path(cfg.trainer.log_path) / "infra.log")
    Path(cfg.trainer.log_path).mkdir(parents=True, exist_ok=True)
    ray.init(
        address="local",
        num_cpus=4,
        num_gpus=1,  # declared, not present: SkyRL's workers ask for one
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        namespace=NAMESPACE,
        log_to_driver=False,
        runtime_env={
            "env_vars": env_vars,
            "worker_process_setup_hook": "stand_ins.cpu_worker_setup",
        },
    )
    sync_registries()


def start_engine(
    engine: type[StandInEngine], client: type[StandInEngineClient], policy: Path, replies: Any
) -> tuple[Any, StandInEngineClient]:
    """The stand-in engine actor (named :data:`ENGINE`) on ``policy`` and its client."""
    import ray
    from transformers import AutoTokenizer

    actor = (
        ray.remote(engine)
        .options(name=ENGINE, namespace=NAMESPACE, num_cpus=0)
        .remote(str(policy), replies, SEED)
    )
    tokenizer = AutoTokenizer.from_pretrained(policy)
    return actor, client(ENGINE, tokenizer, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0)


class Recorder:
    """A SkyRL ``TrainingCallback`` keeping the step's training batch, status and logs."""

    def __init__(self) -> None:
        self.batch: Any = None
        self.advantages: Any = None
        self.status: dict[str, Any] = {}
        self.logs: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def on_step_end(self, trainer: Any, callback_input: Any, control: Any) -> None:
        self.batch = callback_input.batch
        self.status = dict(callback_input.metrics or {})

    def on_log(self, trainer: Any, callback_input: Any, control: Any) -> None:
        self.logs = dict(callback_input.logs or {})


def experiment(cfg: Any, client: StandInEngineClient, recorder: Recorder) -> Any:
    """``RewardsPPOExp`` with the stand-in engine as its inference client; observed, not changed."""
    from skyrl_rewards.train.experiment import RewardsPPOExp

    class StandInEnginePPOExp(RewardsPPOExp):
        generated: dict[str, Any] = {}

        def get_inference_client(self) -> Any:
            return client

        def get_generator(self, cfg: Any, tokenizer: Any, inference_engine_client: Any) -> Any:
            generator = super().get_generator(cfg, tokenizer, inference_engine_client)
            generate = generator.generate

            async def recorded(input_batch: Any, disable_tqdm: bool = False) -> Any:
                out = await generate(input_batch, disable_tqdm=disable_tqdm)
                self.generated = {
                    "rewards": [sum(r) if isinstance(r, list) else r for r in out["rewards"]],
                    "masked": [bool(m.get("should_mask")) for m in out["env_metrics"]],
                    "loss_tokens": [sum(m) for m in out["loss_masks"]],
                    "trajectories": [
                        f"{t.instance_id}_{t.repetition_id}"
                        for t in out.get("trajectory_ids") or input_batch["trajectory_ids"]
                    ],
                }
                return out

            generator.generate = recorded
            return generator

        def get_trainer(self, *args: Any, **kwargs: Any) -> Any:
            trainer = super().get_trainer(*args, **kwargs)
            trainer.add_callback(recorder)
            compute = trainer.compute_advantages_and_returns

            def recorded(data: Any) -> Any:  # before the loss reduction rescales them
                data = compute(data)
                recorder.advantages = data["advantages"].clone()
                return data

            trainer.compute_advantages_and_returns = recorded
            return trainer

    return StandInEnginePPOExp(cfg)


def masked_rows_gradient(trainer: Any, batch: Any, masked: list[int]) -> dict[str, float]:
    """Loss and grad norm of SkyRL's policy step on the masked rows, advantages forced to 1.0."""
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch

    rows = TrainingInputBatch.cat([batch.slice(i, i + 1) for i in masked])
    rows["advantages"] = rows["advantages"].clone().fill_(1.0)
    out = {}
    for label, loss_mask in (("masked", rows["loss_mask"]), ("unmasked", rows["response_mask"])):
        probe = rows.slice(0, len(masked))
        probe["loss_mask"] = loss_mask.clone()
        status = trainer.dispatch.forward_backward("policy", probe)
        grad_norm = trainer.dispatch.optim_step("policy")
        out[f"{label}_loss"] = float(status.metrics["policy_loss"])
        out[f"{label}_grad_norm"] = float(grad_norm)
    return out


def vision_inputs(
    trainer: Any, batch: Any, masked: list[int], image_token_id: int
) -> dict[str, Any]:
    """What reached the policy's forward from the images: the training batch's vision fields,
    the image tokens of each row, and how far the policy's logprobs of the judged rows'
    response tokens move when their pixels are zeroed (SkyRL's own forward, no optimizer)."""
    import torch
    from skyrl.backends.skyrl_train.distributed.dispatch import loss_fn_outputs_to_tensor
    from skyrl.backends.skyrl_train.training_batch import TensorList

    pixel_values, grids = batch["pixel_values"], batch["image_grid_thw"]
    judged = [i for i in range(len(pixel_values)) if i not in masked]
    rows = batch.select(
        keys=["sequences", "attention_mask", "pixel_values", "image_grid_thw"],
        metadata_keys=["response_length"],
    )
    logprobs = {}
    for label, pixels in (
        ("pixels", pixel_values),
        ("zeroed", TensorList([torch.zeros_like(t) for t in pixel_values.tensors])),
    ):
        rows["pixel_values"] = pixels
        output = trainer.dispatch.forward("policy", rows)
        logprobs[label] = loss_fn_outputs_to_tensor(output.loss_fn_outputs, key="logprobs")
    response_mask = batch["response_mask"].bool()
    moved = (logprobs["pixels"] - logprobs["zeroed"]).abs()[judged][response_mask[judged]]
    return {
        "fields": [type(pixel_values).__name__, type(grids).__name__],
        "pixel_rows": [list(t.shape) for t in pixel_values.tensors],
        "image_grid_thw": [t.tolist() for t in grids.tensors],
        "image_tokens": [int((row == image_token_id).sum()) for row in batch["sequences"]],
        "logprob_shift_when_pixels_zeroed": round(float(moved.max()), 6),
    }


def exported_checksum(trainer: Any, out: Path, auto_model: Any) -> str:
    """The policy's weights as SkyRL's own HF export writes them, loaded by ``auto_model``.

    Loaded, not read from the files: transformers 5 writes Qwen2.5-VL / Qwen3-VL checkpoints
    under their original key names (``model.layers.*``, ``visual.*``) and maps them back to
    the module's (``model.language_model.*``, ``model.visual.*``) when it loads them.
    """
    trainer.dispatch.save_hf_model("policy", str(out), trainer.tokenizer)
    return weights_checksum(auto_model.from_pretrained(out).state_dict())


class Setup(NamedTuple):
    """What a task trains on and with."""

    data: list[Path]
    replies: dict[str, list[str]]
    overrides: list[str]
    policy: Path
    auto_model: Any
    """The ``transformers`` auto class of the policy (SkyRL's choice for it)."""
    engine: type[StandInEngine]
    client: type[StandInEngineClient]
    gold: dict[str, Any]
    """REC: each gold trajectory's box and the IoU it must score; empty otherwise."""


def prepare(task: str, out: Path) -> Setup:
    """The task's rows (parquet), scripted replies, overrides, policy and engine classes."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    if task in REC_FAMILIES:
        data, replies, overrides, gold = rec_data(out, task)
        policy = build_vision_policy(out / "policy", REC_FAMILIES[task], corpus(data, replies))
        return Setup(
            data,
            replies,
            overrides,
            policy,
            AutoModelForImageTextToText,
            VisionStandInEngine,
            VisionStandInEngineClient,
            gold,
        )
    data, replies, overrides = (math_data if task == "math" else tau_data)(out)
    policy = build_policy(out / "policy", corpus(data, replies) if task == "tau" else [])
    return Setup(
        data,
        replies,
        overrides,
        policy,
        AutoModelForCausalLM,
        StandInEngine,
        StandInEngineClient,
        {},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=["math", "tau", *REC_FAMILIES])
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)

    import ray

    from skyrl_rewards.train.entrypoint import start_reward_pool
    from skyrl_rewards.train.env import shared_pool
    from skyrl_rewards.train.registration import register_installed_envs

    started = time.perf_counter()
    vision = args.task in REC_FAMILIES
    setup = prepare(args.task, out)
    data, replies, policy, auto_model = setup.data, setup.replies, setup.policy, setup.auto_model
    initial_model = auto_model.from_pretrained(policy)
    initial = weights_checksum(initial_model.state_dict())
    cfg = train_config(policy, data, out, setup.overrides)
    start_ray(cfg)
    pool = start_reward_pool(cfg) if cfg.reward_pool.config else None
    try:
        register_installed_envs()
        engine, client = start_engine(setup.engine, setup.client, policy, replies)
        recorder = Recorder()
        exp = experiment(cfg, client, recorder)
        run_started = time.perf_counter()
        exp.run()
        run_s = time.perf_counter() - run_started
        trainer = exp.trainer
        engine_report = ray.get(engine.report.remote())
        engine_now = ray.get(engine.checksum.remote())
        exported = exported_checksum(trainer, out / "exported", auto_model)
        batch = recorder.batch
        generated = exp.generated
        masked = [i for i, m in enumerate(generated["masked"]) if m]
        advantages = [
            [round(float(a), 4) for a in row[mask.bool()].tolist()][:1]
            + ([round(float(row[mask.bool()].abs().max()), 4)] if mask.any() else [0.0])
            for row, mask in zip(recorder.advantages, batch["response_mask"], strict=True)
        ]
        vision_report = (
            {
                **vision_inputs(trainer, batch, masked, initial_model.config.image_token_id),
                "engine_rendered_images": engine_report["rendered_images"],
            }
            if vision
            else {}
        )
        gradient = masked_rows_gradient(trainer, batch, masked) if masked else {}
        pool_metrics = (
            shared_pool(cfg.environment.skyrl_gym.skyrl_rewards.pool).metrics() if pool else {}
        )
    finally:
        if pool is not None:
            pool.shutdown()
    logs = recorder.logs
    summary = {
        "task": args.task,
        "trajectories": generated["trajectories"],
        "rewards": [round(r, 4) for r in generated["rewards"]],
        "masked": generated["masked"],
        "loss_tokens": generated["loss_tokens"],
        "advantages_first_and_absmax": advantages,
        "weights": {
            "initial": initial,
            "engine_syncs": engine_report["synced"],
            "engine_now": engine_now,
            "policy_export_after_step": exported,
        },
        "engine_generated": engine_report["generated"],
        "masked_rows_gradient": gradient,
        **({"gold": setup.gold, "vision": vision_report} if vision else {}),
        "pool_tasks": pool_metrics.get("tasks"),
        "metrics": {
            k: v
            for k, v in logs.items()
            if isinstance(v, (int, float))
            and (k.startswith(("generate/", "timing/", "reward/")) or k in ("policy/policy_loss",))
        },
        "policy_status": {k: v for k, v in recorder.status.items() if isinstance(v, (int, float))},
        "run_s": round(run_s, 2),
        "total_s": round(time.perf_counter() - started, 2),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    sys.stdout.write(json.dumps(summary, default=str) + "\n")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
