"""A registered env as an OpenEnv package: the folder ``paw-gym openenv-package`` writes, which
OpenEnv's static check (``openenv validate DIR --level static --skip-build``, OpenEnv 0.10.0)
accepts, and which serves the env with paw-gym's own server (:class:`~paw_gym.remote.EnvServer`:
OpenEnv's WebSocket sessions and HTTP routes on one port) from the folder alone.

The folder (:func:`write_package`)::

    openenv.yaml             OpenEnv's manifest: name, version, the validation block (reward
                             range, resources, capabilities, type tags, network)
    pyproject.toml           the package: dependencies pinned, the ``server`` script
                             (``uv run --project . server``)
    server/app.py            main(): EnvServer(ENV_ID, ENV_KWARGS, LIMITS) on --host / --port
    server/requirements.txt  the same pins, for the Dockerfile
    Dockerfile               python:X.Y-slim, the pins, ``python -m server.app`` on port 8000
    README.md                a Hugging Face Space card (sdk: docker, app_port: 8000), and usage
    client.py, __init__.py   what ``openenv push`` asks for: a client (RemoteEnv)
    paw_gym/                 this paw-gym's env package (torch-free), copied: the image needs
                             no paw-gym release
    run_files/               the output guard and data-file schema it stands on, copied too

The dependencies are found, not listed: :func:`probe` runs in the written folder, in a fresh
interpreter that imports the folder's own ``paw_gym``, plays the env's expert (or its first
admissible actions) for a few seeded episodes, serves the env with ``server/app.py``'s settings
and replays the first episode through :class:`~paw_gym.remote.RemoteEnv` (the served answers
must equal the in-process ones). Every distribution it imported on the way is pinned at the
version installed here, and the step rewards it saw bound the declared reward range.

A ``.paw-gym-*`` file in the folder is the output guard's record (``run_files.outputs``);
``openenv push`` leaves hidden files out, and ``.dockerignore`` keeps them out of the image.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The port the image serves on: OpenEnv's convention (``openenv init``'s template) and the
#: Space card's ``app_port``.
PORT = 8000
#: The resources the manifest declares for one server (a text env and its sessions: about 0.3
#: GB measured for the built-in envs, with room for a catalog or a game set).
RESOURCES = {"cpu": 1.0, "memory_mb": 2048, "disk_mb": 2048, "episode_timeout_s": 600.0}
#: The manifest's type tags.
TAGS = ["text", "paw-gym"]
#: Seeded episodes the probe plays in process (the first is replayed through the server).
PROBE_EPISODES = 4
#: The most steps of one probe episode (the env's own step limit usually ends it first).
PROBE_STEPS = 100
#: Seconds the probe may take (it builds the env once per episode and serves it once).
PROBE_TIMEOUT = 900
#: A package name: what ``openenv push`` makes the Space's repository name, and the Python
#: distribution name after ``openenv-``.
NAME_PATTERN = r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62}[A-Za-z0-9])?"
#: The entries the package writes (the output guard refuses a user's entry in their way).
WRITES = ("openenv.yaml", "pyproject.toml", "README.md", "Dockerfile", ".dockerignore",
          "__init__.py", "client.py", "server/**", "paw_gym/**", "run_files/**")
#: The packages copied into the package folder: the env package and the one below it.
VENDORED = ("run_files", "paw_gym")
#: OpenEnv 0.10.0's static policy (severity-v1): a declared floor margin of at least 0.1. The
#: manifest declares half the reward range, so the range must span at least 0.2.
MIN_REWARD_SPAN = 0.2


class PackageError(ValueError):
    """The env cannot be packaged as asked (one line saying why and what to change)."""


@dataclass
class Package:
    """What :func:`write_package` wrote."""

    folder: Path
    env_id: str
    name: str
    files: list[str]
    """Every file, relative to ``folder``."""
    requirements: list[str]
    """The pinned distributions (``name==version``)."""
    reward_range: tuple[float, float]
    expert: bool
    """Whether the probe played the env's scripted expert (else its first admissible actions)."""


def default_name(env_id: str) -> str:
    """``PaW/Shelf-v0`` -> ``paw_shelf_v0``."""
    return re.sub(r"[^a-z0-9]+", "_", env_id.lower()).strip("_")[:64].strip("_") or "env"


def check_packable(env_id: str, env_kwargs: dict[str, Any]) -> None:
    """:class:`PackageError` unless the env's code is part of ``paw_gym`` (the package copies
    that package and the one it stands on, :data:`VENDORED`, nothing else) and every
    ``env_kwargs`` value can be written into ``server/app.py`` as a Python literal. The id
    itself is checked by the caller."""
    import gymnasium as gym

    entry_point = gym.spec(env_id).entry_point
    where = entry_point if isinstance(entry_point, str) else \
        f"{getattr(entry_point, '__module__', '?')}:{getattr(entry_point, '__qualname__', '?')}"
    if not where.startswith("paw_gym."):
        raise PackageError(f"{env_id} is built by {where}, outside paw-gym's env package; the "
                           f"OpenEnv package copies paw_gym (and run_files) only, so serve "
                           f"this env with `paw-gym serve-env` instead, or register it from a "
                           f"module inside paw_gym")
    try:
        literal = ast.literal_eval(repr(env_kwargs)) == env_kwargs
    except (ValueError, SyntaxError):
        literal = False
    if not literal:
        raise PackageError(f"env_kwargs {env_kwargs!r} cannot be written into server/app.py: "
                           f"give plain values (text, numbers, booleans, lists, mappings)")


def local_paths(env_kwargs: dict[str, Any]) -> list[str]:
    """The ``env_kwargs`` keys whose value names a file or folder on this machine (the image
    holds only what the package folder holds)."""
    return [key for key, value in env_kwargs.items()
            if isinstance(value, str) and ("/" in value or os.sep in value)
            and os.path.exists(value)]


def write_package(folder: str | Path, env_id: str, env_kwargs: dict[str, Any] | None = None, *,
                  name: str | None = None, reward_min: float = 0.0,
                  reward_max: float | None = None) -> Package:
    """Write the OpenEnv package of ``env_id`` into the empty ``folder`` (see the module
    docstring); ``reward_max`` None: the largest step reward the probe's episodes earned.
    :class:`PackageError` when the env cannot be packaged or its rewards leave the range."""
    from paw_gym import __version__, list_text_envs
    from paw_gym.remote import ServerLimits

    folder = Path(folder)
    env_kwargs = dict(env_kwargs or {})
    name = name or default_name(env_id)
    check_packable(env_id, env_kwargs)
    description = list_text_envs().get(env_id) or env_id
    limits = dataclasses.asdict(ServerLimits())
    files = {**_vendored_packages(),
             "server/__init__.py": f'"""The server of {env_id} (server/app.py)."""\n',
             "server/app.py": _app(env_id, env_kwargs, limits, description, __version__),
             "client.py": _client(env_id), "__init__.py": _init(env_id)}
    for relative, text in files.items():
        _write(folder / relative, text)
    found = probe(folder)
    low, high = _reward_range(env_id, found, reward_min, reward_max)
    requirements = pinned(found["modules"])
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    network = "public" if any(isinstance(value, str) and value.startswith(("http://", "https://"))
                              for value in env_kwargs.values()) else "no-network"
    more = {"openenv.yaml": _manifest(name, description, __version__, low, high, network),
            "pyproject.toml": _pyproject(name, env_id, __version__, python, requirements),
            "server/requirements.txt": "".join(f"{line}\n" for line in requirements),
            "Dockerfile": _dockerfile(env_id, __version__, python),
            ".dockerignore": ".paw-gym-*\n**/__pycache__\n*.pyc\n.git\n",
            "README.md": _readme(name, env_id, env_kwargs, description, __version__, low, high,
                                 requirements)}
    for relative, text in more.items():
        _write(folder / relative, text)
    return Package(folder, env_id, name, sorted([*files, *more]), requirements, (low, high),
                   found["expert"])


def probe(folder: str | Path) -> dict[str, Any]:
    """Run :data:`PROBE` in ``folder`` (a fresh interpreter, the folder's own ``paw_gym``):
    ``{"modules": top-level modules it imported, "rewards": every step reward, "expert":
    bool}``; :class:`PackageError` with the probe's last lines when it fails."""
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # no __pycache__ in the package
    try:
        done = subprocess.run([sys.executable, "-B", "-c", PROBE, str(PROBE_EPISODES),
                               str(PROBE_STEPS)], cwd=folder, env=environment,
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise PackageError(f"the probe of the package did not end within {PROBE_TIMEOUT} s "
                           f"(building, playing and serving the env)") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        said = (done.stderr.strip().splitlines() or ["(nothing)"])[-1]
        raise PackageError(f"the package's server could not play the env: {said}")
    return json.loads(lines[-1])


#: Run in the package folder by :func:`probe` (argv: episodes, steps per episode). Prints one
#: JSON line: the top-level modules imported after start-up, the step rewards, the expert.
PROBE = r'''
import sys
before = set(sys.modules)
import json
from pathlib import Path

import gymnasium as gym
import paw_gym
import run_files
from paw_gym.remote import EnvServer, RemoteEnv, ServerLimits
from server import app

for own in (paw_gym, run_files):
    if not Path(own.__file__).resolve().is_relative_to(Path.cwd().resolve()):
        raise SystemExit(f"imported {own.__name__} from {own.__file__}, not the package's own "
                         f"copy")
episodes, most = int(sys.argv[1]), int(sys.argv[2])
expert, played = True, []
env = gym.make(app.ENV_ID, **app.ENV_KWARGS)
try:
    for seed in range(episodes):
        observation, info = env.reset(seed=seed)
        steps = []
        for _ in range(most):
            action = None
            if expert:
                try:
                    action = env.unwrapped.expert_action()
                except (AttributeError, NotImplementedError):
                    expert = False
            if action is None:
                action = (info.get("admissible_actions") or [""])[0]
            observation, reward, terminated, truncated, info = env.step(action)
            steps.append([action, observation, float(reward), bool(terminated), bool(truncated)])
            if terminated or truncated:
                break
        played.append(steps)
finally:
    env.close()
with EnvServer(app.ENV_ID, app.ENV_KWARGS, port=0, limits=ServerLimits(**app.LIMITS)) as server:
    remote = RemoteEnv(server.url)
    try:
        remote.reset(seed=0)
        for action, *expected in played[0]:
            observation, reward, terminated, truncated, _ = remote.step(action)
            if [observation, float(reward), bool(terminated), bool(truncated)] != expected:
                raise SystemExit(f"the served env answered {action!r} otherwise than in process")
    finally:
        remote.close()
print(json.dumps({"modules": sorted({name.partition(".")[0] for name in set(sys.modules) - before}),
                  "rewards": [step[2] for steps in played for step in steps], "expert": expert}))
'''


def pinned(modules: list[str]) -> list[str]:
    """``name==version`` of the installed distribution of each of ``modules`` (top-level import
    names) that is not the standard library's or the package's own (:data:`VENDORED`,
    ``server``)."""
    from importlib.metadata import packages_distributions, version

    owners = packages_distributions()
    found: dict[str, str] = {}
    for module in modules:
        if module in sys.stdlib_module_names or module in (*VENDORED, "server", "client"):
            continue
        for distribution in owners.get(module, ()):
            key = re.sub(r"[-_.]+", "-", distribution).lower()
            if key != "paw-gym":
                found[key] = f"{distribution}=={version(distribution)}"
    return [found[key] for key in sorted(found)]


def _reward_range(env_id: str, found: dict[str, Any], low: float,
                  high: float | None) -> tuple[float, float]:
    rewards = found["rewards"]
    played = f"{len(rewards)} steps of the probe's {PROBE_EPISODES} episodes"
    by = "its scripted expert" if found["expert"] else "its first admissible actions"
    if high is None:
        high = max(rewards, default=low)
        if high - low < MIN_REWARD_SPAN:
            raise PackageError(f"{env_id} earned no step reward above reward_min={low:g} + "
                               f"{MIN_REWARD_SPAN:g} in {played} (played by {by}); give its "
                               f"largest step reward with --reward_max")
    outside = [reward for reward in rewards if not low <= reward <= high]
    if outside:
        raise PackageError(f"{env_id} gave the step reward {outside[0]:g} in {played}, outside "
                           f"the declared range [{low:g}, {high:g}]; widen --reward_min / "
                           f"--reward_max")
    if high - low < MIN_REWARD_SPAN:
        raise PackageError(f"the reward range [{low:g}, {high:g}] spans less than "
                           f"{MIN_REWARD_SPAN:g}: OpenEnv's static policy needs a floor margin of "
                           f"0.1, declared as half the range")
    return float(low), float(high)


def _vendored_packages() -> dict[str, str]:
    """Every source file of the installed :data:`VENDORED` packages, by its path in the
    package folder."""
    import importlib

    files = {}
    for name in VENDORED:
        root = Path(importlib.import_module(name).__file__).resolve().parent
        files.update({f"{name}/{path.relative_to(root).as_posix()}":
                      path.read_text(encoding="utf-8")
                      for path in sorted(root.rglob("*.py")) if "__pycache__" not in path.parts})
    return files


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _header(env_id: str, version: str) -> str:
    return (f"Written by `paw-gym openenv-package --env {env_id}` (paw-gym {version}); "
            f"docs/remote_envs.md of paw-gym describes it.")


def _app(env_id: str, env_kwargs: dict[str, Any], limits: dict[str, Any], description: str,
         version: str) -> str:
    return f'''"""Serves {env_id} ({description}) with paw-gym's own server: OpenEnv's
WebSocket sessions at /ws (a session, with its own env, per connection) and its HTTP routes
(/health, /metadata, /schema, /openapi.json, one-shot /reset, /step, /state, /mcp) on one port.

    python -m server.app --port {PORT}             # or: uv run --project . server
    docker build -t NAME . && docker run -p {PORT}:{PORT} NAME

{_header(env_id, version)} The paw_gym folder beside this one is that
release's env package (run_files: the output guard and data-file schema it stands on).
"""

from __future__ import annotations

import argparse

#: The env every session plays, and its constructor arguments.
ENV_ID = {env_id!r}
ENV_KWARGS = {env_kwargs!r}
#: paw_gym.remote.ServerLimits: sessions at once, seconds a session may idle, largest request.
LIMITS = {limits!r}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=f"serve {{ENV_ID}} (OpenEnv protocol)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="interface to bind (the image binds 0.0.0.0)")
    parser.add_argument("--port", type=int, default={PORT}, help="TCP port (0: a free one)")
    args = parser.parse_args(argv)
    from paw_gym.remote import EnvServer, ServerLimits

    server = EnvServer(ENV_ID, ENV_KWARGS, host=args.host, port=args.port,
                       limits=ServerLimits(**LIMITS))
    print(f"serving {{ENV_ID}} at {{server.url}} (sessions: {{server.ws_url}})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


if __name__ == "__main__":
    main()
'''


def _client(env_id: str) -> str:
    return f'''"""A client of the served {env_id}: a Gymnasium env (paw-gym's RemoteEnv), stepped
as `gym.make({env_id!r})` is. OpenEnv's own client works too:
`openenv.core.GenericEnvClient(base_url=url)`."""

from paw_gym.remote import RemoteEnv


def connect(url: str = "http://127.0.0.1:{PORT}") -> RemoteEnv:
    """A session of the env served at ``url``; ``close()`` ends it."""
    return RemoteEnv(url)
'''


def _init(env_id: str) -> str:
    return (f'"""{env_id} as an OpenEnv package: server/app.py serves it, client.py connects '
            f'to it."""\n')


def _manifest(name: str, description: str, version: str, low: float, high: float,
              network: str) -> str:
    import yaml

    manifest = {
        "spec_version": 1, "name": name, "version": version, "type": "space",
        "description": description, "port": PORT,
        "validation": {
            "reward": {"range": [low, high], "oracle_tolerance": 0.0,
                       "floor_margin": (high - low) / 2},
            "resources": RESOURCES,
            "capabilities": {"verifier": {"kind": "reward_channel"}},
            "types": {"tags": TAGS},
            "network": {"mode": network},
            "task_distribution": {"dataset_version": f"paw-gym {version}"}}}
    return ("# OpenEnv's manifest (`openenv validate . --level static --skip-build`). The reward "
            "range holds every\n# step reward the env gave while it was packaged; the "
            "resources are declared, not measured.\n"
            + yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True))


def _pyproject(name: str, env_id: str, version: str, python: str,
               requirements: list[str]) -> str:
    dependencies = "".join(f"    {json.dumps(line)},\n" for line in requirements)
    return f'''# {_header(env_id, version)}
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = {json.dumps(f"openenv-{name}")}
version = {json.dumps(version)}
description = {json.dumps(f"{env_id} served with OpenEnv's protocol by paw-gym {version}")}
requires-python = {json.dumps(f">={python}")}
# Every distribution the env and its server imported when the package was written, at the
# version installed then.
dependencies = [
{dependencies}]

[project.scripts]
server = "server.app:main"

[tool.setuptools]
py-modules = ["client"]

[tool.setuptools.packages.find]
include = ["server", "paw_gym", "paw_gym.*", "run_files", "run_files.*"]
'''


def _dockerfile(env_id: str, version: str, python: str) -> str:
    return f'''# {_header(env_id, version)}
# {env_id} on port {PORT}, as a Hugging Face Space (sdk: docker) runs it: as user 1000.
FROM python:{python}-slim
RUN useradd --create-home --uid 1000 user
WORKDIR /app
COPY server/requirements.txt server/requirements.txt
RUN pip install --no-cache-dir -r server/requirements.txt
COPY --chown=user . .
USER user
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PAW_GYM_CACHE=/tmp/paw-gym-cache
EXPOSE {PORT}
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:{PORT}/health', timeout=3)"]
CMD ["python", "-m", "server.app", "--host", "0.0.0.0", "--port", "{PORT}"]
'''


def _readme(name: str, env_id: str, env_kwargs: dict[str, Any], description: str, version: str,
            low: float, high: float, requirements: list[str]) -> str:
    settings = f" with `{env_kwargs!r}`" if env_kwargs else ""
    return f'''---
title: {name}
emoji: 🧩
colorFrom: blue
colorTo: indigo
sdk: docker
app_port: {PORT}
pinned: false
tags:
  - openenv
  - paw-gym
---

# {env_id} as an OpenEnv environment

{description}. Served{settings} by paw-gym {version}'s own server: OpenEnv's WebSocket
protocol at `/ws` (a session, with its own env, per connection) and OpenEnv's HTTP routes
(`/health`, `/metadata`, `/schema`, `/openapi.json`, one-shot `/reset`, `/step`, `/state`,
`/mcp`) on port {PORT}. Step rewards lie in [{low:g}, {high:g}].

## Run it

```bash
python -m server.app --port {PORT}                       # needs server/requirements.txt
docker build -t {name} . && docker run -p {PORT}:{PORT} {name}
```

## Step it

```python
from client import connect                 # paw-gym's RemoteEnv: a Gymnasium env
env = connect("http://127.0.0.1:{PORT}")
observation, info = env.reset(seed=0)
observation, reward, terminated, truncated, info = env.step(info["admissible_actions"][0])
env.close()
```

OpenEnv's client: `openenv.core.GenericEnvClient(base_url="http://127.0.0.1:{PORT}").sync()`;
an action is `{{"action": "<text>"}}`.

## Check and push it

```bash
openenv validate . --level static --skip-build       # the manifest
openenv validate --url http://127.0.0.1:{PORT}        # the running server
openenv push . --repo-id USER/{name} --no-interface  # a Hugging Face Space (a Docker Space)
```

`--no-interface`: the server has no `/web` page for OpenEnv's web interface to open.

The `paw_gym` folder is paw-gym {version}'s env package, copied (with `run_files`, the
output guard and data-file schema it stands on); the dependencies
(`server/requirements.txt`, `pyproject.toml`) are those it imported when the package was
written: {", ".join(requirements)}.
'''
