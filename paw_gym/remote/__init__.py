"""Envs over the network: ``paw-gym serve-env`` serves a registered text env, and
:class:`RemoteEnv` (``gym.make("PaW/Remote-v0", url=...)``) steps it as a Gymnasium env.

The wire format is OpenEnv's WebSocket protocol (:mod:`paw_gym.remote.protocol`), beside
OpenEnv's HTTP routes (:mod:`paw_gym.remote.http_api`), so OpenEnv's own clients
(``openenv.core.GenericEnvClient``) and validator (``openenv validate --url``) work against the
server too. Needs the ``websockets`` and ``uvicorn`` packages (``pip install
'paw-gym[remote]'``); ``import paw_gym`` does not import this package.
"""

try:  # checked here for one clear message
    import uvicorn  # noqa: F401
    import websockets  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(f"paw_gym.remote needs the websockets and uvicorn packages ({error}): "
                      f"pip install 'paw-gym[remote]'") from error

from paw_gym.remote.client import RemoteEnv, RemoteEnvError
from paw_gym.remote.server import BindError, EnvServer, ServerLimits

__all__ = ["BindError", "EnvServer", "RemoteEnv", "RemoteEnvError", "ServerLimits"]
