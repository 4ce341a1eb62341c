#!/usr/bin/env bash
# Table 1: ALFWorld and WebShop success, GRPO / GiGPO with and without PaW.
#   tiny:  the paired study on the envs where the nano model learns (Shelf, FrozenLake,
#          Sokoban): GRPO, GiGPO, each with and without PaW, 10 seeds.
#   paper: Qwen2.5-1.5B/7B on ALFWorld and WebShop (configs/paper), PaW and vanilla.
source "$(dirname "$0")/_common.sh"
if [[ "$SCALE" == tiny ]]; then
    for env in shelf frozenlake sokoban; do
        python -m benchmarks.study_small --env "$env" --starts normal --seeds 10 --workers 2 \
            --variants grpo grpo_paw gigpo gigpo_paw
    done
else
    for config in configs/paper/{alfworld,webshop}_qwen2.5-{1.5b,7b}_{grpo,gigpo}_paw.yaml; do
        paper_pair "$config"
    done
fi
