"""The tuning records database: one SQLite file of measurements (:class:`TuningDB`).

A *record* (:class:`Record`) is one measured configuration of one workload on one target: the
median seconds of a valid run, or the reason it is invalid (a build or run error, a timeout, a
crash, a wrong result). ``ember.compile`` applies the best valid record of each kernel
(:mod:`ember.tune.apply`); ``ember tune`` adds records and resumes from them.

Where the file is: the ``path`` given, else ``$EMBER_TUNING_DB``, else
``~/.cache/ember/tuning.db`` (:func:`default_db_path`).

Guarantees:

* **Corruption.** A file that is not an SQLite database, fails SQLite's integrity check, or is
  another program's database (no ``ember-tuning`` schema note) is renamed to
  ``<name>.corrupt-<time>`` with a ``RuntimeWarning`` naming both paths, and a new database is
  created in its place; opening never raises for a bad file.
* **Concurrent writers.** The database runs in WAL mode with a busy timeout; every write is one
  transaction, retried with back-off while another process holds the lock, so several tuners
  (processes, hosts sharing a file system that supports locks) can add records to one file.
* **Versions.** Every record notes the ember version and the knob-space signature it was made
  with; records of other versions are read where their workload and target keys still match
  (a configuration the current space rejects is skipped when applied, with a note).
* **Export/import** as JSON lines (:meth:`TuningDB.export_jsonl`, :meth:`TuningDB.import_jsonl`)
  so that a model can ship with its records.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import TuningError
from ..version import __version__
from .keys import TargetKey

SCHEMA = "ember-tuning/1"
_RETRIES = 12
_BUSY_MS = 10_000

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY,
    workload TEXT NOT NULL,
    target_kind TEXT NOT NULL,
    target_arch TEXT NOT NULL,
    target TEXT NOT NULL,
    config TEXT NOT NULL,
    seconds REAL,
    error TEXT,
    flops REAL NOT NULL DEFAULT 0,
    task TEXT NOT NULL DEFAULT '',
    space TEXT NOT NULL DEFAULT '',
    ember_version TEXT NOT NULL,
    created REAL NOT NULL,
    UNIQUE (workload, target, config)
);
CREATE INDEX IF NOT EXISTS records_by_workload ON records (target_kind, target_arch, workload);
"""


def default_db_path() -> Path:
    """``$EMBER_TUNING_DB`` when set, else ``~/.cache/ember/tuning.db``."""
    env = os.environ.get("EMBER_TUNING_DB")
    if env:
        return Path(env).expanduser()
    return Path(os.path.expanduser("~")) / ".cache" / "ember" / "tuning.db"


@dataclass
class Record:
    """One measurement: ``config`` (a ``ConfigEntity.to_json`` dict) of ``workload`` on
    ``target``; ``seconds`` is the median time of a valid run (None when invalid), ``error`` why
    it is invalid (None when valid)."""

    workload: str
    target: TargetKey
    config: dict[str, Any]
    seconds: float | None
    error: str | None = None
    flops: float = 0.0
    task: str = ""
    space: str = ""
    ember_version: str = __version__
    created: float = field(default_factory=time.time)

    @property
    def valid(self) -> bool:
        """True for a run that finished with a correct result."""
        return self.error is None and self.seconds is not None

    @property
    def gflops(self) -> float:
        """Achieved GFLOP/s (0 for an invalid record)."""
        return self.flops / self.seconds / 1e9 if self.valid and self.seconds else 0.0

    def config_text(self) -> str:
        """The configuration as canonical JSON text (the database's identity of a point)."""
        return json.dumps(self.config, sort_keys=True)

    def to_json(self) -> dict[str, Any]:
        """The record as one JSON object (a line of :meth:`TuningDB.export_jsonl`)."""
        return {"schema": SCHEMA, "workload": json.loads(self.workload), "target": json.loads(self.target.to_json()),
                "config": self.config, "seconds": self.seconds, "error": self.error, "flops": self.flops,
                "task": self.task, "space": self.space, "ember_version": self.ember_version, "created": self.created}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Record:
        """The record :meth:`to_json` wrote; raises ``KeyError``/``TypeError``/``ValueError`` on a
        malformed object."""
        if d.get("schema") != SCHEMA:
            raise ValueError(f"schema {d.get('schema')!r} is not {SCHEMA!r}")
        seconds = d.get("seconds")
        config = d["config"]
        if not isinstance(config, dict):
            raise TypeError("config must be an object")
        return Record(json.dumps(d["workload"], sort_keys=True), TargetKey.from_json(json.dumps(d["target"])),
                      config, float(seconds) if seconds is not None else None,
                      str(d["error"]) if d.get("error") is not None else None, float(d.get("flops", 0.0)),
                      str(d.get("task", "")), str(d.get("space", "")), str(d.get("ember_version", "?")),
                      float(d.get("created", time.time())))


class TuningDB:
    """The records database at ``path`` (default :func:`default_db_path`), created when missing
    (see the module docstring for what it guarantees). ``check`` runs SQLite's integrity check on
    opening (a scan of the file; ``ember.compile`` reading records skips it, and a damaged page
    it meets later is a :class:`TuningError`). Usable as a context manager."""

    def __init__(self, path: str | os.PathLike[str] | None = None, check: bool = True):
        self.path = Path(path).expanduser() if path is not None else default_db_path()
        self.check = check
        self._conn: sqlite3.Connection | None = None
        self._open()

    # -- opening, corruption -------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(str(self.path), timeout=_BUSY_MS / 1000, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout={_BUSY_MS}")
        return conn

    def _problem(self, conn: sqlite3.Connection) -> str | None:
        """Why the open file is not a usable records database, or None."""
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            return None  # a new, empty file
        if "meta" not in tables or "records" not in tables:
            return f"it is not an ember tuning database (tables: {', '.join(sorted(tables))})"
        row = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is None or row[0] != SCHEMA:
            return f"its schema is {row[0] if row else 'missing'!r}, not {SCHEMA!r}"
        if self.check:
            check = conn.execute("PRAGMA quick_check").fetchone()
            if not check or check[0] != "ok":
                return f"SQLite's integrity check failed ({check[0] if check else 'no answer'})"
        return None

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TuningError(f"cannot create the directory of the tuning database {self.path}: {exc}") from exc
        for attempt in range(2):
            conn = None
            try:
                conn = self._connect()
                problem = self._problem(conn)
                if problem is None:
                    self._retry(lambda c=conn: self._init_schema(c))
                    self._conn = conn
                    return
            except sqlite3.DatabaseError as exc:  # "file is not a database", malformed pages
                problem = f"SQLite cannot read it ({exc})"
            if conn is not None:
                conn.close()
            if attempt:
                break
            self._move_aside(problem)
        raise TuningError(f"cannot create a tuning database at {self.path}; give another path (--db, tuning_db=)")

    def _move_aside(self, problem: str) -> None:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        try:
            os.replace(self.path, aside)
        except OSError as exc:
            raise TuningError(f"the tuning database {self.path} is unusable ({problem}) and cannot be moved aside: "
                              f"{exc}; remove it or give another path") from exc
        for suffix in ("-wal", "-shm"):
            side = Path(str(self.path) + suffix)
            if side.exists():
                os.replace(side, Path(str(aside) + suffix))
        warnings.warn(f"ember: the tuning database {self.path} is unusable ({problem}); moved it to {aside} and "
                      "started a new one", RuntimeWarning, stacklevel=4)

    @staticmethod
    def _init_schema(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(_TABLES)
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA,))
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('created_by', ?)", (f"ember {__version__}",))

    def _retry(self, fn: Any) -> Any:
        """``fn()``, retried with back-off while the database is locked by another writer."""
        delay = 0.01
        for attempt in range(_RETRIES):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc) or attempt == _RETRIES - 1:
                    raise TuningError(f"tuning database {self.path}: {exc}") from exc
                time.sleep(delay)
                delay = min(1.0, delay * 2)
            except sqlite3.DatabaseError as exc:  # a damaged page met after opening
                raise TuningError(f"tuning database {self.path} is damaged ({exc}); open it with "
                                  "ember.tune.TuningDB(path) to move it aside") from exc
        return None

    @property
    def conn(self) -> sqlite3.Connection:
        """The open connection; raises :class:`TuningError` after :meth:`close`."""
        if self._conn is None:
            raise TuningError(f"the tuning database {self.path} is closed")
        return self._conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        done = False
        try:
            yield conn
            done = True
        finally:
            conn.execute("COMMIT" if done else "ROLLBACK")

    # -- writing --------------------------------------------------------------------------------
    def add(self, records: Record | Iterable[Record]) -> int:
        """Store ``records`` (one or many) in one transaction; a configuration already recorded
        for the same workload and target is kept as it was. Returns how many were new."""
        recs = [records] if isinstance(records, Record) else list(records)
        rows = [(r.workload, r.target.kind, r.target.arch, r.target.to_json(), r.config_text(), r.seconds, r.error,
                 r.flops, r.task, r.space, r.ember_version, r.created) for r in recs]

        def write() -> int:
            with self._transaction() as conn:
                before = conn.total_changes
                conn.executemany("INSERT OR IGNORE INTO records (workload, target_kind, target_arch, target, config, "
                                 "seconds, error, flops, task, space, ember_version, created) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
                return conn.total_changes - before

        return int(self._retry(write)) if rows else 0

    # -- reading --------------------------------------------------------------------------------
    def records(self, target: TargetKey | None = None, workload: str | None = None,
                valid_only: bool = False) -> list[Record]:
        """Records for ``target`` (those whose key :meth:`~TargetKey.matches`; every target when
        None) and ``workload`` (every workload when None), oldest first."""
        sql, params = "SELECT workload, target, config, seconds, error, flops, task, space, ember_version, created " \
                      "FROM records WHERE 1=1", []
        if target is not None:
            sql += " AND target_kind=? AND target_arch=?"
            params += [target.kind, target.arch]
        if workload is not None:
            sql += " AND workload=?"
            params.append(workload)
        if valid_only:
            sql += " AND error IS NULL AND seconds IS NOT NULL"
        rows = self._retry(lambda: self.conn.execute(sql + " ORDER BY id", params).fetchall())
        out = []
        for w, t, c, sec, err, fl, task, space, ver, created in rows:
            try:
                tk = TargetKey.from_json(t)
                cfg = json.loads(c)
            except (ValueError, KeyError, TypeError):
                continue  # a row some other writer mangled: not ours to apply
            if target is not None and not tk.matches(target):
                continue
            out.append(Record(w, tk, cfg, sec, err, fl, task, space, ver, created))
        return out

    def best(self, target: TargetKey, workload: str) -> Record | None:
        """The fastest valid record of ``workload`` on ``target``, or None."""
        recs = self.records(target, workload, valid_only=True)
        return min(recs, key=lambda r: r.seconds or float("inf")) if recs else None

    def best_by_workload(self, target: TargetKey) -> dict[str, list[Record]]:
        """Valid records of every workload on ``target``, fastest first."""
        out: dict[str, list[Record]] = {}
        for r in self.records(target, valid_only=True):
            out.setdefault(r.workload, []).append(r)
        for recs in out.values():
            recs.sort(key=lambda r: r.seconds or float("inf"))
        return out

    def __len__(self) -> int:
        return int(self._retry(lambda: self.conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]))

    # -- JSON lines -----------------------------------------------------------------------------
    def export_jsonl(self, dest: str | os.PathLike[str] | IO[str], target: TargetKey | None = None,
                     workloads: Iterable[str] | None = None) -> int:
        """Write the records (of ``target`` and ``workloads`` when given) as JSON lines to
        ``dest`` (a path or a text file); returns how many."""
        wanted = set(workloads) if workloads is not None else None
        recs = [r for r in self.records(target) if wanted is None or r.workload in wanted]
        lines = "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in recs)
        if isinstance(dest, (str, os.PathLike)):
            Path(dest).write_text(lines)
        else:
            dest.write(lines)
        return len(recs)

    def import_jsonl(self, src: str | os.PathLike[str] | IO[str]) -> int:
        """Add the records of a JSON-lines file written by :meth:`export_jsonl`; returns how many
        were new. Raises :class:`TuningError` naming the line of a malformed record (nothing is
        added then)."""
        name = str(src) if isinstance(src, (str, os.PathLike)) else getattr(src, "name", "<stream>")
        try:
            text = Path(src).read_text() if isinstance(src, (str, os.PathLike)) else src.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise TuningError(f"cannot read tuning records from {name}: {exc}") from exc
        recs = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                recs.append(Record.from_json(json.loads(line)))
            except (ValueError, KeyError, TypeError) as exc:
                raise TuningError(f"{name}, line {n}: not an ember tuning record ({exc})") from exc
        return self.add(recs)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> TuningDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TuningDB({str(self.path)!r})"
