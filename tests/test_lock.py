"""The lock file: the README installs with ``-c constraints.txt``, and it pins every package
``paw-gym[all,dev]`` needs at the version installed (what the published numbers used)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK_SCRIPT = REPO / "scripts" / "lock.py"


def _check(lock: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LOCK_SCRIPT), "--check", "--lock", str(lock)],
                          capture_output=True, text=True, cwd=REPO)


def test_the_lock_pins_every_dependency_at_its_installed_version():
    done = _check(REPO / "constraints.txt")
    assert done.returncode == 0, done.stderr
    count = int(re.match(r"(\d+) dependencies, 0 problems", done.stdout).group(1))
    pins = [line for line in (REPO / "constraints.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert count > 50 and len(pins) >= count  # the whole tree, not the direct requirements


def test_a_missing_or_moved_pin_is_named(tmp_path):
    lines = (REPO / "constraints.txt").read_text().splitlines()
    edited = [line for line in lines if not line.startswith("torch==")]
    edited = [re.sub(r"^transformers==.*", "transformers==0.0.1", line) for line in edited]
    (tmp_path / "lock.txt").write_text("\n".join(edited) + "\n")
    done = _check(tmp_path / "lock.txt")
    assert done.returncode == 1
    assert re.search(r"^torch \S+ is not in the lock$", done.stderr, re.M)
    assert re.search(r"^transformers is \S+ here, the lock says 0\.0\.1$", done.stderr, re.M)
    assert done.stdout.endswith(" dependencies, 2 problems\n")


def test_the_readme_and_ci_install_with_the_lock():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    installs = re.findall(r"pip install -e \"\.\[all,dev\]\"[^\n&]*", readme)
    assert installs and all("-c constraints.txt" in line for line in installs), installs
    assert 'pip install -e ".[all,dev]" -c constraints.txt' in (REPO / ".ci" / "run").read_text()
