"""Progress bars that suit where the output goes.

In a terminal, a tqdm bar. Anywhere else (a log file, CI, ``nohup``), tqdm would still redraw
its bar with ``\\r`` and escape codes, thousands of times in a long run; there
:func:`progress_bar` prints a plain line at each further 10 % of the total and at least every
``min_interval`` (:data:`SILENCE_S`) seconds instead, with the same ``update`` /
``set_postfix`` / ``write`` / ``close`` calls. A phase whose end another line reports (the
trainer's rollout, update and validation) asks for ``progress="heartbeat"``: a bar in a
terminal, elsewhere only the line that ends ``min_interval`` seconds of silence.
:func:`quiet_libraries` keeps the libraries' own bars and warnings out of paw-gym's output.

Example:
    >>> bar = progress_bar(total=100, desc="rollout", disable=False)   # doctest: +SKIP
    >>> bar.update(1); bar.set_postfix(live=3); bar.close()             # doctest: +SKIP
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from typing import Any, Iterable, Iterator, Literal, TextIO, Union

#: What a ``progress`` argument takes: ``False`` (nothing), ``True`` (a bar; outside a terminal,
#: lines at each 10 % and after each ``min_interval`` of silence) or ``"heartbeat"`` (a bar;
#: outside a terminal, only the lines after ``min_interval`` of silence).
Progress = Union[bool, Literal["heartbeat"]]

#: Longest silence outside a terminal, in seconds: a bar prints a line when this passed without
#: one (issue 42: no phase of any command silent for longer).
SILENCE_S = 15.0

#: Tokens this process has sampled so far (every policy's decoding loop adds to it): a line of a
#: bar says how many were sampled since the bar began, so that a batched rollout whose
#: episodes all finish together still shows its work moving between its lines.
_generated = [0]


def count_generated(tokens: int) -> None:
    """Add ``tokens`` sampled tokens to this process's count (a decoding loop calls it once per
    decoding step, with the rows that are still generating)."""
    _generated[0] += tokens


def generated_tokens() -> int:
    """Tokens this process has sampled so far."""
    return _generated[0]


#: Tokens this process has run through a counted model's decoder, forward and backward (hooks a
#: training command puts on its model, ``training.models.count_layer_passes``, add each layer's
#: share of its batch as the layer finishes): a line of a bar gives them too, so that a long
#: training or scoring pass, which finishes no row for minutes, still shows its work moving.
_passed = {"forward": 0.0, "backward": 0.0}


def count_passed(direction: Literal["forward", "backward"], tokens: float) -> None:
    """Add ``tokens`` (a share of a pass: one layer of L over a batch of B·T tokens adds
    B·T / L) to this process's ``direction`` count."""
    _passed[direction] += tokens


def passed_tokens() -> tuple[float, float]:
    """Tokens this process has run through counted models so far: (forward, backward)."""
    return _passed["forward"], _passed["backward"]


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default: stderr, where bars go) is an interactive terminal."""
    stream = sys.stderr if stream is None else stream
    return bool(getattr(stream, "isatty", lambda: False)())


def quiet_outside_terminal() -> None:
    """Turn off transformers' and huggingface_hub's own tqdm bars ("Loading weights") when
    stderr is not a terminal, where they would write ``\\r`` lines into the log."""
    if is_terminal():
        return
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging

    logging.disable_progress_bar()
    disable_progress_bars()


#: Warnings the libraries under paw-gym raise about their own internals or APIs (the user
#: cannot act on them): shown with ``--verbose``.
LIBRARY_WARNING_MODULES = r"(transformers|peft|trl|accelerate|huggingface_hub|datasets)(\..*)?"


def quiet_libraries() -> None:
    """paw-gym's output is its own report: turn off the progress bars of transformers,
    huggingface_hub and datasets ("Loading weights", "Writing model shards", "Map"), their
    deprecation and future warnings, transformers' advisory log lines and TRL's notice about
    its experimental module. Every ``paw-gym`` command calls it unless given ``--verbose``."""
    import logging
    import os
    import warnings

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # read when trl.experimental loads
    for category in (FutureWarning, DeprecationWarning, PendingDeprecationWarning):
        warnings.filterwarnings("ignore", category=category, module=LIBRARY_WARNING_MODULES)
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    disable_progress_bars()
    try:
        from datasets.utils import logging as datasets_logging
    except ImportError:
        pass
    else:
        datasets_logging.disable_progress_bar()
        datasets_logging.set_verbosity_error()
    logging.getLogger("peft").setLevel(logging.ERROR)


def progress_bar(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", initial: int = 0, disable: bool = False, leave: bool = True,
                 file: TextIO | None = None, min_interval: float | None = None,
                 progress: Progress = True):
    """A tqdm bar in a terminal, else a :class:`LineProgress` (no ``\\r``, few lines); like
    tqdm, it wraps ``iterable`` when one is given. ``progress`` (:data:`Progress`) is the
    caller's setting: ``False`` disables the bar as ``disable`` does, ``"heartbeat"`` keeps only
    the silence-ending lines outside a terminal. ``min_interval`` defaults to
    :data:`SILENCE_S`."""
    if progress not in (True, False, "heartbeat"):
        raise ValueError(f"progress={progress!r}: use True, False or 'heartbeat'")
    disable = disable or not progress
    stream = sys.stderr if file is None else file
    if total is None and iterable is not None and hasattr(iterable, "__len__"):
        total = len(iterable)
    if is_terminal(stream):
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, initial=initial,
                    disable=disable, leave=leave, file=stream, dynamic_ncols=True)
    return LineProgress(iterable, total=total, desc=desc, unit=unit, initial=initial,
                        disable=disable, file=stream,
                        min_interval=SILENCE_S if min_interval is None else min_interval,
                        heartbeat_only=progress == "heartbeat")


def _heartbeat(bar_ref: "weakref.ref[LineProgress]", stopped: threading.Event) -> None:
    """A :class:`LineProgress`'s line when ``min_interval`` passed without one (holds the bar
    only weakly, so a bar nobody closed still goes away)."""
    while True:
        bar = bar_ref()
        if bar is None:
            return
        interval = bar.min_interval
        del bar
        if stopped.wait(min(interval, 1.0)):
            return
        bar = bar_ref()
        if bar is None or bar.disable:
            return
        if time.monotonic() - bar._last_print >= bar.min_interval:
            bar._print()
        del bar


class LineProgress:
    """tqdm's bar interface, printing ``desc: n/total unit (elapsed, tokens, postfix)`` lines:
    at every further 10 % of ``total``, at close, and whenever ``min_interval`` seconds passed
    without one, even with no update in between (a background thread; a batched rollout may
    finish no episode for minutes and a training pass no row, so a line also gives the tokens
    sampled, :func:`count_generated`, and run forward and backward through a counted model,
    :func:`count_passed`, since the bar began), so no phase is silent for longer in a log
    file. With
    ``heartbeat_only`` it prints only the last kind: a phase shorter than ``min_interval``
    leaves no line."""

    def __init__(self, iterable: Iterable | None = None, *, total: int | None, desc: str,
                 unit: str, initial: int, disable: bool, file: TextIO, min_interval: float,
                 heartbeat_only: bool = False):
        self.iterable = iterable
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.disable, self.file, self.min_interval = disable, file, min_interval
        self.heartbeat_only = heartbeat_only
        self.postfix = ""
        self._tokens_at_start = generated_tokens()
        self._passed_at_start = passed_tokens()
        self._start = self._last_print = time.monotonic()
        self._printed_n: int | None = None
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        if not disable:
            threading.Thread(target=_heartbeat, args=(weakref.ref(self), self._stopped),
                             daemon=True).start()

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.disable or self.heartbeat_only:
            return
        due = time.monotonic() - self._last_print >= self.min_interval
        if self.total:
            step = max(1, self.total // 10)
            due = due or self.n // step > (self._printed_n or 0) // step or self.n >= self.total
        if due and self.n != self._printed_n:
            self._print()

    def set_postfix(self, **values: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def write(self, text: str) -> None:
        print(text, file=self.file, flush=True)

    def close(self) -> None:
        self._stopped.set()
        if not (self.disable or self.heartbeat_only) and self.n != self._printed_n and (
                self.n or self.total):
            self._print()
        self.disable = True

    def __del__(self) -> None:
        self._stopped.set()

    def _print(self) -> None:
        with self._lock:
            of = f"/{self.total}" if self.total else ""
            elapsed = time.monotonic() - self._start
            sampled = generated_tokens() - self._tokens_at_start
            tail = f", {sampled:,} tokens sampled" if sampled else ""
            forward, backward = (now - then for now, then in zip(passed_tokens(),
                                                                  self._passed_at_start))
            if round(forward) or round(backward):
                tail += f", {round(forward):,} tokens forward, {round(backward):,} backward"
            tail += f", {self.postfix}" if self.postfix else ""
            print(f"{self.desc}: {self.n}{of} {self.unit} ({elapsed:.0f} s{tail})",
                  file=self.file, flush=True)
            self._printed_n, self._last_print = self.n, time.monotonic()

    def __enter__(self) -> "LineProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator:
        if self.iterable is None:
            raise TypeError("this progress bar wraps no iterable; call update() in your loop")
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()
