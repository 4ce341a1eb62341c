#!/usr/bin/env bash
# Figure 6: sensitivity of GRPO + PaW to the CMAE threshold ρ and the selection ratio α.
#   tiny:  the paired study on Shelf: ρ ∈ {0.1, 0.2, 0.5}, α ∈ {0.25, 0.5, 0.75, 1.0}.
#   paper: Qwen2.5-1.5B GRPO + PaW on WebShop over the same grid.
source "$(dirname "$0")/_common.sh"
if [[ "$SCALE" == tiny ]]; then
    python -m benchmarks.study_small --env shelf --starts normal --seeds 10 --workers 2 \
        --variants grpo_paw paw_rho_0.1 paw_rho_0.5 paw_alpha_0.25 paw_alpha_0.5 paw_alpha_1.0
else
    config=configs/paper/webshop_qwen2.5-1.5b_grpo_paw.yaml
    for rho in 0.1 0.3 0.5; do
        paw-gym train --config "$config" --rho "$rho" --output_dir "runs/paper/webshop-rho-$rho"
    done
    for alpha in 0.25 0.5 1.0; do
        paw-gym train --config "$config" --alpha "$alpha" --output_dir "runs/paper/webshop-alpha-$alpha"
    done
fi
