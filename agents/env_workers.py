"""The envs of one rollout, stepped in this process or in worker processes.

:func:`agents.rollout` resets and steps its envs through an env batch: :class:`InProcessEnvs`
(one after the other, here) or :class:`EnvWorkers` (N processes, each owning a fixed share of
the envs, so one step's env work runs in parallel while generation waits for it). Workers pay
off for slow envs (ALFWorld's TextWorld engine, envs that call a service); see
``benchmarks/env_workers.py`` for the measured trade-off.

Why a small pool of processes with pipes and not ``gymnasium.vector.AsyncVectorEnv``: a vector
env steps *every* sub-env on every call and autoresets the finished ones (a wasted 60-300 ms
ALFWorld reset), while our episodes leave the batch when they end; and it runs one process per
env, where a 2-16 core machine wants a few workers each holding many envs.

Agents that read the env (``RandomAgent`` asks for the action format, ``ExpertAgent`` calls
``env.unwrapped.expert_action()``) get a :class:`WorkerEnv` per env: attribute reads and method
calls are forwarded to the worker that owns the env, so every agent works with workers.
"""

from __future__ import annotations

import functools
import multiprocessing
import signal
import sys
import traceback
from typing import Any, Callable, Mapping, Sequence

import gymnasium as gym

from wrappers.parse_action import wrapped_action_format

#: ``(env index, reset seed, reset options)``
ResetRequest = tuple[int, int | None, Mapping[str, Any] | None]
#: ``(env index, action)``
StepRequest = tuple[int, Any]

# Fork starts a worker in milliseconds and inherits the env ids registered at runtime (custom
# envs, conftest.py); the workers never touch torch or CUDA, so forking after the model
# is loaded is safe. Elsewhere (macOS, Windows) spawn needs a picklable factory, which
# ``agents.envs.env_factory`` returns.
DEFAULT_START_METHOD = "fork" if sys.platform == "linux" else "spawn"


class EnvWorkerError(RuntimeError):
    """An env raised inside a worker process (the message holds the worker's traceback), or a
    worker died."""


class InProcessEnvs:
    """The envs in this process, reset and stepped one after the other (``num_env_workers=0``)."""

    def __init__(self, make_env: Callable[[], gym.Env], num_envs: int):
        self.envs = [make_env() for _ in range(num_envs)]

    @property
    def handles(self) -> list[gym.Env]:
        """What the agent receives for each env: the env itself."""
        return self.envs

    def reset(self, requests: Sequence[ResetRequest]) -> list[tuple[Any, dict]]:
        return [self.envs[i].reset(seed=seed, options=options) for i, seed, options in requests]

    def step(self, requests: Sequence[StepRequest]) -> list[tuple]:
        return [self.envs[i].step(action) for i, action in requests]

    def close(self) -> None:
        for env in self.envs:
            env.close()


class EnvWorkers:
    """``num_envs`` envs spread over ``num_workers`` processes; env ``i`` lives in worker
    ``i % num_workers`` (round robin, so the copies of a group, and the envs still live late in
    a rollout, spread over all workers).

    Each worker builds its envs with ``make_env`` (in parallel), then serves commands: reset or
    step a list of its envs, read an attribute, call a method. :meth:`reset` and :meth:`step`
    send every worker its share before waiting for any reply. An exception in a worker is
    raised here as :class:`EnvWorkerError` with the worker's traceback. Use as a context
    manager (or call :meth:`close`): the workers close their envs and exit, and one that does
    not is terminated.

    Example:
        >>> with EnvWorkers(lambda: make_agent_env("PaW/Shelf-v0"), 8, 2) as envs:  # doctest: +SKIP
        ...     prompts_and_infos = envs.reset([(i, 0, None) for i in range(8)])
    """

    def __init__(self, make_env: Callable[[], gym.Env], num_envs: int, num_workers: int,
                 start_method: str = DEFAULT_START_METHOD):
        if not 1 <= num_workers <= num_envs:
            raise ValueError(f"num_workers must be in [1, num_envs={num_envs}], got {num_workers}")
        self.num_workers = num_workers
        context = multiprocessing.get_context(start_method)
        self._connections, self._processes = [], []
        try:
            for worker in range(num_workers):
                parent_end, child_end = context.Pipe()
                process = context.Process(
                    target=_serve, name=f"env-worker-{worker}", daemon=True,
                    args=(child_end, [*self._connections, parent_end], make_env,
                          range(worker, num_envs, num_workers)))
                process.start()
                child_end.close()  # the parent sees EOF on its end when the worker dies
                self._connections.append(parent_end)
                self._processes.append(process)
            formats = self._gather(range(num_workers))  # wait until every env is built
        except BaseException:
            self.close()
            raise
        self.handles = [WorkerEnv(self, i, formats[i % num_workers][i // num_workers])
                        for i in range(num_envs)]

    def reset(self, requests: Sequence[ResetRequest]) -> list[tuple[Any, dict]]:
        return self._scatter("reset", requests)

    def step(self, requests: Sequence[StepRequest]) -> list[tuple]:
        return self._scatter("step", requests)

    def get_attribute(self, index: int, path: tuple[str, ...], name: str) -> Any:
        """``getattr(env.<path...>, name)`` of env ``index``; a method comes back as a
        :class:`_Method` marker (the method itself stays in the worker), a missing attribute
        as :class:`_Missing`."""
        return self._ask(index % self.num_workers, "getattr", (index, path, name))

    def call(self, index: int, path: tuple[str, ...], name: str, *args: Any, **kwargs: Any) -> Any:
        """``env.<path...>.<name>(*args, **kwargs)`` of env ``index``, run in its worker."""
        return self._ask(index % self.num_workers, "call", (index, path, name, args, kwargs))

    def close(self) -> None:
        """Ask every worker to close its envs and exit; terminate one that does not."""
        for connection in self._connections:
            try:
                connection.send(("close", None))
            except OSError:  # already dead
                pass
        for process in self._processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join()
        for connection in self._connections:
            connection.close()
        self._connections, self._processes = [], []

    def __enter__(self) -> EnvWorkers:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _scatter(self, command: str, requests: Sequence[tuple]) -> list:
        """Send each worker its share of ``requests``, then gather the results in request order."""
        shares: dict[int, list[tuple]] = {}
        for request in requests:
            shares.setdefault(request[0] % self.num_workers, []).append(request)
        for worker, share in shares.items():
            self._send(worker, command, share)
        replies = dict(zip(shares, self._gather(shares)))
        positions = {worker: iter(reply) for worker, reply in replies.items()}
        return [next(positions[request[0] % self.num_workers]) for request in requests]

    def _ask(self, worker: int, command: str, payload: Any) -> Any:
        self._send(worker, command, payload)
        return self._gather([worker])[0]

    def _send(self, worker: int, command: str, payload: Any) -> None:
        try:
            self._connections[worker].send((command, payload))
        except OSError as error:
            raise self._died(worker) from error

    def _gather(self, workers) -> list:
        """One reply from each of ``workers`` (all of them read, even after a failure, so no
        reply is left in a pipe); raise the first failure."""
        results, failure = [], None
        for worker in workers:
            try:
                status, result = self._connections[worker].recv()
            except (EOFError, OSError):
                status, result = "died", None
            if status == "ok":
                results.append(result)
            elif failure is None:
                failure = self._died(worker) if status == "died" else \
                    EnvWorkerError(f"env worker {worker} failed:\n{result}")
        if failure is not None:
            raise failure
        return results

    def _died(self, worker: int) -> EnvWorkerError:
        process = self._processes[worker]
        process.join(timeout=1)
        return EnvWorkerError(f"env worker {worker} exited unexpectedly "
                              f"(exit code {process.exitcode})")


class WorkerEnv:
    """An agent's view of an env that lives in a worker process.

    Public attribute reads and method calls are forwarded: ``env.unwrapped.expert_action()``
    runs in the worker and returns its result; values come back pickled (copies). Read
    ``action_format`` (the env's ``ParseAction`` format) without a round trip.
    """

    def __init__(self, workers: EnvWorkers, index: int, action_format: str,
                 path: tuple[str, ...] = ()):
        self._workers, self._index, self._path = workers, index, path
        self.action_format = action_format

    @property
    def unwrapped(self) -> WorkerEnv:
        return WorkerEnv(self._workers, self._index, self.action_format,
                         self._path + ("unwrapped",))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # keep private and dunder probes (pickle, copy) local
            raise AttributeError(name)
        value = self._workers.get_attribute(self._index, self._path, name)
        if isinstance(value, _Missing):  # so that getattr(env, name, default) works
            raise AttributeError(f"the env in the worker ({self!r}) has no attribute {name!r}")
        if isinstance(value, _Method):
            return functools.partial(self._workers.call, self._index, self._path, name)
        return value

    def __repr__(self) -> str:
        return f"WorkerEnv(index={self._index}, path={'.'.join(self._path) or 'env'})"


class _Method:
    """Stands for a method in a ``getattr`` reply: the caller gets a forwarding function."""


class _Missing:
    """Stands for a missing attribute in a ``getattr`` reply."""


def _serve(connection, inherited, make_env: Callable[[], gym.Env], indices: Sequence[int]
           ) -> None:
    """A worker's loop: build the envs of ``indices``, then answer commands until ``close``
    (or until the parent's end of the pipe closes: the parent died)."""
    # A forked worker holds copies of the parent's pipe ends; closing them lets every worker
    # see EOF (and exit) if the parent dies.
    for parent_end in inherited:
        parent_end.close()
    # Ctrl-C reaches the whole process group: the parent handles it and closes the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    envs: dict[int, gym.Env] = {}
    try:
        try:
            for index in indices:
                envs[index] = make_env()
            connection.send(("ok", [wrapped_action_format(envs[index]) for index in indices]))
        except Exception:
            connection.send(("error", traceback.format_exc()))
            return
        while True:
            command, payload = connection.recv()
            if command == "close":
                return
            try:
                connection.send(("ok", _COMMANDS[command](envs, payload)))
            except Exception:  # the env's error, or a result that cannot be pickled
                connection.send(("error", traceback.format_exc()))
    except (EOFError, BrokenPipeError):
        pass  # the parent is gone
    finally:
        for env in envs.values():
            env.close()
        connection.close()


def _resolve(envs: dict[int, gym.Env], index: int, path: tuple[str, ...]) -> Any:
    target = envs[index]
    for name in path:
        target = getattr(target, name)
    return target


def _get_attribute(envs, payload):
    index, path, name = payload
    value = getattr(_resolve(envs, index, path), name, _Missing())
    return _Method() if callable(value) else value


def _call(envs, payload):
    index, path, name, args, kwargs = payload
    return getattr(_resolve(envs, index, path), name)(*args, **kwargs)


_COMMANDS: dict[str, Callable[[dict[int, gym.Env], Any], Any]] = {
    "reset": lambda envs, share: [envs[i].reset(seed=seed, options=options)
                                  for i, seed, options in share],
    "step": lambda envs, share: [envs[i].step(action) for i, action in share],
    "getattr": _get_attribute,
    "call": _call,
}
