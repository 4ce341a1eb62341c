# Shared by scripts/*.sh: the scale argument and the paper-scale train + eval loop.
set -euo pipefail
cd "$(dirname "$0")/.."
# A script with a third scale sets REAL_SCALE to what it runs before sourcing this file.
SCALE="${1:-}"
if [[ "$SCALE" != "tiny" && "$SCALE" != "paper" && ( -z "${REAL_SCALE:-}" || "$SCALE" != "real" ) ]]; then
    echo "usage: $0 tiny|paper${REAL_SCALE:+|real}   (tiny: CPU, minutes; paper: a GPU machine, hub models, the official data${REAL_SCALE:+; real: $REAL_SCALE})" >&2
    exit 2
fi

# paper_pair CONFIG [extra paw-gym train flags]: train the config as written (PaW) and with
# --paw false (vanilla RL), then evaluate both on every task of the env's held-out split
# (with the env and prompt settings each checkpoint was trained with).
paper_pair() {
    local config="$1"; shift
    local name; name="$(basename "$config" .yaml)"
    for paw in true false; do
        local out="runs/paper/${name}-paw-${paw}"
        paw-gym train --config "$config" --paw "$paw" --output_dir "$out" "$@"
        paw-gym eval --checkpoint "$(ls -d "$out"/checkpoints/step-* | tail -1)" \
            --output_dir "$out/eval"
    done
}
