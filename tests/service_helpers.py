"""A PostgreSQL server of the tests' own and a ``dpstream serve`` process, for the service's tests and benchmarks.

:class:`PostgresServer` runs the Debian server binaries (``/usr/lib/postgresql/*/bin``) in a
temporary directory on a free port of 127.0.0.1; ``initdb`` refuses to run as root, so as root
both it and ``pg_ctl`` run as the ``postgres`` user (``runuser -u postgres``).
:class:`ServeProcess` starts ``dpstream serve`` as a subprocess (several at once with :meth:`ServeProcess.launch`),
waits for ``/health`` and can be SIGKILLed and started again on the same port.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

SOURCE = Path(__file__).resolve().parents[1] / "src"
TOKEN = "test-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def postgres_binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        raise RuntimeError("PostgreSQL server binaries are missing under /usr/lib/postgresql/*/bin: "
                           "apt-get install postgresql (make test installs them).")
    return Path(found[-1]).parent


class PostgresServer:
    """A throwaway PostgreSQL server: :meth:`start`, :meth:`url` of a fresh database, :meth:`stop`."""

    def __init__(self) -> None:
        self.bin = postgres_binaries()
        self.root = Path(tempfile.mkdtemp(prefix="dpstream-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._databases = 0
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            os.chown(self.root, account.pw_uid, account.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as_user, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       cwd=self.root)

    def start(self) -> PostgresServer:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync")
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=50"
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"), "-o", options,
                  "-w", "-t", "60", "start")
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """The URL of a new, empty database."""
        import psycopg

        self._databases += 1
        name = f"test_{self._databases}"
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


class ServeProcess:
    """``dpstream serve`` in a subprocess on a free port; :meth:`kill` sends SIGKILL, :meth:`start` again."""

    def __init__(self, database: str, *, token: str = TOKEN, cwd: Path | None = None,
                 database_key: str | None = None, args: tuple[str, ...] = ()) -> None:
        self.database, self.token, self.cwd = database, token, cwd
        self.args = args  # more options of dpstream serve
        self.database_key = database_key
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self.log = Path(tempfile.mkstemp(prefix="dpstream-serve-", suffix=".log")[1])

    def start(self, timeout: float = 60.0) -> ServeProcess:
        """Start the server and wait until it answers ``/health``."""
        return self.launch().wait(timeout)

    def launch(self) -> ServeProcess:
        """Start the server without waiting for it (:meth:`wait` does): several can then start at once."""
        env = dict(os.environ, PYTHONPATH=str(SOURCE), DPSTREAM_TOKEN=self.token)
        if self.database_key is not None:
            env["DPSTREAM_DATABASE_KEY"] = self.database_key
        with open(self.log, "ab") as log:  # a file, not a pipe: a full pipe would block the server
            self.process = subprocess.Popen(
                [sys.executable, "-m", "dpstream.cli", "serve", "--database", self.database, "--port",
                 str(self.port), "--log-level", "warning", *self.args],
                env=env, cwd=self.cwd, stdout=subprocess.DEVNULL, stderr=log)
        self.starts += 1
        return self

    def wait(self, timeout: float = 60.0) -> ServeProcess:
        """Wait until the server answers ``/health``; RuntimeError with its log's end if it exits or stays silent."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"dpstream serve exited with {self.process.returncode}: "
                                   f"{self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError("dpstream serve did not answer /health in time.")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.unlink(missing_ok=True)
