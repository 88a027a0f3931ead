"""Termination signals for the command-line programs: SIGTERM and SIGHUP end a run the way
Ctrl-C (SIGINT) does.

Python turns only SIGINT into an exception (``KeyboardInterrupt``); SIGTERM (``kill``,
``timeout``, a service manager stopping a job) and SIGHUP (the terminal went away) kill the
interpreter at once by default, so ``finally`` blocks never run and a merge or create
leaves its temporary file behind. :func:`terminate_like_interrupt` installs handlers that
raise :class:`TerminationSignal`, a ``KeyboardInterrupt`` subclass, so every cleanup that
already handles Ctrl-C (temporary files removed, progress bars closed, no torn output)
handles these signals too, and :func:`exit_status` maps the interruption to the shell's
convention, 128 + the signal number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP).

A second termination signal during that cleanup is not turned into another exception
(which could cut the cleanup short): it kills the process with the signal's default
action at once, as a second Ctrl-C would be expected to. Signals that the parent set to be
ignored (``nohup`` ignores SIGHUP) stay ignored.

Library code is not affected: handlers are installed only by the programs
(:func:`mmapbloom.cli.main`, ``tools/*.py``), in the main thread, and restored afterwards.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any, Callable, Iterator, Optional

__all__ = ["TERMINATION_SIGNALS", "TerminationSignal", "exit_status", "run_main", "terminate_like_interrupt"]

#: The signals turned into :class:`TerminationSignal` (those present on this platform).
TERMINATION_SIGNALS: tuple[int, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class TerminationSignal(KeyboardInterrupt):
    """Raised in the main thread when SIGTERM or SIGHUP arrives while
    :func:`terminate_like_interrupt` is active. A ``KeyboardInterrupt``, so it unwinds
    exactly like Ctrl-C.

    Attributes:
        signum: the signal number.
    """

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:
        return signal_name(self.signum)


def signal_name(signum: int) -> str:
    """``"SIGTERM"`` for 15, and so on; ``"signal N"`` for an unnamed number."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_status(exc: BaseException) -> int:
    """128 + the signal number of an interruption: 130 for a plain ``KeyboardInterrupt``
    (SIGINT), 128 + ``signum`` for a :class:`TerminationSignal`."""
    return 128 + int(getattr(exc, "signum", signal.SIGINT))


@contextlib.contextmanager
def terminate_like_interrupt(signals: tuple[int, ...] = TERMINATION_SIGNALS) -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`TerminationSignal` in the main
    thread (a second one kills the process with the default action). Handlers are restored
    on exit. Outside the main thread, or for a signal whose handler is ``SIG_IGN``, nothing
    is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        if fired:  # cleanup of the first one is running: do not cut it short, die now
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        fired.append(signum)
        raise TerminationSignal(signum)

    previous: dict[int, Any] = {}
    try:
        for sig in signals:
            old = signal.getsignal(sig)
            if old == signal.SIG_IGN:
                continue  # e.g. nohup: the user asked for this signal to be ignored
            previous[sig] = old
            signal.signal(sig, handler)
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


def run_main(func: Callable[[], Optional[int]], prog: str) -> int:
    """Run a program's ``main`` with :func:`terminate_like_interrupt`; an interruption
    (Ctrl-C, SIGTERM, SIGHUP) prints ``PROG: interrupted by SIGNAL`` on stderr and returns
    128 + the signal number, after the program's ``finally`` blocks ran."""
    try:
        with terminate_like_interrupt():
            return int(func() or 0)
    except KeyboardInterrupt as exc:
        print(f"{prog}: interrupted by {signal_name(getattr(exc, 'signum', signal.SIGINT))}", file=sys.stderr)
        return exit_status(exc)
