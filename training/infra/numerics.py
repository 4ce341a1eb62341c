"""The numerics mode (whether torch's float results depend on the CPU) and the record of the
machine that made a result.

Two CPUs round a float result differently when their libraries add its terms in a different
order or start it from a different approximation, and one changed bit of a logit changes a
sampled token. Four libraries decide that in a float32 run of torch on an x86-64 CPU:

* **ATen**, torch's own kernels (softmax, norms, attention, AdamW's arithmetic, the
  entropies), comes in builds per instruction set (``avx512``, ``avx2``, ``default``); torch
  picks the highest the CPU has. Each build sums in its own order.
* **MKL's BLAS**, torch's matrix products, picks a kernel per CPU vendor and instruction set
  (Intel AVX-512, Intel AVX2, SSE, another path on other vendors). ``MKL_CBWR=AVX2``, the
  setting usually tried, pins Intel CPUs only: MKL's guide says that on other CPUs it runs its
  automatic choice instead.
* **MKL's VML**, the vector maths functions ATen's ``sqrt``, ``exp``, ``log``, ``log2``,
  ``log10``, ``sin``, ``cos``, ``tan``, ``tanh``, ``asin``, ``acos``, ``atan``, ``erf``,
  ``erfc``, ``erfinv`` and ``trunc`` call (AdamW's ``sqrt`` among them). ``MKL_CBWR`` does not
  make them vendor-free: under ``COMPATIBLE`` it still runs SSE4 kernels that start ``sqrt``,
  ``atan``, ``tan``, ``log2``, ``log10``, ``asin`` and ``acos`` from ``rsqrtps`` or ``rcpps``,
  approximations whose bits differ between Intel's and AMD's CPUs (issue 59: an Intel Xeon and
  the AMD EPYC VM part on ``sqrt`` there). ``MKL_VML_DEBUG_CPU_TYPE=1`` (a setting MKL reads
  but does not document) makes VML run its SSE2 kernels, which use none (read from their
  machine code, with the functions they call) and which every x86-64 CPU runs.
* **oneDNN** computes a few element-wise ops even under ATen's ``default`` build (``gelu``),
  with code it generates for the highest instruction set the CPU has; ``ONEDNN_MAX_CPU_ISA``
  caps it.

``portable`` runs ATen's ``default`` build (which every x86-64 CPU runs), MKL's ``COMPATIBLE``
branch (SSE2 code, the same on Intel and AMD), VML's SSE2 kernels and oneDNN's SSE4.1 code, so
that a seed gives the same bits on every x86-64 CPU with SSE4.1; ``native`` (each library's
own choice, the fastest it has) gives numbers that belong to the CPU kind they were measured
on. ``tests/test_numerics.py`` checks, op by op, the hashes of a training step's float ops
against an Intel Xeon's (``tests/op_fingerprints.py``) and (heavy) the shortened demo's base
model, every update's metrics, checkpoints and tables under CPUs emulated on one machine
(``tests/emulated_cpus.py``: Intel's and another vendor's MKL, AVX-512, AVX2 and SSE4.2 only,
with oneDNN and glibc's maths functions capped alike); ``benchmarks/numerics.py`` measures the
same and the speed cost (benchmarks/README.md).

All are settings the libraries read once, when torch loads or first computes, so the mode is
applied to ``os.environ`` before torch is imported (:func:`apply`, first thing in every
``paw-gym`` command; a process the command starts, spawned or launched by torchrun, inherits
the environment), and is chosen by the environment variable ``PAW_GYM_NUMERICS``.

    PAW_GYM_NUMERICS=portable paw-gym train --config run.yaml
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import sys
from pathlib import Path
from typing import Any

#: The environment variable that chooses the mode.
VARIABLE = "PAW_GYM_NUMERICS"
#: Each mode's settings of the libraries.
MODES: dict[str, dict[str, str]] = {
    "native": {},
    "portable": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
                 "MKL_VML_DEBUG_CPU_TYPE": "1", "ONEDNN_MAX_CPU_ISA": "SSE41"},
}
#: The libraries' settings that choose their kernels, so the bits of a float result (recorded
#: when set).
SETTINGS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS",
            "MKL_VML_DEBUG_CPU_TYPE", "ONEDNN_MAX_CPU_ISA")
#: The lock file whose hash names the library versions (absent from an installed wheel).
LOCK = Path(__file__).resolve().parents[2] / "constraints.txt"


class NumericsError(ValueError):
    """A numerics mode that cannot be applied: a line naming the value and what is
    accepted."""


def apply(default: str = "native") -> str:
    """Put the mode ``$PAW_GYM_NUMERICS`` (``default`` when unset) into ``os.environ``, where
    torch and the processes started from here read it; returns the mode. Call it before torch
    is imported: :class:`NumericsError` when torch already computed with other settings, or
    when the environment sets a library's variable to another value than the mode's."""
    mode = os.environ.get(VARIABLE) or default
    if mode not in MODES:
        raise NumericsError(f"{VARIABLE}={mode!r} is not a numerics mode; expected "
                            f"{' | '.join(MODES)}")
    for name, value in MODES[mode].items():
        if os.environ.get(name, value) != value:
            raise NumericsError(
                f"{VARIABLE}={mode} sets {name}={value}, but the environment has {name}="
                f"{os.environ[name]}: unset {name}, or set {VARIABLE}=native")
    os.environ.update(MODES[mode])
    os.environ[VARIABLE] = mode
    if "torch" in sys.modules and mode != "native":
        capability = sys.modules["torch"].backends.cpu.get_cpu_capability()
        if capability != "DEFAULT":  # ATen chose its build when it first computed
            raise NumericsError(
                f"{VARIABLE}={mode} needs torch's default CPU kernels, but torch was imported "
                f"and already runs its {capability} ones: set {VARIABLE} before Python starts "
                "(or call training.infra.numerics.apply() before importing torch)")
    return mode


def mode_in_effect() -> str:
    """``portable`` when every setting of that mode is in this process's environment (set by
    :func:`apply` or by hand), else ``native``."""
    portable = MODES["portable"]
    return "portable" if all(os.environ.get(k) == v for k, v in portable.items()) else "native"


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; elsewhere what ``platform`` says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def lock_sha256() -> str | None:
    """sha256 of ``constraints.txt``, the pinned versions of every library (None when this
    install has no lock file)."""
    try:
        return hashlib.sha256(LOCK.read_bytes()).hexdigest()
    except OSError:
        return None


def numerics_key() -> dict[str, Any]:
    """What a float result depends on besides the inputs and the library versions (a cache
    key's part): in ``portable`` mode the mode alone (the same on every x86-64 CPU), in
    ``native`` also the CPU, the kernels torch runs and the libraries' settings."""
    import torch

    mode = mode_in_effect()
    if mode == "portable":
        return {"mode": mode}
    return {"mode": mode, "cpu": cpu_model(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "settings": {k: os.environ[k] for k in SETTINGS if k in os.environ}}


def machine() -> dict[str, Any]:
    """The machine a result was made on, for every results file: the CPU, the instruction set
    of torch's kernels, the numerics mode and the library settings, the lock's sha256, Python,
    torch and its threads."""
    import torch

    return {"cpu": cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "numerics": mode_in_effect(),
            "numerics_settings": {k: os.environ[k] for k in SETTINGS if k in os.environ},
            "lock_sha256": lock_sha256(), "python": platform.python_version(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads()}


def machine_line(record: dict[str, Any]) -> str:
    """One sentence naming the machine of a :func:`machine` record (``results.md``)."""
    settings = ", ".join(f"{k}={v}" for k, v in record["numerics_settings"].items())
    lock = (record["lock_sha256"] or "none")[:12]
    return (f"Machine: {record['cpu']}, torch's {record['cpu_capability']} kernels, "
            f"{record['numerics']} numerics{f' ({settings})' if settings else ''}; lock "
            f"constraints.txt sha256 {lock}…, Python {record['python']}, torch "
            f"{record['torch']} on {record['torch_threads']} thread(s).")
