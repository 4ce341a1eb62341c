"""Other x86-64 CPUs, emulated on this one: the environment under which a process computes as
it would on each, for checking that a result does not depend on the CPU
(``tests/test_numerics.py``, ``benchmarks/numerics.py``).

Each library that chooses its kernels by the CPU is told to choose as on the emulated one:

* torch's own kernels (ATen): ``ATEN_CPU_CAPABILITY`` (``avx512``, ``avx2``, ``default``), the
  build torch picks on a CPU with that instruction set. Only in ``native`` mode: ``portable``
  replaces torch's choice with ``default`` on every CPU, as it does on a real one.
* MKL (matrix products): on an Intel CPU ``MKL_ENABLE_INSTRUCTIONS`` caps its kernels. On any
  other, MKL takes its own path and ignores the cap (and ``MKL_CBWR`` but ``COMPATIBLE``), so
  an emulated Intel CPU preloads a two-function library that answers MKL's "is this an Intel
  CPU?" (``mkl_serv_intel_cpu_true``, which libtorch_cpu.so exports) with yes: MKL then runs
  the kernels it runs on an Intel CPU with those instructions.
* MKL's vector maths (VML) follows its BLAS (its Intel kernels by the same answer), unless
  the mode pins it (``MKL_VML_DEBUG_CPU_TYPE``).
* oneDNN: ``ONEDNN_MAX_CPU_ISA``, unless the mode caps it lower.
* glibc's maths functions (what torch's ``default`` kernels call): ``GLIBC_TUNABLES`` hides
  the instructions the emulated CPU lacks from glibc's choice of its implementations.

Not emulated: instructions this CPU lacks (AMX, and AVX-512 on a CPU without it: those CPUs
are left out), torch code that asks the CPU directly rather than ``ATEN_CPU_CAPABILITY``
(its bfloat16 matrix products through oneDNN; a float32 run, as the demo's, has none), and an
approximate instruction's bits (``rsqrtps``, ``rcpps``: each vendor's hardware has its own, so
an Intel CPU emulated on an AMD one still computes AMD's; issue 59 found MKL's VML ``sqrt``
parting there, which ``tests/op_fingerprints.py`` compares with an Intel CPU's file).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.common import TIMING_METRICS

_AVX512 = ("AVX512F", "AVX512CD", "AVX512BW", "AVX512DQ", "AVX512VL", "AVX512_VNNI",
           "AVX512_BF16", "AVX512_IFMA", "AVX512_VBMI", "AVX512_VBMI2", "AVX512_BITALG",
           "AVX512_VPOPCNTDQ", "AVX512_FP16")
#: ``paw-gym demo`` shortened to a few updates, for comparing runs (each builds its own base).
SHORT_DEMO = ["--expert_episodes", "60", "--pretrain_steps", "20", "--eval_episodes", "8",
              "--rl_steps", "3", "--n_groups", "2", "--group_size", "4", "--eval_limit", "6",
              "--eval_repeats", "1", "--val_every", "0"]
_INTEL_SOURCE = ("int mkl_serv_intel_cpu_true(void) { return 1; }\n"
                 "int mkl_serv_intel_cpu(void) { return 1; }\n")


@dataclass(frozen=True)
class EmulatedCPU:
    """One CPU: what each library is told."""

    name: str
    capability: str
    """torch's kernels there: avx512, avx2 or default."""
    intel: bool
    """MKL runs its Intel kernels (on this CPU's vendor, whatever it is)."""
    mkl: str | None = None
    """MKL_ENABLE_INSTRUCTIONS (None: all this CPU has)."""
    onednn: str | None = None
    """ONEDNN_MAX_CPU_ISA (None: all this CPU has)."""
    hidden: tuple[str, ...] = ()
    """Instructions hidden from glibc."""


#: The CPUs, from this one down to an x86-64 CPU without AVX.
CPUS = (
    EmulatedCPU("this CPU", "native", intel=False),
    EmulatedCPU("Intel AVX-512", "avx512", intel=True, mkl="AVX512"),
    EmulatedCPU("Intel AVX2", "avx2", intel=True, mkl="AVX2", onednn="AVX2", hidden=_AVX512),
    EmulatedCPU("this vendor's AVX2", "avx2", intel=False, onednn="AVX2", hidden=_AVX512),
    EmulatedCPU("x86-64 SSE4.2", "default", intel=True, mkl="SSE4_2", onednn="SSE41",
                hidden=("AVX", "AVX2", "FMA", "F16C", *_AVX512)),
)


def cpu_flags() -> set[str]:
    """This CPU's flags (``/proc/cpuinfo``)."""
    for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def emulable() -> list[EmulatedCPU]:
    """The CPUs of :data:`CPUS` that this one can emulate: it has their instructions (torch's
    avx512 kernels need AVX-512 F, BW, DQ and VL; its avx2 ones AVX2 and FMA)."""
    flags = cpu_flags()
    has = {"native": True, "default": True, "avx2": {"avx2", "fma"} <= flags,
           "avx512": {"avx512f", "avx512bw", "avx512dq", "avx512vl", "fma"} <= flags}
    return [cpu for cpu in CPUS if has[cpu.capability]]


@functools.cache
def _intel_library(folder: str) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("emulating an Intel CPU's MKL needs a C compiler (cc or gcc)")
    source, library = Path(folder) / "intel_cpu.c", Path(folder) / "libintel_cpu.so"
    source.write_text(_INTEL_SOURCE, encoding="utf-8")
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(source)],
                   check=True)
    return library


def environment(cpu: EmulatedCPU, mode: str, scratch: Path) -> dict[str, str]:
    """``os.environ`` for a process that computes as on ``cpu`` in numerics ``mode`` (the
    preloaded library is built in ``scratch``)."""
    from training.infra.numerics import MODES, SETTINGS, VARIABLE

    env = {k: v for k, v in os.environ.items()
           if k not in (*SETTINGS, "LD_PRELOAD", VARIABLE)}
    env[VARIABLE] = mode
    # A mode that names torch's kernels or caps oneDNN's replaces the CPU's choice, here as on
    # a real CPU (the mode's cap, SSE4.1, is below every emulated CPU's).
    if cpu.capability != "native" and "ATEN_CPU_CAPABILITY" not in MODES[mode]:
        env["ATEN_CPU_CAPABILITY"] = cpu.capability
    if cpu.intel:
        scratch.mkdir(parents=True, exist_ok=True)
        env["LD_PRELOAD"] = str(_intel_library(str(scratch)))
    if cpu.mkl:
        env["MKL_ENABLE_INSTRUCTIONS"] = cpu.mkl
    if cpu.onednn and "ONEDNN_MAX_CPU_ISA" not in MODES[mode]:
        env["ONEDNN_MAX_CPU_ISA"] = cpu.onednn
    if cpu.hidden:
        env["GLIBC_TUNABLES"] = "glibc.cpu.hwcaps=" + ",".join(f"-{i}" for i in cpu.hidden)
    return env


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def demo_numbers(out: Path) -> dict:
    """Every number a demo run in ``out`` computed, timings left out: the base model's and the
    trained model's weights (sha256), every update's metrics, the reading probe and the
    before/after tables."""
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    metrics = [json.loads(line) for line in
               (out / "rl" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    trained = sorted((out / "rl" / "checkpoints").glob("*/model/model.safetensors"))
    return {"base_model": _sha256(out / "base-model" / "model.safetensors"),
            "trained_model": [_sha256(path) for path in trained],
            "updates": [{k: v for k, v in m.items() if k not in TIMING_METRICS}
                        for m in metrics],
            **{key: summary[key] for key in ("reading_probe", "before", "after",
                                             "before_train_tasks", "after_train_tasks")}}


def first_difference(a: dict, b: dict) -> str | None:
    """Where two :func:`demo_numbers` differ first (None: nowhere)."""
    for key in a:
        if a[key] != b.get(key):
            if key == "updates":
                for index, (x, y) in enumerate(zip(a[key], b[key])):
                    if x != y:
                        changed = sorted(k for k in x if x[k] != y.get(k))
                        return f"update {x.get('step', index)}: {', '.join(changed)}"
            return key
    return None
