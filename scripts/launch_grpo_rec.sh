#!/usr/bin/env bash
# GRPO with SkyRL 0.4 on a VLM-R1-style REC task (referring-expression grounding),
# rewards (IoU + REC format) from the Ray reward pool, which the entry point starts.
#
#   bash scripts/launch_grpo_rec.sh            # train: needs GPUs and Python 3.12 with
#                                              #   pip install -e ".[skyrl]" "skyrl[fsdp]==0.4.0"
#   bash scripts/launch_grpo_rec.sh --check    # no GPU: write the parquet, parse and validate
#                                              #   the whole config with SkyRL's own parser
#   bash scripts/launch_grpo_rec.sh trainer.epochs=2   # any further SkyRL override
#
# Environment variables (defaults in brackets):
#   INPUT     JSONL rows with problem, solution, image_path, image_grid_thw [the shipped sample]
#   DATA_DIR  where train/validation parquet go [$HOME/data/skyrl_rewards/rec]
#   MODEL     policy [Qwen/Qwen2.5-VL-3B-Instruct]   NUM_GPUS [4]
#   PYTHON    the Python 3.12 interpreter with SkyRL installed [python]
#   RAY_ADDRESS  join a running cluster (the pool spreads its workers over its nodes)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
CHECK=()
if [[ "${1:-}" == "--check" ]]; then CHECK=(--check); shift; fi
INPUT=${INPUT:-skyrl_rewards/sample_data/rec.jsonl}
DATA_DIR=${DATA_DIR:-$HOME/data/skyrl_rewards/rec}
MODEL=${MODEL:-Qwen/Qwen2.5-VL-3B-Instruct}
NUM_GPUS=${NUM_GPUS:-4}

"$PYTHON" scripts/prepare_skyrl_data.py --input "$INPUT" --out-dir "$DATA_DIR" --env-class skyrl_rewards

exec "$PYTHON" -m skyrl_rewards.train "${CHECK[@]}" \
  data.train_data="['$DATA_DIR/train.parquet']" \
  data.val_data="['$DATA_DIR/validation.parquet']" \
  environment.env_class=skyrl_rewards \
  environment.skyrl_gym.skyrl_rewards.pool=skyrl_rewards_pool \
  reward_pool.config=configs/pool.yaml \
  reward_pool.rewards=configs/rec.yaml \
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
