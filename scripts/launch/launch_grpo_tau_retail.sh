#!/usr/bin/env bash
# GRPO with SkyRL 0.4 on tau-bench retail: multi-turn tool use, the binary
# tau-bench reward paid by the `tau_bench` env when the episode ends.
#
#   bash scripts/launch/launch_grpo_tau_retail.sh            # train: needs GPUs, Python 3.12 with
#                                                     #   pip install -e ".[skyrl]" "skyrl[fsdp]==0.4.0",
#                                                     #   and a user-model endpoint
#   bash scripts/launch/launch_grpo_tau_retail.sh --check    # no GPU: write the task parquet, parse and
#                                                     #   validate the config with SkyRL's own parser
#   bash scripts/launch/launch_grpo_tau_retail.sh trainer.epochs=2   # any further SkyRL override
#
# Environment variables (defaults in brackets):
#   DATA_DIR       where train/test parquet go [out/data/tau_retail in the checkout: out/ is git-ignored]
#   BACKEND        tau2 (offline, packaged) | tau_bench (installed from its repository) [tau2]
#   MODEL          policy [Qwen/Qwen2.5-7B-Instruct]   NUM_GPUS [4]
#   USER_BASE_URL  OpenAI-compatible endpoint of the user model [http://127.0.0.1:8000/v1]
#   USER_MODEL     user model name at that endpoint [Qwen/Qwen2.5-32B-Instruct]
#   PYTHON         the Python 3.12 interpreter with SkyRL installed [python]
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
DATA_DIR=${DATA_DIR:-$PWD/out/data/tau_retail}  # out/: ignored by git
BACKEND=${BACKEND:-tau2}
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}
NUM_GPUS=${NUM_GPUS:-4}
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
  trainer.algorithm.advantage_estimator=grpo \
  trainer.policy.model.path="$MODEL" \
  trainer.placement.colocate_all=true \
  trainer.strategy=fsdp \
  trainer.placement.policy_num_gpus_per_node="$NUM_GPUS" \
  trainer.placement.ref_num_gpus_per_node="$NUM_GPUS" \
  generator.inference_engine.num_engines="$NUM_GPUS" \
  generator.inference_engine.tensor_parallel_size=1 \
  generator.inference_engine.backend=vllm \
  generator.inference_engine.run_engines_locally=true \
  generator.max_turns=30 \
  generator.use_conversation_multi_turn=true \
  generator.batched=false \
  generator.n_samples_per_prompt=8 \
  generator.sampling_params.max_generate_length=1024 \
  generator.max_input_length=24576 \
  trainer.epochs=4 \
  trainer.train_batch_size=32 \
  trainer.policy_mini_batch_size=16 \
  trainer.micro_forward_batch_size_per_gpu=1 \
  trainer.micro_train_batch_size_per_gpu=1 \
  trainer.max_prompt_length=8192 \
  trainer.policy.optimizer_config.lr=1.0e-6 \
  trainer.algorithm.use_kl_loss=true \
  trainer.logger=console \
  trainer.project_name=skyrl_rewards \
  trainer.run_name=grpo_tau_retail \
  "$@"
