#!/usr/bin/env bash
# Table 4: ablations of GRPO + PaW: a fixed λ = 1 ("w/o Ada. Coef.") and CE instead of CMAE.
#   tiny:  the paired study on Shelf and FrozenLake: grpo, grpo_paw, paw_fixed_lambda, paw_ce.
#   paper: Qwen2.5-1.5B GRPO + PaW on ALFWorld and WebShop, each ablation as one flag.
source "$(dirname "$0")/_common.sh"
if [[ "$SCALE" == tiny ]]; then
    for env in shelf frozenlake; do
        python -m benchmarks.study_small --env "$env" --starts normal --seeds 10 --workers 2 \
            --variants grpo grpo_paw paw_fixed_lambda paw_ce
    done
else
    for config in configs/paper/{alfworld,webshop}_qwen2.5-1.5b_grpo_paw.yaml; do
        name="$(basename "$config" .yaml)"
        paw-gym train --config "$config" --adaptive_coef false --output_dir "runs/paper/$name-fixed-lambda"
        paw-gym train --config "$config" --wm_loss ce --output_dir "runs/paper/$name-ce"
    done
fi
