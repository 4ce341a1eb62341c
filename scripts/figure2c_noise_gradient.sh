#!/usr/bin/env bash
# Figure 2c / Appendix A.4: the share of the WM gradient on noisy WebShop tokens, CE vs MAE vs CMAE.
#   tiny:  benchmarks/noise_gradient.py (nano model, untrained and pretrained; real catalog too
#          when ../shared/data/webshop exists).
#   paper: log the same diagnostic while training Qwen2.5-1.5B GRPO + PaW on WebShop
#          (metrics wm_noise_share_ce / _mae / _cmae in metrics.jsonl).
source "$(dirname "$0")/_common.sh"
if [[ "$SCALE" == tiny ]]; then
    python -m benchmarks.noise_gradient
else
    paw-gym train --config configs/paper/webshop_qwen2.5-1.5b_grpo_paw.yaml \
        --noise_gradient_metric true --output_dir runs/paper/webshop-noise-gradient
fi
