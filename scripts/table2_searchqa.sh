#!/usr/bin/env bash
# Table 2: search-augmented QA (trained on NQ + HotpotQA), GRPO / GiGPO with and without PaW.
#   tiny:  none. The nano model does not learn search QA (it cannot copy entities out of
#          retrieved passages); see docs/training.md.
#   paper: Qwen2.5-3B/7B (configs/paper/searchqa_*), needs $SEARCHQA_TRAIN and an E5
#          $SEARCHQA_RETRIEVER; evaluate on each of the seven test sets with
#          `paw-gym eval --checkpoint DIR --env_kwargs dataset=FILE`.
source "$(dirname "$0")/_common.sh"
if [[ "$SCALE" == tiny ]]; then
    echo "table 2 has no tiny-scale version: the nano model does not learn search QA" >&2
    exit 1
fi
for config in configs/paper/searchqa_qwen2.5-{3b,7b}_{grpo,gigpo}_paw.yaml; do
    paper_pair "$config"
done
