"""The numerics mode (``training.infra.numerics``): applied before torch loads, refused in one
line when it cannot hold, recorded in every results file with the CPU's kind, part of the base
model's cache key; in ``portable`` mode a training step's float ops hash as on an Intel Xeon
(heavy) and the demo computes the same bits on every emulated CPU (heavy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.emulated_cpus import (SHORT_DEMO, demo_numbers, emulable, environment,
                                 first_difference)
from tests.op_fingerprints import differing
from training.infra import numerics

REPO = Path(__file__).resolve().parents[1]
#: ``tests/op_fingerprints.py``'s file made on an Intel Xeon (family 6 model 207: AVX-512 with
#: VNNI, BF16 and FP16, AVX-VNNI, no AMX; a KVM guest) under the portable mode of then (torch's
#: default kernels and MKL_CBWR=COMPATIBLE alone), torch 2.13.0 (issue 59).
INTEL_XEON = REPO / "tests" / "data" / "numerics" / "ops-intel-xeon-207-portable.json"
#: The ops whose kernels the portable mode changed after that file was made, and the hash the
#: mode computes now (measured on the AMD EPYC VM, family 25 model 1; the same on every x86-64
#: CPU with SSE4.1, as every other op's): GELU in oneDNN's SSE4.1 code, where the Intel CPU ran
#: oneDNN's AVX-512 code; the square root (AdamW's too) in MKL's SSE2 VML kernel, where both
#: CPUs ran its SSE4 kernel, which starts from ``rsqrtps`` and so from each vendor's own bits.
REKERNELED = {"gelu": "a3b3614573bf8163", "pow 0.5": "d3a51bce81e50db1",
              "adamw step": "f11084b7866e93ce"}


@pytest.fixture
def clean_environment(monkeypatch):
    """No numerics setting in the environment; whatever a test sets is undone after it."""
    for name in (numerics.VARIABLE, *numerics.SETTINGS):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_mode_that_is_not_one_is_one_line_before_any_work(clean_environment, capsys):
    from training.cli import main

    clean_environment.setenv(numerics.VARIABLE, "fast")
    assert main(["envs"]) == 2
    assert capsys.readouterr() == ("", "paw-gym: error: PAW_GYM_NUMERICS='fast' is not a "
                                       "numerics mode; expected native | portable\n")


def test_portable_refuses_a_library_setting_that_contradicts_it(clean_environment):
    clean_environment.setenv(numerics.VARIABLE, "portable")
    clean_environment.setenv("MKL_CBWR", "AVX2")
    with pytest.raises(numerics.NumericsError, match="^PAW_GYM_NUMERICS=portable sets "
                       "MKL_CBWR=COMPATIBLE, but the environment has MKL_CBWR=AVX2: unset "
                       "MKL_CBWR, or set PAW_GYM_NUMERICS=native$"):
        numerics.apply()
    assert "ATEN_CPU_CAPABILITY" not in os.environ  # nothing half-applied


def _python(*args: str, **env: str) -> subprocess.CompletedProcess:
    """``python ARGS`` in a fresh process, with no numerics setting but ``env``."""
    clean = {k: v for k, v in os.environ.items()
             if k not in (numerics.VARIABLE, *numerics.SETTINGS)}
    return subprocess.run([sys.executable, *args], env={**clean, "PYTHONPATH": str(REPO), **env},
                          cwd=REPO, capture_output=True, text=True, timeout=300)


_SPAWNED = """
import json


def report(queue):
    import torch
    (torch.ones(64, 64) @ torch.ones(64, 64)).sum()  # MKL reads its settings here
    queue.put(torch.backends.cpu.get_cpu_capability())


if __name__ == "__main__":
    from training.infra import numerics
    mode = numerics.apply()
    import torch
    import torch.multiprocessing as mp
    (torch.ones(64, 64) @ torch.ones(64, 64)).sum()
    context = mp.get_context("spawn")  # as the asynchronous rollout worker starts
    queue = context.Queue()
    child = context.Process(target=report, args=(queue,))
    child.start()
    spawned = queue.get(timeout=120)
    child.join()
    print(json.dumps({"mode": mode, "machine": numerics.machine(), "spawned": spawned}))
"""


@pytest.mark.heavy
def test_portable_is_applied_before_torch_loads_and_spawned_workers_inherit_it(tmp_path):
    script = tmp_path / "spawned.py"
    script.write_text(_SPAWNED, encoding="utf-8")
    done = _python(str(script), PAW_GYM_NUMERICS="portable", MKL_VERBOSE="1")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["mode"] == "portable" and report["spawned"] == "DEFAULT"
    assert report["machine"]["cpu_capability"] == "DEFAULT"
    assert report["machine"]["numerics"] == "portable"
    assert report["machine"]["numerics_settings"] == numerics.MODES["portable"]
    # MKL itself says which of its paths ran, in the parent and in the spawned worker.
    products = [line for line in done.stdout.splitlines() if " SGEMM(" in line]
    assert len(products) >= 2 and all("CNR:COMPATIBLE" in line for line in products)


def test_portable_after_torch_already_computed_is_refused():
    done = _python("-c", "import torch; (torch.ones(3) + 1).sum()\n"
                   "from training.infra import numerics\n"
                   "native = torch.backends.cpu.get_cpu_capability()\n"
                   "try:\n    numerics.apply()\nexcept numerics.NumericsError as e:\n"
                   "    print(native, '|', e)\nelse:\n    print(native, '| applied')",
                   PAW_GYM_NUMERICS="portable")
    native, said = done.stdout.strip().split(" | ", 1)
    if native == "DEFAULT":
        pytest.skip("torch runs its default kernels on this CPU anyway")
    assert said == (f"PAW_GYM_NUMERICS=portable needs torch's default CPU kernels, but torch was "
                    f"imported and already runs its {native} ones: set PAW_GYM_NUMERICS before "
                    "Python starts (or call training.infra.numerics.apply() before importing "
                    "torch)")


def test_the_machine_record_names_the_cpu_kernels_mode_lock_and_python():
    import hashlib
    import platform

    import torch

    record = numerics.machine()
    assert record["cpu"] and record["cpu"] == numerics.cpu_model()
    assert record["cpu_kind"] == numerics.cpu_kind()
    assert record["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert record["numerics"] == numerics.mode_in_effect()
    assert record["lock_sha256"] == hashlib.sha256(
        (REPO / "constraints.txt").read_bytes()).hexdigest()
    assert record["python"] == platform.python_version()
    line = numerics.machine_line(record)
    kind = numerics.kind_phrase(record["cpu_kind"])
    assert line.startswith(f"Machine: {record['cpu']}{f' ({kind})' if kind else ''}, torch's "
                           f"{record['cpu_capability']} kernels, {record['numerics']} numerics")
    assert record["lock_sha256"][:12] in line and record["python"] in line


_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 207
model name\t: Intel(R) Xeon(R) Processor
stepping\t: 2
flags\t\t: fpu sse2 sse4_1 sse4_2 avx avx2 fma f16c avx512f avx512bw avx512_vnni avx_vnni hypervisor

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: another name, not read
"""


#: A :func:`numerics.machine` record but for the CPU (without importing torch).
_RECORD = {"cpu_capability": "DEFAULT", "numerics": "portable", "numerics_settings": {},
           "lock_sha256": None, "python": "3.11.7", "torch": "2.13.0+cpu", "torch_threads": 1}


def test_the_cpu_kind_tells_apart_cpus_whose_names_read_alike(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(_CPUINFO, encoding="utf-8")
    kind = numerics.read_cpuinfo(path)
    assert kind == {"vendor": "GenuineIntel", "family": 6, "model": 207, "stepping": 2,
                    "isa": ["sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni",
                            "avx512f", "avx512bw", "avx512_vnni"],
                    "hypervisor": True, "name": "Intel(R) Xeon(R) Processor"}
    line = numerics.machine_line({**_RECORD, "cpu": kind.pop("name"), "cpu_kind": kind})
    assert line.startswith("Machine: Intel(R) Xeon(R) Processor (GenuineIntel family 6 model 207 "
                           "stepping 2, SSE4_1 SSE4_2 AVX AVX2 FMA F16C AVX_VNNI AVX512F "
                           "AVX512BW AVX512_VNNI, under a hypervisor), torch's ")
    # A bare-metal CPU without the vector extensions, and an ARM CPU's different fields.
    path.write_text("vendor_id : AuthenticAMD\ncpu family : 25\nflags : fpu sse2\n")
    assert numerics.read_cpuinfo(path) | {"name": None} == {
        "vendor": "AuthenticAMD", "family": 25, "model": None, "stepping": None, "isa": [],
        "hypervisor": False, "name": None}
    path.write_text("processor : 0\nFeatures : fp asimd\nCPU implementer : 0x41\n")
    arm = numerics.read_cpuinfo(path)
    assert arm["isa"] == [] and arm["vendor"] is None and arm["hypervisor"] is None


def test_no_cpuinfo_is_a_record_of_unknowns_not_an_error(tmp_path):
    kind = numerics.read_cpuinfo(tmp_path / "absent")
    assert kind == dict.fromkeys(("vendor", "family", "model", "stepping", "isa", "hypervisor",
                                  "name"))
    assert numerics.kind_phrase({k: v for k, v in kind.items() if k != "name"}) == ""
    record = {**_RECORD, "cpu": "x86_64", "cpu_kind": kind}
    assert numerics.machine_line(record).startswith("Machine: x86_64, torch's ")
    # A record made before the CPU's kind was recorded still reads.
    assert numerics.machine_line({**_RECORD, "cpu": "AMD EPYC"}).startswith(
        "Machine: AMD EPYC, torch's DEFAULT kernels, portable numerics; lock constraints.txt "
        "sha256 none…")


def test_an_evaluation_names_its_machine():
    from agents.baselines import ExpertAgent
    from training.evaluate import evaluate

    result = evaluate(ExpertAgent(), "PaW/Shelf-v0", [0], max_steps=2, split="train")
    assert result.to_dict()["meta"]["machine"] == numerics.machine()


@pytest.mark.usefixtures("one_torch_thread")
def test_a_checkpoint_names_its_machine_and_is_still_read(tiny_model_dir, tmp_path):
    from training.infra.data_files import read_checkpoint_state
    from training.config import TrainConfig
    from training.infra.checkpoint import latest_checkpoint
    from training.trainer import PaWTrainer

    config = TrainConfig(model=str(tiny_model_dir), env_id="Test/GuessNumber-v0", n_groups=2,
                         group_size=2, max_new_tokens=10, max_episode_steps=2, total_steps=1,
                         mini_batch_size=4, token_budget=1024, output_dir=str(tmp_path / "run"),
                         progress=False, device="cpu", save_every=1)
    PaWTrainer(config).train()
    # The checkpoint reader (eval --checkpoint, --resume) accepts the record it holds.
    state = read_checkpoint_state(latest_checkpoint(tmp_path / "run"))
    assert state["machine"] == numerics.machine()


def test_the_base_cache_key_holds_the_numerics_mode(tmp_path, clean_environment):
    from training.demo import DemoConfig, base_recipe
    from training.warmstart.sft import record_expert_demos

    config = DemoConfig(expert_episodes=2)
    demos = record_expert_demos(config.env_id, 2, tmp_path / "d", max_steps=config.max_steps)
    native = base_recipe(config, demos)["numerics"]
    assert native["mode"] == "native" and native["cpu"] == numerics.cpu_model()
    kind = numerics.cpu_kind()  # two CPUs named alike get two keys when their kinds differ
    assert native["cpu_kind"] == {k: kind[k] for k in ("vendor", "family", "model", "isa")}
    for name, value in numerics.MODES["portable"].items():  # what apply() sets
        clean_environment.setenv(name, value)
    # Portable: the same key on every CPU, so a shared cache serves them all.
    assert base_recipe(config, demos)["numerics"] == {"mode": "portable"}


def test_a_native_record_names_the_glibc_maths_variant_an_emulation_chose(clean_environment):
    """An emulated AVX2 run on an AVX-512 CPU hides AVX-512 from glibc's maths functions
    (``tests/emulated_cpus.py``); its results and cache keys must say so."""
    hidden = "glibc.cpu.hwcaps=-AVX512F,-AVX512VL"
    clean_environment.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    clean_environment.setenv("GLIBC_TUNABLES", hidden)
    record = numerics.machine()
    assert record["numerics_settings"] == {"ONEDNN_MAX_CPU_ISA": "AVX2",
                                           "GLIBC_TUNABLES": hidden}
    assert f"GLIBC_TUNABLES={hidden}" in numerics.kernels_phrase(record)
    assert numerics.numerics_key(record)["settings"]["GLIBC_TUNABLES"] == hidden
    clean_environment.delenv("GLIBC_TUNABLES")
    assert numerics.numerics_key() != numerics.numerics_key(record)


@pytest.mark.heavy
def test_portable_hashes_every_op_of_a_training_step_as_an_intel_xeon_did():
    intel = json.loads(INTEL_XEON.read_text(encoding="utf-8"))
    done = _python("-m", "tests.op_fingerprints", PAW_GYM_NUMERICS="portable")
    assert done.returncode == 0, done.stderr[-2000:]
    ours = json.loads(done.stdout)
    assert ours["machine"]["numerics_settings"] == numerics.MODES["portable"]
    if ours["machine"]["torch"] != intel["torch"]:
        pytest.skip(f"the Intel Xeon's hashes are torch {intel['torch']}'s; this is "
                    f"{ours['machine']['torch']}: remake them (tests/op_fingerprints.py)")
    assert set(REKERNELED) <= set(intel["ops"])
    assert differing({"ops": {**intel["ops"], **REKERNELED}}, ours) == []


def _demo(tmp_path: Path, cpu, mode: str) -> dict:
    name = f"{mode}-{cpu.name.replace(' ', '_').replace('/', '_')}"
    env = {**environment(cpu, mode, tmp_path / "lib"), "PAW_GYM_CACHE": str(tmp_path / name)}
    out = tmp_path / name / "demo"
    done = subprocess.run([sys.executable, "-m", "training.cli", "demo", *SHORT_DEMO,
                           "--output_dir", str(out)], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    machine = json.loads((out / "summary.json").read_text(encoding="utf-8"))["machine"]
    assert machine["numerics"] == mode
    assert f"{mode} numerics" in (out / "results.md").read_text(encoding="utf-8")
    return {"numbers": demo_numbers(out), "machine": machine}


@pytest.mark.heavy
def test_the_portable_demo_computes_the_same_bits_on_every_emulated_cpu(tmp_path):
    cpus = emulable()
    runs = {cpu.name: _demo(tmp_path, cpu, "portable") for cpu in cpus}
    reference = runs[cpus[0].name]["numbers"]
    assert len(reference["updates"]) == 3 and reference["trained_model"]
    for name, run in runs.items():
        assert run["machine"]["cpu_capability"] == "DEFAULT", name
        assert first_difference(reference, run["numbers"]) is None, \
            f"{name}: {first_difference(reference, run['numbers'])}"
    # The emulation is not idle: in native mode this CPU and the least of the emulated ones
    # already build different base models.
    native = [_demo(tmp_path, cpu, "native")["numbers"] for cpu in (cpus[0], cpus[-1])]
    assert first_difference(*native) == "base_model", [cpu.name for cpu in cpus]
