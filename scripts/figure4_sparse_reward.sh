#!/usr/bin/env bash
# Figure 4 / §4.4: sparse rewards, where vanilla GRPO rarely sees a win, with and without PaW.
#   tiny:  the paired study's sparse start (noisy expert ε = 0.9) on Shelf, GRPO vs GRPO + PaW;
#          seed-band curves in benchmarks/results/study_shelf_u24_sparse.png.
#   real:  SmolLM2-135M-Instruct after its short LoRA SFT, rollouts at temperature 1.0, 20
#          updates, GRPO vs GRPO + PaW on paired seeds (issue 55; about 70 CPU min a run with
#          its evaluations, one torch thread; the two variants run at once, so 2 cores; a
#          stopped run goes on from its last checkpoint when the script runs again;
#          SEEDS="3" runs one seed): tables and figure from
#          `python -m benchmarks.real_model shelf-sparse --report`.
#   paper: Llama3.2-3B-Instruct on WebShop, GRPO + PaW vs GRPO (training rewards in each
#          run's metrics.jsonl and curves.png).
REAL_SCALE="SmolLM2-135M-Instruct on CPU, about 70 CPU min a run, two at a time"
source "$(dirname "$0")/_common.sh"
if [[ "$SCALE" == tiny ]]; then
    python -m benchmarks.study_small --env shelf --starts sparse --seeds 10 --workers 2 \
        --variants grpo grpo_paw
elif [[ "$SCALE" == real ]]; then
    paw-gym get-model smollm2-135m-instruct
    python -m benchmarks.real_model shelf-sparse --stages sft
    # shellcheck disable=SC2086  # SEEDS is a list of seeds
    for seed in ${SEEDS:-0 1 2 3 4 5 6 7 8 9}; do  # seed by seed: a study cut short stays paired
        pids=()
        for variant in grpo grpo_paw; do
            python -m benchmarks.real_model shelf-sparse --stages rl --variants "$variant" \
                --seeds "$seed" &
            pids+=($!)
        done
        failed=0
        for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
        (( failed == 0 ))  # both ran; stop after a seed where either failed
    done
    python -m benchmarks.real_model shelf-sparse --report
else
    paper_pair configs/paper/webshop_llama3.2-3b_grpo_paw.yaml
fi
