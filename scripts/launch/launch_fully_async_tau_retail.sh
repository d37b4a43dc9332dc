#!/usr/bin/env bash
# Fully-async GRPO with SkyRL 0.4 on tau-bench retail: SkyRL's FullyAsyncRayPPOTrainer
# (trainer.fully_async.enabled=true) on launch_grpo_tau_retail.sh's data, env and model.
# Generation never stops for training: up to WORKERS prompt groups are played at once,
# each step trains on the first MINI_BATCH groups to finish, then generation pauses for
# the weight sync and resumes; a group starts only while fewer than
# (MAX_STALENESS + step) * MINI_BATCH groups are accepted or running. Training and
# inference need GPUs of their own (no colocate_all), and the loss optimises against
# the rollout logprobs (rollout_is), as SkyRL's fully-async trainer asserts.
#
#   bash scripts/launch/launch_fully_async_tau_retail.sh            # train: needs GPUs, Python 3.12 with
#                                                       #   pip install -e ".[skyrl]" "skyrl[fsdp]==0.4.0",
#                                                       #   and a user-model endpoint
#   bash scripts/launch/launch_fully_async_tau_retail.sh --check    # no GPU: write the task parquet, check
#                                                       #   the config with SkyRL's parser and its
#                                                       #   fully-async trainer's own assertions
#   bash scripts/launch/launch_fully_async_tau_retail.sh trainer.epochs=2   # any further SkyRL override
#
# Environment variables (defaults in brackets), besides launch_grpo_tau_retail.sh's
# (BACKEND, MODEL, USER_BASE_URL, USER_MODEL, PYTHON):
#   DATA_DIR       where train/test parquet go [out/data/tau_retail in the checkout: out/ is git-ignored]
#   TRAIN_GPUS     GPUs of the policy [4]    INFERENCE_GPUS  vLLM engines, one GPU each [4]
#   MINI_BATCH     groups per training step [32]    MAX_STALENESS [4]
#   WORKERS        groups in flight at once, MINI_BATCH..MINI_BATCH*(MAX_STALENESS+1) [128]
set -euo pipefail
cd "$(dirname "$0")/../.."
CHECK=()
if [[ "${1:-}" == "--check" ]]; then CHECK=(--check); shift; fi
TRAIN_GPUS=${TRAIN_GPUS:-4}
INFERENCE_GPUS=${INFERENCE_GPUS:-4}
MINI_BATCH=${MINI_BATCH:-32}
MAX_STALENESS=${MAX_STALENESS:-4}
WORKERS=${WORKERS:-128}
DATA_DIR=${DATA_DIR:-$PWD/out/data/tau_retail}  # out/: ignored by git; the synchronous run's data
export DATA_DIR

# later overrides win: these replace the synchronous script's placement, batch and loss
exec bash scripts/launch/launch_grpo_tau_retail.sh "${CHECK[@]}" \
  trainer.fully_async.enabled=true \
  trainer.fully_async.max_staleness_steps="$MAX_STALENESS" \
  trainer.fully_async.num_parallel_generation_workers="$WORKERS" \
  trainer.placement.colocate_all=false \
  trainer.placement.policy_num_gpus_per_node="$TRAIN_GPUS" \
  generator.inference_engine.num_engines="$INFERENCE_GPUS" \
  trainer.train_batch_size="$MINI_BATCH" \
  trainer.policy_mini_batch_size="$MINI_BATCH" \
  trainer.algorithm.policy_loss_type=rollout_is \
  trainer.algorithm.use_kl_loss=false \
  generator.sampling_params.logprobs=0 \
  trainer.run_name=fully_async_tau_retail \
  "$@"
