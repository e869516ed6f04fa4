"""A throwaway PostgreSQL server for tests: ``initdb`` in a temporary directory, ``postgres``
listening on a unix socket only, everything removed on ``stop``.

The server binaries are looked up in ``$CORTEX_PG_BIN``, then ``/usr/lib/postgresql/<newest>/bin``
(Debian's ``postgresql`` package), then ``PATH``.  ``initdb`` refuses to run as root, so as root
the cluster is initialised and run as the ``postgres`` system user (which Debian's package
creates) through ``runuser``.  Durability is switched off (``fsync=off``): this is a test server.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile

import attrs


class ServerUnavailable(RuntimeError):
    """No PostgreSQL server binaries on this machine, or no user to run them as."""


def find_bin_dir() -> str:
    candidates = [os.environ.get("CORTEX_PG_BIN", "")]
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted(versions, key=lambda path: int(path.split("/")[-2]) if path.split("/")[-2].isdigit() else 0, reverse=True)
    on_path = shutil.which("initdb")
    candidates.append(os.path.dirname(on_path) if on_path else "")
    for directory in candidates:
        if directory and os.path.exists(os.path.join(directory, "initdb")) and os.path.exists(os.path.join(directory, "pg_ctl")):
            return directory
    raise ServerUnavailable("no PostgreSQL server binaries (initdb, pg_ctl): install Debian's `postgresql` package or set CORTEX_PG_BIN")


@attrs.define
class TemporaryPostgres:
    """``start()`` returns a DSN for the superuser ``cortex`` on database ``postgres``."""

    bin_dir: str = attrs.field(factory=find_bin_dir)
    base: str | None = None
    user: str | None = None  # the system user the server runs as (None: this process's)

    def _cmd(self, *args: str) -> list[str]:
        if self.user is None:
            return list(args)
        return ["runuser", "-u", self.user, "--", *args]

    def start(self) -> str:
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise ServerUnavailable("running as root and there is no `postgres` user to run the server as") from exc
            self.user = "postgres"
        self.base = tempfile.mkdtemp(prefix="cortexdb-pg-")
        if self.user is not None:
            os.chown(self.base, owner.pw_uid, owner.pw_gid)
        data = os.path.join(self.base, "data")
        run = {"check": True, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
        try:
            subprocess.run(self._cmd(os.path.join(self.bin_dir, "initdb"), "-D", data, "-A", "trust", "-U", "cortex",
                                     "-E", "UTF8", "--no-sync"), **run)  # fmt: skip
            options = f"-k {self.base} -c listen_addresses='' -c fsync=off -c full_page_writes=off -c max_connections=200"
            subprocess.run(self._cmd(os.path.join(self.bin_dir, "pg_ctl"), "-D", data, "-w", "-t", "60", "-o", options,
                                     "-l", os.path.join(self.base, "log"), "start"), **run)  # fmt: skip
        except subprocess.CalledProcessError as exc:
            log = self.log()
            self.stop()
            raise ServerUnavailable(f"PostgreSQL did not start: {exc.stdout.decode(errors='replace')}\n{log}") from exc
        return self.dsn()

    def dsn(self, database: str = "postgres") -> str:
        return f"host={self.base} port=5432 user=cortex dbname={database}"

    def log(self) -> str:
        try:
            with open(os.path.join(self.base or "", "log"), encoding="utf-8", errors="replace") as file:
                return file.read()[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.base is None:
            return
        data = os.path.join(self.base, "data")
        if os.path.exists(os.path.join(data, "postmaster.pid")):
            subprocess.run(self._cmd(os.path.join(self.bin_dir, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        shutil.rmtree(self.base, ignore_errors=True)
        self.base = None
