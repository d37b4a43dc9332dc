#!/usr/bin/env bash
# Fully-async GRPO with SkyRL 0.4 on tau-bench retail: SkyRL's FullyAsyncRayPPOTrainer
# (trainer.fully_async.enabled=true). Generation never stops for training: up to
# WORKERS prompt groups are played at once, each step trains on the first MINI_BATCH
# groups to finish, then generation pauses for the weight sync and resumes; a group is
# at most MAX_STALENESS steps older than the policy it trains. Training and inference
# need GPUs of their own (no colocate_all), and the loss optimises against the rollout
# logprobs (rollout_is), as SkyRL's fully-async trainer asserts.
#
#   bash scripts/launch/launch_fully_async_tau_retail.sh            # train: needs GPUs, Python 3.12 with
#                                                       #   pip install -e ".[skyrl]" "skyrl[fsdp]==0.4.0",
#                                                       #   and a user-model endpoint
#   bash scripts/launch/launch_fully_async_tau_retail.sh --check    # no GPU: write the task parquet, check
#                                                       #   the config with SkyRL's parser and its
#                                                       #   fully-async trainer's own assertions
#   bash scripts/launch/launch_fully_async_tau_retail.sh trainer.epochs=2   # any further SkyRL override
#
# Environment variables (defaults in brackets):
#   DATA_DIR       where train/test parquet go [out/data/tau_retail in the checkout: out/ is git-ignored]
#   BACKEND        tau2 (offline, packaged) | tau_bench (installed from its repository) [tau2]
#   MODEL          policy [Qwen/Qwen2.5-7B-Instruct]
#   TRAIN_GPUS     GPUs of the policy [4]    INFERENCE_GPUS  vLLM engines, one GPU each [4]
#   MINI_BATCH     groups per training step [32]    MAX_STALENESS [4]
#   WORKERS        groups in flight at once, MINI_BATCH..MINI_BATCH*(MAX_STALENESS+1) [128]
#   USER_BASE_URL  OpenAI-compatible endpoint of the user model [http://127.0.0.1:8000/v1]
#   USER_MODEL     user model name at that endpoint [Qwen/Qwen2.5-32B-Instruct]
#   PYTHON         the Python 3.12 interpreter with SkyRL installed [python]
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python}
CHECK=()
if [[ "${1:-}" == "--check" ]]; then CHECK=(--check); shift; fi
DATA_DIR=${DATA_DIR:-$PWD/out/data/tau_retail}  # out/: ignored by git
BACKEND=${BACKEND:-tau2}
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}
TRAIN_GPUS=${TRAIN_GPUS:-4}
INFERENCE_GPUS=${INFERENCE_GPUS:-4}
MINI_BATCH=${MINI_BATCH:-32}
MAX_STALENESS=${MAX_STALENESS:-4}
WORKERS=${WORKERS:-128}
USER_BASE_URL=${USER_BASE_URL:-http://127.0.0.1:8000/v1}
USER_MODEL=${USER_MODEL:-Qwen/Qwen2.5-32B-Instruct}

"$PYTHON" scripts/data/tau_bench_dataset.py --backend "$BACKEND" --domain retail --split train --out "$DATA_DIR/train.parquet"
"$PYTHON" scripts/data/tau_bench_dataset.py --backend "$BACKEND" --domain retail --split test --out "$DATA_DIR/test.parquet"

exec "$PYTHON" -m skyrl_rewards.train "${CHECK[@]}" \
  data.train_data="['$DATA_DIR/train.parquet']" \
  data.val_data="['$DATA_DIR/test.parquet']" \
  environment.env_class=tau_bench_env \
  environment.skyrl_gym.tau_bench_env.backend="$BACKEND" \
  environment.skyrl_gym.tau_bench_env.domain=retail \
  environment.skyrl_gym.tau_bench_env.split=train \
  environment.skyrl_gym.tau_bench_env.max_turns=30 \
  environment.skyrl_gym.tau_bench_env.user.kind=openai \
  environment.skyrl_gym.tau_bench_env.user.base_url="$USER_BASE_URL" \
  environment.skyrl_gym.tau_bench_env.user.model="$USER_MODEL" \
  trainer.fully_async.enabled=true \
  trainer.fully_async.max_staleness_steps="$MAX_STALENESS" \
  trainer.fully_async.num_parallel_generation_workers="$WORKERS" \
  trainer.algorithm.advantage_estimator=grpo \
  trainer.algorithm.policy_loss_type=rollout_is \
  trainer.algorithm.use_kl_loss=false \
  trainer.policy.model.path="$MODEL" \
  trainer.placement.colocate_all=false \
  trainer.strategy=fsdp \
  trainer.placement.policy_num_gpus_per_node="$TRAIN_GPUS" \
  generator.inference_engine.num_engines="$INFERENCE_GPUS" \
  generator.inference_engine.tensor_parallel_size=1 \
  generator.inference_engine.backend=vllm \
  generator.inference_engine.run_engines_locally=true \
  generator.max_turns=30 \
  generator.use_conversation_multi_turn=true \
  generator.batched=false \
  generator.n_samples_per_prompt=8 \
  generator.sampling_params.max_generate_length=1024 \
  generator.sampling_params.logprobs=0 \
  generator.max_input_length=24576 \
  trainer.epochs=4 \
  trainer.train_batch_size="$MINI_BATCH" \
  trainer.policy_mini_batch_size="$MINI_BATCH" \
  trainer.micro_forward_batch_size_per_gpu=1 \
  trainer.micro_train_batch_size_per_gpu=1 \
  trainer.max_prompt_length=8192 \
  trainer.policy.optimizer_config.lr=1.0e-6 \
  trainer.logger=console \
  trainer.project_name=skyrl_rewards \
  trainer.run_name=fully_async_tau_retail \
  "$@"
