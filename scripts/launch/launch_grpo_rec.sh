#!/usr/bin/env bash
# GRPO with SkyRL 0.4 on a VLM-R1-style REC task (referring-expression grounding),
# rewards (IoU + REC format) from the Ray reward pool, which the entry point starts, read in
# the policy's box format (FAMILY): Qwen3-VL answers on a 0-1000 grid, Qwen2.5-VL in pixels
# of its resized input (the reward computes the resize with the engine's MAX_PIXELS).
#
#   bash scripts/launch/launch_grpo_rec.sh            # train: needs GPUs and Python 3.12 with
#                                              #   pip install -e ".[skyrl]" "skyrl[fsdp]==0.4.0"
#   FAMILY=qwen2_5_vl bash scripts/launch/launch_grpo_rec.sh   # Qwen2.5-VL-3B instead of Qwen3-VL-2B
#   bash scripts/launch/launch_grpo_rec.sh --check    # no GPU: write the parquet, parse and validate
#                                              #   the whole config with SkyRL's own parser
#   bash scripts/launch/launch_grpo_rec.sh trainer.epochs=2   # any further SkyRL override
#
# Environment variables (defaults in brackets):
#   FAMILY    the policy's box format: qwen3_vl, qwen2_5_vl, qwen2_vl, ... [qwen3_vl]
#   MODEL     policy [Qwen/Qwen3-VL-2B-Instruct; Qwen/Qwen2.5-VL-3B-Instruct for qwen2_5_vl]
#   MAX_PIXELS  the engine processor's max_pixels, given to vLLM (mm_processor_kwargs), the
#             data check and the reward alike [1003520 for qwen2_5_vl; unset: the processor's]
#   INPUT     JSONL rows with problem, solution, image_path [the shipped sample]
#   DATA_DIR  where train/validation parquet go [out/data/rec in the checkout: out/ is git-ignored]
#   NUM_GPUS [4]   PYTHON  the Python 3.12 interpreter with SkyRL installed [python]
#   RAY_ADDRESS  join a running cluster (the pool spreads its workers over its nodes)
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python}
if ! "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('skyrl') is None)" 2>/dev/null; then
  echo "$(basename "$0"): $PYTHON ($(command -v "$PYTHON" || echo 'not found')) has no SkyRL 0.4; build its venv and use it:" >&2
  echo "  bash scripts/launch/make_skyrl_venv.sh && . .venv-skyrl/bin/activate   (or PYTHON=.venv-skyrl/bin/python)" >&2
  exit 2
fi
CHECK=()
if [[ "${1:-}" == "--check" ]]; then CHECK=(--check); shift; fi
INPUT=${INPUT:-skyrl_rewards/sample_data/rec.jsonl}
DATA_DIR=${DATA_DIR:-$PWD/out/data/rec}  # out/: ignored by git
FAMILY=${FAMILY:-qwen3_vl}
NUM_GPUS=${NUM_GPUS:-4}
if [[ "$FAMILY" == qwen2_5_vl || "$FAMILY" == resized_pixels ]]; then
  MODEL=${MODEL:-Qwen/Qwen2.5-VL-3B-Instruct}
  MAX_PIXELS=${MAX_PIXELS:-1003520}
else
  MODEL=${MODEL:-Qwen/Qwen3-VL-2B-Instruct}
fi
PIXELS_DATA=() PIXELS_ENGINE=() PIXELS_REWARD=""
if [[ -n "${MAX_PIXELS:-}" ]]; then
  PIXELS_DATA=(--max-pixels "$MAX_PIXELS")
  PIXELS_ENGINE=("generator.inference_engine.engine_init_kwargs.mm_processor_kwargs.max_pixels=$MAX_PIXELS")
  PIXELS_REWARD=",rewards.iou.max_pixels=$MAX_PIXELS"
fi

"$PYTHON" scripts/data/prepare_skyrl_data.py --input "$INPUT" --out-dir "$DATA_DIR" \
  --env-class skyrl_rewards --box-format "$FAMILY" "${PIXELS_DATA[@]}"

exec "$PYTHON" -m skyrl_rewards.train "${CHECK[@]}" \
  data.train_data="['$DATA_DIR/train.parquet']" \
  data.val_data="['$DATA_DIR/validation.parquet']" \
  environment.env_class=skyrl_rewards \
  environment.skyrl_gym.skyrl_rewards.pool=skyrl_rewards_pool \
  reward_pool.config=configs/pool.yaml \
  reward_pool.rewards=configs/rec.yaml \
  reward_pool.overrides="[rewards.iou.box_format=$FAMILY,rewards.format_rec.box_format=$FAMILY$PIXELS_REWARD]" \
  trainer.algorithm.advantage_estimator=grpo \
  trainer.policy.model.path="$MODEL" \
  trainer.placement.colocate_all=true \
  trainer.strategy=fsdp \
  trainer.remove_microbatch_padding=false \
  trainer.placement.policy_num_gpus_per_node="$NUM_GPUS" \
  trainer.placement.ref_num_gpus_per_node="$NUM_GPUS" \
  generator.inference_engine.num_engines="$NUM_GPUS" \
  generator.inference_engine.tensor_parallel_size=1 \
  generator.inference_engine.backend=vllm \
  generator.inference_engine.run_engines_locally=true \
  generator.vision_language_generator=true \
  "${PIXELS_ENGINE[@]}" \
  generator.batched=false \
  generator.use_conversation_multi_turn=true \
  generator.max_turns=1 \
  generator.n_samples_per_prompt=8 \
  generator.sampling_params.max_generate_length=1024 \
  trainer.epochs=2 \
  trainer.train_batch_size=64 \
  trainer.policy_mini_batch_size=32 \
  trainer.micro_forward_batch_size_per_gpu=4 \
  trainer.micro_train_batch_size_per_gpu=4 \
  trainer.max_prompt_length=2048 \
  trainer.policy.optimizer_config.lr=1.0e-6 \
  trainer.algorithm.use_kl_loss=true \
  trainer.logger=console \
  trainer.project_name=skyrl_rewards \
  trainer.run_name=grpo_rec \
  "$@"
