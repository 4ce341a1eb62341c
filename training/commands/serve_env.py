"""``paw-gym serve-env``: serve a registered text env over WebSocket, a session per client.

The protocol is OpenEnv's (reset / step / state over ``ws://HOST:PORT/ws``), so both
paw-gym's ``RemoteEnv`` (``gym.make("PaW/Remote-v0", url=...)``) and OpenEnv clients step it.
Each connection gets its own env. The same port answers OpenEnv's HTTP routes (/health,
/metadata, /schema, /openapi.json, one-shot /reset, /step, /state, /mcp), so `openenv validate
--url http://HOST:PORT` passes; docs/remote_envs.md describes the protocol and limits.

Examples::

    paw-gym serve-env --env PaW/Shelf-v0
    paw-gym serve-env --env PaW/WebShop-v0 --env_kwargs split=test --port 9000 --max_sessions 128
"""

from __future__ import annotations

import ipaddress
import sys
from dataclasses import dataclass, field
from typing import Any

from training.infra.checked_config import CheckedConfig, bounded, env_id, port, text


@dataclass
class ServeEnvArguments(CheckedConfig):
    """Which env ``paw-gym serve-env`` serves, where, and to how many clients."""

    env: str = env_id()
    """Registered env id (see `paw-gym envs`)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Constructor arguments of every session's env, e.g. split=test (clients cannot change
    them)."""
    host: str = text("127.0.0.1")
    """Interface to bind (default: loopback only; 0.0.0.0 serves other machines, with no
    authentication)."""
    port: int = port(8001)
    """TCP port (0 picks a free one; the default is serve-retriever's 8000 plus one, so both
    run side by side)."""
    max_sessions: int = bounded(64, 1, 10_000)
    """Sessions at once, each with its own env; one more client is refused (OpenEnv's
    CAPACITY_REACHED)."""
    idle_timeout: float = bounded(600.0, 0, 7 * 86400, low_open=True, what="seconds")
    """Seconds a session may wait for its client's next request before it ends."""
    max_message_bytes: int = bounded(1 << 20, 1, 1 << 30)
    """Largest request a client may send (bytes)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (the address the server bound) is this machine's loopback only."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: only "localhost" is known to stay on this machine
        return host == "localhost"


def add_parser(subparsers) -> None:
    from training.commands.flags import add_command

    add_command(subparsers, "serve-env", ServeEnvArguments,
                help="serve a text env over WebSocket (OpenEnv protocol, with its HTTP routes), "
                     "a session per client",
                description=__doc__).set_defaults(func=run)


def run(args) -> int:
    # training.preflight.check_env is torch-free (it reads the constructor's signature, not the
    # agents package): the id, the env_kwargs' names and types, before the server starts. What
    # only building the env finds fails in EnvServer, which makes one env to read its spaces.
    import gymnasium as gym

    from training.commands.common import UserError
    from training.commands.flags import arguments_from
    from training.preflight import check_env

    arguments = arguments_from(args, ServeEnvArguments)
    check_env(arguments.env, arguments.env_kwargs)
    try:
        from paw_gym.remote import BindError, EnvServer, ServerLimits
    except ImportError as error:
        raise UserError(str(error)) from error
    try:
        limits = ServerLimits(max_sessions=arguments.max_sessions,
                              idle_timeout=arguments.idle_timeout,
                              max_message_bytes=arguments.max_message_bytes)
    except ValueError as error:
        raise UserError(f"--{error}") from error
    try:
        server = EnvServer(arguments.env, arguments.env_kwargs, host=arguments.host,
                           port=arguments.port, limits=limits)
    except BindError as error:  # port in use, no permission, a host that is not this machine's
        raise UserError(f"cannot serve on --host {arguments.host} --port {arguments.port}: "
                        f"{error.strerror}") from error
    except gym.error.Error as error:  # an id that is not registered
        raise UserError(f"cannot serve {arguments.env}: {error} (`paw-gym envs` lists the text "
                        f"envs)") from error
    except (TypeError, ValueError, OSError, ImportError) as error:  # bad kwargs, missing data
        raise UserError(f"cannot serve {arguments.env}: {error}") from error  # or a non-text env
    print(f"serving {arguments.env} at {server.url} (sessions: {server.ws_url}, at most "
          f"{limits.max_sessions}; Ctrl-C to stop)", flush=True)
    if not is_loopback(server.host):
        print(f"paw-gym: warning: {server.host} is reachable from other machines and the server "
              f"has no authentication: anyone who reaches port {server.port} can open sessions "
              f"(--host 127.0.0.1 serves this machine only)", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.close()
    return 0
