"""Output files of a sweep: the format from the suffix, reading rows back for a resume, and writing
them (CSV, JSONL, parquet)."""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from ..errors import SpecError
from .rows import COLUMN_NAMES, COLUMNS, STATUSES

# --- output files ------------------------------------------------------------------------------

FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}


def output_format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise SpecError(f"unknown output format '{path.suffix or path.name}'", path="--out",
                        expected="a file ending in .csv, .jsonl or .parquet")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise SpecError("writing parquet needs pyarrow, which is not installed", path="--out",
                            expected="`pip install pyarrow`, or an output ending in .csv or .jsonl") from None
    return fmt


def _typed(name: str, kind: type, value):
    if value is None or value == "":
        return None
    if kind is bool:
        return value if isinstance(value, bool) else str(value).lower() == "true"
    return kind(value)


def _coerce(raw: dict) -> dict | None:
    """A row read back, typed by COLUMNS; None for a malformed (e.g. half-written) row."""
    try:
        row = {name: _typed(name, kind, raw.get(name)) for name, kind, _ in COLUMNS}
    except (TypeError, ValueError):
        return None
    return row if row["point_id"] and row["status"] in STATUSES else None


def read_rows(path: Path) -> list[dict]:
    """The valid rows of an earlier run (none when the file does not exist)."""
    if not path.exists() or path.stat().st_size == 0:
        return []
    fmt = output_format(path)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        names, raws = table.column_names, table.to_pylist()
    elif fmt == "csv":
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            names, raws = reader.fieldnames or [], list(reader)
    else:
        raws = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    raws.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill
        names = list(raws[0]) if raws else list(COLUMN_NAMES)
    if tuple(names) != COLUMN_NAMES:
        raise SpecError("was written with other columns than this version of plan sweep", file=str(path),
                        expected="another --out file, or --force to overwrite it")
    return [row for row in map(_coerce, raws) if row is not None]


def _csv_cell(value):
    return "" if value is None else value


def write_rows(path: Path, rows: list[dict]) -> None:
    """Replace `path` with `rows` atomically (a temporary file renamed over it)."""
    fmt = output_format(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows or [dict.fromkeys(COLUMN_NAMES)]).select(list(COLUMN_NAMES)), tmp)
    else:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            _RowWriter(f, fmt, header=True).write_all(rows)
    os.replace(tmp, path)


class _RowWriter:
    def __init__(self, handle, fmt: str, header: bool) -> None:
        self.handle, self.fmt = handle, fmt
        self.csv = csv.writer(handle) if fmt == "csv" else None
        if header and self.csv is not None:
            self.csv.writerow(COLUMN_NAMES)

    def write(self, row: dict) -> None:
        if self.fmt == "csv":
            self.csv.writerow([_csv_cell(row[k]) for k in COLUMN_NAMES])
        elif self.fmt == "jsonl":
            self.handle.write(json.dumps({k: row[k] for k in COLUMN_NAMES}) + "\n")
        if self.fmt != "parquet":
            self.handle.flush()

    def write_all(self, rows: list[dict]) -> None:
        for row in rows:
            self.write(row)
