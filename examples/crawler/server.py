"""The pydoc HTTP server of the running interpreter, in a child process.

Part of the crawler example (``examples/crawl.py``); standard library only.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Optional

__all__ = ["SERVER_START_TIMEOUT", "SERVER_STOP_TIMEOUT", "PydocServer", "ServerError"]

#: Seconds to wait for the pydoc server to print its URL.
SERVER_START_TIMEOUT = 30.0
#: Seconds to wait for the pydoc server to exit after "q" before killing it.
SERVER_STOP_TIMEOUT = 10.0

_READY_RE = re.compile(r"Server ready at (http://\S+)")


class ServerError(RuntimeError):
    """The pydoc server could not be started."""


class PydocServer:
    """The pydoc HTTP server of the running interpreter (``sys.executable``), in a child
    process. Use as a context manager, or call :meth:`start` and (always) :meth:`stop`.

    The server runs in an empty temporary working directory (pydoc documents the modules
    of its current directory too), in its own session (so Ctrl-C reaches only us, and we
    stop it), with its stdout and stderr drained by threads into short logs.

    Args:
        host: address to bind.
        start_timeout: seconds to wait for "Server ready at URL".
        stop_timeout: seconds to wait for it to exit after "q" before killing it.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        start_timeout: float = SERVER_START_TIMEOUT,
        stop_timeout: float = SERVER_STOP_TIMEOUT,
    ) -> None:
        self.host = host
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.url: Optional[str] = None
        self.proc: Optional[subprocess.Popen[str]] = None
        #: None while running or never started; True only if it was running and answering
        #: a request when :meth:`stop` was called and then exited by itself after "q";
        #: False otherwise (it died before, stopped answering, or had to be killed).
        self.stopped_cleanly: Optional[bool] = None
        #: How the stop went, in words ("cleanly", "died during the crawl: ...", ...).
        self.stop_note: str = ""
        self.returncode: Optional[int] = None
        self._ready = threading.Event()
        self._stdout: collections.deque[str] = collections.deque(maxlen=50)
        self._stderr: collections.deque[str] = collections.deque(maxlen=50)
        self._threads: list[threading.Thread] = []
        self._workdir: Optional[str] = None

    def _drain(self, stream: Any, log: "collections.deque[str]", look_for_url: bool) -> None:
        try:
            for line in stream:
                log.append(line.rstrip("\n"))
                if look_for_url and not self._ready.is_set():
                    match = _READY_RE.search(line)
                    if match:
                        self.url = match.group(1)
                        self._ready.set()
        except (OSError, ValueError):  # pragma: no cover - stream closed under us
            pass

    def start(self) -> str:
        """Start the server and wait until it serves.

        Returns:
            The root URL, such as ``http://127.0.0.1:40767/``.

        Raises:
            ServerError: it exited, or printed no URL within ``start_timeout`` seconds
                (it is stopped, and the message shows its last output).
            OSError: the interpreter could not be run.
        """
        if self.proc is not None:
            raise RuntimeError("server already started")
        self._workdir = tempfile.mkdtemp(prefix="mmapbloom-pydoc-")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pydoc", "-n", self.host, "-p", "0"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            cwd=self._workdir,
            env=env,
            start_new_session=True,
        )
        for stream, log, look in ((self.proc.stdout, self._stdout, True), (self.proc.stderr, self._stderr, False)):
            t = threading.Thread(target=self._drain, args=(stream, log, look), daemon=True, name="pydoc-server-drain")
            t.start()
            self._threads.append(t)
        deadline = time.monotonic() + self.start_timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() >= deadline:
                why = (
                    f"exited with status {self.proc.returncode}"
                    if self.proc.returncode is not None
                    else f"printed no URL within {self.start_timeout:g} s"
                )
                self.stop()
                tail = "\n".join(list(self._stdout)[-5:] + list(self._stderr)[-10:])
                raise ServerError(f"pydoc server {why}" + (f":\n{tail}" if tail else ""))
        assert self.url is not None
        return self.url

    def alive(self) -> Optional[str]:
        """None while the server process runs; else why it is gone (its exit status and
        its last lines of output). Cheap (one ``poll``): the crawl calls it every 0.1 s."""
        if self.proc is None or self.proc.poll() is None:
            return None
        tail = " | ".join(list(self._stderr)[-3:])
        return f"the pydoc server exited with status {self.proc.returncode}" + (f" ({tail})" if tail else "")

    def answering(self, timeout: float = 10.0) -> Optional[str]:
        """None if the server answers a small request (its keyword list) within
        ``timeout`` seconds; else the error."""
        import urllib.request

        if self.url is None:
            return "not started"
        try:
            with urllib.request.urlopen(self.url + "keywords.html", timeout=timeout) as response:
                response.read()
        except (OSError, ValueError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    def stop(self) -> None:
        """Ask the server to quit ("q" on its stdin, then EOF), wait up to ``stop_timeout``
        seconds, kill it if it is still running, and remove its working directory.
        Idempotent; never raises for a server that already died."""
        proc = self.proc
        if proc is not None and self.returncode is None:
            gone = self.alive()
            silent = None if gone else self.answering()
            if proc.stdin is not None:
                try:
                    proc.stdin.write("q\n")
                    proc.stdin.flush()
                except (OSError, ValueError):
                    pass
                try:
                    proc.stdin.close()
                except (OSError, ValueError):
                    pass
            try:
                proc.wait(timeout=self.stop_timeout)
                self.stopped_cleanly = not gone and not silent
                self.stop_note = (
                    f"died before shutdown: {gone}"
                    if gone
                    else f"not answering at shutdown ({silent}), then exited"
                    if silent
                    else "cleanly"
                )
            except subprocess.TimeoutExpired:
                self.stopped_cleanly = False
                self.stop_note = "by kill (it did not exit after q)" + (f"; not answering ({silent})" if silent else "")
                proc.kill()
                try:
                    proc.wait(timeout=self.stop_timeout)
                except subprocess.TimeoutExpired:  # pragma: no cover - unkillable
                    pass
            self.returncode = proc.returncode
            for t in self._threads:
                t.join(timeout=2.0)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except (OSError, ValueError):  # pragma: no cover
                        pass
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self) -> "PydocServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
