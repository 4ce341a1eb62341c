"""The lock file (``constraints.txt``): the exact version of every package ``paw-gym[all,dev]``
installs, read from the environment it runs in.

The README's install command uses it (``pip install -e ".[all,dev]" -c constraints.txt``), so a
fresh install gets the versions the README's numbers were measured with. To move to newer
versions (then remeasure the numbers the README and docs give):

    python3 -m venv /tmp/lock && . /tmp/lock/bin/activate
    pip install -e ".[all,dev]"          # no -c: the newest versions the ranges allow
    python scripts/lock.py               # rewrites constraints.txt
    python scripts/lock.py --check       # what the tests run: every dependency pinned, as installed

The dependency tree is walked from the installed ``paw-gym`` distribution through each
requirement's own requirements (environment markers evaluated for this machine, extras
followed). A local version label (``torch 2.13.0+cpu``) is left out of the pin, so the same
line installs PyPI's CUDA build on a GPU machine. Each pin carries the Python version it was
resolved on as a marker: the tree differs between Pythons (setup.py pins another websockets
below 3.11), so on another Python the lock steps aside rather than refusing to install.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

LOCK = Path(__file__).resolve().parents[1] / "constraints.txt"
ROOT = "paw-gym"
ROOT_EXTRAS = ("all", "dev")
HEADER = ("# The versions paw-gym's published numbers were measured with: every package that\n"
          "# `pip install -e \".[all,dev]\"` installs. Written by `python scripts/lock.py` (see\n"
          "# its docstring to update it); the README's install command uses it with -c.\n"
          "# Measured on Python {python}: on another Python the pins do not apply (their\n"
          "# marker is false) and pip resolves setup.py's ranges instead.\n")


def installed_tree(root: str = ROOT, extras: tuple[str, ...] = ROOT_EXTRAS) -> dict[str, str]:
    """``{canonical name: installed public version}`` of every distribution ``root[extras]``
    needs on this machine, ``root`` itself left out."""
    found: dict[str, str] = {}
    todo = [(root, frozenset(extras))]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, wanted = todo.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a marker-free optional requirement nobody installed
        if canonicalize_name(name) != canonicalize_name(root):
            found[canonicalize_name(name)] = Version(dist.version).public
        for line in dist.requires or []:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is not None and not any(
                    marker.evaluate({"extra": extra}) for extra in (wanted or {""})):
                continue
            todo.append((requirement.name, frozenset(requirement.extras)))
    return found


def read_lock(path: Path = LOCK) -> dict[str, str]:
    """``{canonical name: version}`` of the lock's ``name==version`` lines."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].split(";", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def problems(tree: dict[str, str], pins: dict[str, str]) -> list[str]:
    """What the lock gets wrong for this environment: a dependency it does not pin, or pins at
    another version than the one installed."""
    found = [f"{name} {version} is not in the lock" for name, version in sorted(tree.items())
             if name not in pins]
    found += [f"{name} is {version} here, the lock says {pins[name]}"
              for name, version in sorted(tree.items())
              if name in pins and pins[name] != version]
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="only check that constraints.txt pins every installed dependency "
                             "at its installed version (exit 1 and list what differs)")
    parser.add_argument("--lock", type=Path, default=LOCK, help="the lock file (default: %(default)s)")
    args = parser.parse_args(argv)
    tree = installed_tree()
    if not tree:
        print(f"{ROOT} is not installed here; run pip install -e \".[all,dev]\" first",
              file=sys.stderr)
        return 2
    if args.check:
        found = problems(tree, read_lock(args.lock))
        for line in found:
            print(line, file=sys.stderr)
        print(f"{len(tree)} dependencies, {len(found)} problems")
        return 1 if found else 0
    python = "{}.{}".format(*sys.version_info[:2])
    args.lock.write_text(HEADER.format(python=python) + "".join(
        f'{name}=={version}; python_version == "{python}"\n'
        for name, version in sorted(tree.items())), encoding="utf-8")
    print(f"wrote {args.lock} ({len(tree)} packages)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
