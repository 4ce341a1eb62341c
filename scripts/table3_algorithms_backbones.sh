#!/usr/bin/env bash
# Table 3: WebShop across RL algorithms (PPO, RLOO) and backbones, each with and without PaW.
#   tiny:  the paired study on Shelf with RLOO and PPO, each with and without PaW (10 seeds).
#   paper: configs/paper/webshop_qwen2.5-1.5b_{ppo,rloo}_paw.yaml and the Qwen3-1.7B,
#          Llama3.2-3B-Instruct and Qwen2.5-14B-Instruct GRPO configs.
source "$(dirname "$0")/_common.sh"
if [[ "$SCALE" == tiny ]]; then
    python -m benchmarks.study_small --env shelf --starts normal --seeds 10 --workers 2 \
        --variants rloo rloo_paw ppo ppo_paw
else
    for config in configs/paper/webshop_qwen2.5-1.5b_{ppo,rloo}_paw.yaml \
                  configs/paper/webshop_{qwen3-1.7b,llama3.2-3b,qwen2.5-14b}_grpo_paw.yaml; do
        paper_pair "$config"
    done
fi
