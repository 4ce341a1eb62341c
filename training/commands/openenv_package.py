"""``paw-gym openenv-package``: write a registered env as an OpenEnv package, a folder that
``openenv validate DIR --level static --skip-build`` accepts and whose ``server/app.py`` serves the
env with paw-gym's own server (``paw-gym serve-env``'s), from the folder alone: it holds a copy
of paw-gym's env package, the dependencies pinned, a Dockerfile and a Hugging Face Space card.
What the folder holds and how to push it: docs/remote_envs.md.

Examples::

    paw-gym openenv-package --env PaW/Shelf-v0 --output_dir runs/shelf-openenv
    openenv validate runs/shelf-openenv --level static --skip-build
    paw-gym openenv-package --env PaW/SearchQA-v0 --output_dir runs/searchqa-openenv --reward_max 1
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from paw_gym.openenv_package import NAME_PATTERN
from training.infra.checked_config import (CheckedConfig, bounded, env_id, output_folder,
                                           text)


@dataclass
class OpenEnvPackageArguments(CheckedConfig):
    """Which env ``paw-gym openenv-package`` packages, and where."""

    env: str = env_id()
    """Registered env id whose code is paw-gym's (see `paw-gym envs`)."""
    output_dir: str = output_folder()
    """Folder to write the package into."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Constructor arguments of every session's env, e.g. split=test (written into
    server/app.py)."""
    name: str | None = text(None, pattern=NAME_PATTERN,
                            what="letters, digits, '-' and '_', at most 64, starting and ending "
                                 "with a letter or digit")
    """The package's name (openenv.yaml; `openenv push` names the Space after it); none: from
    the env id (PaW/Shelf-v0: paw_shelf_v0)."""
    reward_min: float = bounded(0.0, -1e9, 1e9)
    """Smallest step reward the manifest declares."""
    reward_max: float | None = bounded(None, -1e9, 1e9,
                                       note="none: the largest step reward the env's expert "
                                            "earned while the package was written")
    """Largest step reward the manifest declares."""
    overwrite: bool = False
    """Replace what an earlier paw-gym command wrote in --output_dir (refused otherwise)."""

    def _check_relations(self) -> None:
        if self.reward_max is not None and self.reward_max <= self.reward_min:
            raise ValueError(f"reward_max={self.reward_max:g} is invalid; expected more than "
                             f"reward_min={self.reward_min:g}")


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command

    add_command(subparsers, "openenv-package", OpenEnvPackageArguments,
                help="write a text env as an OpenEnv package (openenv.yaml, server, Dockerfile) "
                     "served by paw-gym's own server",
                description=__doc__).set_defaults(func=run)


def run(args) -> int:
    import sys
    import time

    from training.commands.common import UserError, claim_output_folder
    from training.commands.flags import arguments_from
    from training.preflight import check_env

    arguments = arguments_from(args, OpenEnvPackageArguments)
    check_env(arguments.env, arguments.env_kwargs)
    from paw_gym.openenv_package import (WRITES, PackageError, check_packable, local_paths,
                                         write_package)

    try:
        import paw_gym.remote  # noqa: F401  (the remote extra: websockets, uvicorn)
    except ImportError as error:
        raise UserError(str(error)) from error
    try:
        check_packable(arguments.env, arguments.env_kwargs)
    except PackageError as error:
        raise UserError(str(error)) from None
    for key in local_paths(arguments.env_kwargs):
        print(f"paw-gym openenv-package: warning: env_kwargs {key}="
              f"{arguments.env_kwargs[key]!r} is a path on this machine; an image built from "
              f"the package holds only its folder's files", file=sys.stderr, flush=True)
    output = claim_output_folder(arguments.output_dir, "openenv-package", arguments.overwrite,
                                 writes=WRITES)
    start = time.perf_counter()
    with output.staged(".") as folder:
        try:
            package = write_package(folder, arguments.env, arguments.env_kwargs,
                                    name=arguments.name, reward_min=arguments.reward_min,
                                    reward_max=arguments.reward_max)
        except PackageError as error:
            raise UserError(str(error)) from None
    low, high = package.reward_range
    played = "its scripted expert" if package.expert else "its first admissible actions"
    print(f"wrote {arguments.env} as the OpenEnv package {package.name!r} to "
          f"{arguments.output_dir} in {time.perf_counter() - start:.1f} s: {len(package.files)} "
          f"files, paw_gym copied, {len(package.requirements)} pinned dependencies; step rewards "
          f"in [{low:g}, {high:g}] (played by {played}).\nCheck it with `openenv validate "
          f"{arguments.output_dir} --level static --skip-build`; run it with `python -m "
          f"server.app` in the folder or its Dockerfile; push it with `openenv push "
          f"{arguments.output_dir} --repo-id USER/{package.name} --no-interface`.")
    return 0
