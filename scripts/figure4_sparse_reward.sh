#!/usr/bin/env bash
# Figure 4 / §4.4: sparse rewards, where vanilla GRPO rarely sees a win, with and without PaW.
#   tiny:  the paired study's sparse start (noisy expert ε = 0.9) on Shelf, GRPO vs GRPO + PaW;
#          seed-band curves in benchmarks/results/study_shelf_u24_sparse.png.
#   paper: Llama3.2-3B-Instruct on WebShop, GRPO + PaW vs GRPO (training rewards in each
#          run's metrics.jsonl and curves.png).
source "$(dirname "$0")/_common.sh"
if [[ "$SCALE" == tiny ]]; then
    python -m benchmarks.study_small --env shelf --starts sparse --seeds 10 --workers 2 \
        --variants grpo grpo_paw
else
    paper_pair configs/paper/webshop_llama3.2-3b_grpo_paw.yaml
fi
