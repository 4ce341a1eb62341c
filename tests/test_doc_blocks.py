"""Every ``bash`` and ``python`` block of README.md and docs/*.md runs as written.

The blocks of one file run in order in one working folder (a block may use what the block
before it built); the folder links the repository's tracked top-level entries (``configs/``,
``scripts/``, ``benchmarks/`` ...), so relative paths read as they do in a checkout, and
``runs/`` is the folder's own. A bash block runs with ``bash -e``; a python block with this
interpreter. Blocks of other kinds (``text``, diagrams, YAML excerpts) are not code and are not
run.

One HTML comment on a line just above a block changes how it runs:

* ``<!-- block: needs WHAT -->``: it cannot run on this machine (a GPU, a hub model, the
  official data, several machines); the test skips it and says WHAT;
* ``<!-- block: heavy -->``: longer than a few seconds; run by ``pytest -m heavy`` (CI);
* ``<!-- block: slow -->``: minutes; run by ``pytest -m slow`` only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUNNABLE = {"bash", "python"}
#: Seconds one block may take, by marker.
TIMEOUT = {None: 180, "heavy": 900, "slow": 3600}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    language: str
    code: str
    marker: str | None
    """None, "heavy", "slow" or "needs"."""
    note: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, with the marker of the comment lines just above each."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        above = text[:match.start()].rstrip("\n").split("\n")
        marker, note = None, ""
        for line in reversed(above):
            comment = re.fullmatch(r"\s*<!--\s*(.*?)\s*-->\s*", line)
            if not comment:
                break
            kind = re.fullmatch(r"block:\s*(needs|heavy|slow)\b\s*(.*)", comment.group(1))
            if kind:
                marker, note = kind.group(1), kind.group(2)
        found.append(Block(path, text[:match.start()].count("\n") + 1, match.group(1),
                           match.group(2), marker, note))
    return found


ALL = [block for path in DOCS for block in blocks(path)]
RUN = [block for block in ALL if block.language in RUNNABLE]


def _param(block: Block):
    marks = {"heavy": [pytest.mark.heavy], "slow": [pytest.mark.slow]}.get(block.marker, [])
    return pytest.param(block, id=block.name, marks=marks)


@pytest.fixture(scope="session")
def working_folders(tmp_path_factory):
    """One folder per documentation file, linking the repository's tracked top-level entries."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    entries = sorted({name.split("/")[0] for name in tracked})
    folders: dict[Path, Path] = {}

    def folder(path: Path) -> Path:
        if path not in folders:
            work = tmp_path_factory.mktemp(path.stem)
            for entry in entries:
                (work / entry).symlink_to(REPO / entry)
            folders[path] = work
        return folders[path]

    return folder


@pytest.mark.parametrize("block", [_param(block) for block in RUN])
def test_the_block_runs_as_written(block: Block, working_folders):
    if block.marker == "needs":
        pytest.skip(f"needs {block.note}")
    work = working_folders(block.path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    command = (["bash", "-e", "-c", block.code] if block.language == "bash"
               else [sys.executable, "-c", block.code])
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT[None if block.marker == "needs" else block.marker])
    assert done.returncode == 0, (f"{block.name} failed (exit {done.returncode}):\n"
                                  f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def test_the_reader_finds_the_blocks_and_their_markers():
    readme = [block for block in ALL if block.path.name == "README.md"]
    assert len(readme) >= 10 and all(block.language for block in readme)
    assert {block.marker for block in ALL} <= {None, "needs", "heavy", "slow"}
    assert all(block.note for block in ALL if block.marker == "needs"), \
        [block.name for block in ALL if block.marker == "needs" and not block.note]
