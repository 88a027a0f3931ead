"""mmapbloom.termination in this process: SIGTERM and SIGHUP raised as TerminationSignal
inside the block (a KeyboardInterrupt, so cleanups run), the handlers restored after it,
ignored signals left ignored, nothing installed outside the main thread, and the exit
status 128 + the signal number. (Real subprocesses and real signals: test_signals.py.)"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from mmapbloom.termination import (
    TERMINATION_SIGNALS,
    TerminationSignal,
    exit_status,
    run_main,
    terminate_like_interrupt,
)
from mmapbloom.termination import signal_name


def test_signal_names_and_exit_status() -> None:
    assert signal_name(signal.SIGTERM) == "SIGTERM" and signal_name(signal.SIGHUP) == "SIGHUP"
    assert signal_name(250) == "signal 250"
    assert exit_status(KeyboardInterrupt()) == 130
    assert exit_status(TerminationSignal(signal.SIGTERM)) == 143
    assert exit_status(TerminationSignal(signal.SIGHUP)) == 129
    assert str(TerminationSignal(signal.SIGTERM)) == "SIGTERM"
    assert isinstance(TerminationSignal(1), KeyboardInterrupt)


@pytest.mark.parametrize("sig", TERMINATION_SIGNALS, ids=[signal_name(s) for s in TERMINATION_SIGNALS])
def test_signal_raises_in_the_block_and_handlers_are_restored(sig: int) -> None:
    before = signal.getsignal(sig)
    cleaned = []
    with pytest.raises(TerminationSignal) as info:
        with terminate_like_interrupt():
            try:
                os.kill(os.getpid(), sig)
                for _ in range(1000):  # the handler runs between bytecodes of the main thread
                    pass
            finally:
                cleaned.append(True)
    assert info.value.signum == sig and cleaned == [True]
    assert signal.getsignal(sig) == before


def test_an_ignored_signal_stays_ignored() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with terminate_like_interrupt():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)  # ignored: nothing raised
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_nothing_is_installed_outside_the_main_thread() -> None:
    seen = []

    def worker() -> None:
        with terminate_like_interrupt():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [before]


def test_run_main_reports_the_interruption(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(lambda: 3, "prog") == 3
    assert run_main(lambda: None, "prog") == 0

    def interrupted() -> int:
        raise KeyboardInterrupt

    def terminated() -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
        return 0

    assert run_main(interrupted, "prog") == 130
    assert capsys.readouterr().err == "prog: interrupted by SIGINT\n"
    assert run_main(terminated, "prog") == 143
    assert capsys.readouterr().err == "prog: interrupted by SIGTERM\n"
