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
#: when set). ``GLIBC_TUNABLES`` is among them because its ``glibc.cpu.hwcaps`` picks the
#: variant of glibc's maths functions (``exp``, ``log``: what torch's kernels call) that runs.
SETTINGS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS",
            "MKL_VML_DEBUG_CPU_TYPE", "ONEDNN_MAX_CPU_ISA", "GLIBC_TUNABLES")
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


#: Where Linux describes the CPU.
CPUINFO = Path("/proc/cpuinfo")
#: The CPU flags (``/proc/cpuinfo``'s spelling) that change which kernels a library runs:
#: oneDNN's and glibc's choice (SSE4, AVX, AVX2, FMA, F16C), torch's builds and MKL's (AVX2,
#: AVX-512), and the integer and bfloat16 paths (VNNI, BF16, FP16, AMX).
KERNEL_FLAGS = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f",
                "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx512ifma", "avx512vbmi",
                "avx512_vbmi2", "avx512_vnni", "avx512_bitalg", "avx512_vpopcntdq",
                "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "amx_fp16")


def read_cpuinfo(path: Path = CPUINFO) -> dict[str, Any]:
    """What tells one CPU kind from another, from the first processor of ``path``
    (``/proc/cpuinfo``): ``vendor`` (``GenuineIntel``, ``AuthenticAMD``), ``family``,
    ``model`` and ``stepping`` (numbers), ``isa`` (those of :data:`KERNEL_FLAGS` it has) and
    ``hypervisor`` (whether it runs under one), and ``name``, its model name. A field the
    file lacks, or every field when there is no such file (another OS), is None."""
    fields: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor is enough: they are all alike
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())

    def number(key: str) -> int | None:
        try:
            return int(fields[key])
        except (KeyError, ValueError):
            return None

    flags = fields.get("flags")  # x86; an ARM CPU lists "Features", none of KERNEL_FLAGS
    features = flags if flags is not None else fields.get("Features")
    present = set(features.split()) if features is not None else None
    return {"vendor": fields.get("vendor_id"), "family": number("cpu family"),
            "model": number("model"), "stepping": number("stepping"),
            "isa": None if present is None else [f for f in KERNEL_FLAGS if f in present],
            "hypervisor": None if flags is None else "hypervisor" in present,
            "name": fields.get("model name")}


@functools.cache
def _cpuinfo() -> dict[str, Any]:
    return read_cpuinfo()


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; elsewhere what ``platform`` says)."""
    return _cpuinfo()["name"] or platform.processor() or platform.machine()


def cpu_kind() -> dict[str, Any]:
    """The CPU kind as :func:`read_cpuinfo` reads it (without the name, :func:`cpu_model`):
    two CPUs whose model names read alike (a virtual machine's ``AMD EPYC``, ``Intel(R)
    Xeon(R) Processor``) still differ here when their kernels may."""
    return {k: v for k, v in _cpuinfo().items() if k != "name"}


@functools.cache
def lock_sha256() -> str | None:
    """sha256 of ``constraints.txt``, the pinned versions of every library (None when this
    install has no lock file)."""
    try:
        return hashlib.sha256(LOCK.read_bytes()).hexdigest()
    except OSError:
        return None


def numerics_key(record: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a float result depends on besides the inputs and the library versions (a cache
    key's part), in this process or in a :func:`machine` record (a checkpoint's): in
    ``portable`` mode the mode alone (the same on every x86-64 CPU), in ``native`` also the
    CPU, the kernels torch runs and the libraries' settings."""
    record = machine() if record is None else record
    mode = record.get("numerics")
    if mode == "portable":
        return {"mode": mode}
    kind = record.get("cpu_kind") or {}
    return {"mode": mode, "cpu": record.get("cpu"),
            "cpu_kind": {k: kind.get(k) for k in ("vendor", "family", "model", "isa")},
            "cpu_capability": record.get("cpu_capability"),
            "settings": record.get("numerics_settings") or {}}


def kernels_phrase(record: dict[str, Any]) -> str:
    """Where a :func:`machine` record's floats were computed, in words: the CPU's kind,
    torch's kernels and the libraries' settings."""
    settings = ", ".join(f"{k}={v}" for k, v in (record.get("numerics_settings") or {}).items())
    return (f"{record.get('cpu') or 'a CPU'} ({kind_phrase(record.get('cpu_kind'))}) with "
            f"torch's {record.get('cpu_capability')} kernels" + (f", {settings}" if settings
                                                                 else ""))


def machine() -> dict[str, Any]:
    """The machine a result was made on, for every results file: the CPU's name and kind
    (:func:`cpu_kind`: vendor, family, model, stepping, the instruction sets that change
    kernels, whether a hypervisor runs it), the instruction set of torch's kernels, the
    numerics mode and the library settings, the lock's sha256, Python, torch and its
    threads."""
    import torch

    return {"cpu": cpu_model(), "cpu_kind": cpu_kind(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "numerics": mode_in_effect(),
            "numerics_settings": {k: os.environ[k] for k in SETTINGS if k in os.environ},
            "lock_sha256": lock_sha256(), "python": platform.python_version(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads()}


def kind_phrase(kind: dict[str, Any] | None) -> str:
    """A :func:`cpu_kind` in words: ``AuthenticAMD family 25 model 1 stepping 1, AVX2 FMA
    ..., under a hypervisor`` (empty when nothing is known)."""
    if not kind:
        return ""
    parts = [" ".join(f"{k} {kind[k]}" for k in ("family", "model", "stepping")
                      if kind.get(k) is not None)]
    if kind.get("vendor"):
        parts[0] = f"{kind['vendor']} {parts[0]}".strip()
    if kind.get("isa") is not None:
        parts.append(" ".join(flag.upper() for flag in kind["isa"]) or "no SSE4 or AVX")
    if kind.get("hypervisor") is not None:
        parts.append("under a hypervisor" if kind["hypervisor"] else "no hypervisor")
    return ", ".join(part for part in parts if part)


def machine_line(record: dict[str, Any]) -> str:
    """One sentence naming the machine of a :func:`machine` record (``results.md``)."""
    settings = ", ".join(f"{k}={v}" for k, v in record["numerics_settings"].items())
    lock = (record["lock_sha256"] or "none")[:12]
    kind = kind_phrase(record.get("cpu_kind"))
    return (f"Machine: {record['cpu']}{f' ({kind})' if kind else ''}, torch's "
            f"{record['cpu_capability']} kernels, {record['numerics']} numerics"
            f"{f' ({settings})' if settings else ''}; lock constraints.txt sha256 {lock}…, "
            f"Python {record['python']}, torch {record['torch']} on "
            f"{record['torch_threads']} thread(s).")
