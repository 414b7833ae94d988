"""Output files of a sweep: the format from the suffix, reading rows back for a resume, and writing
them (CSV, JSONL, parquet)."""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from planner.errors import SpecError
from planner.sweep import rows as point_rows
from planner.sweep.rows import COLUMN_NAMES, COLUMNS, is_complete

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
        if isinstance(value, bool):
            return value
        if str(value) not in ("True", "False", "true", "false"):
            raise ValueError(f"{name}: not a boolean")
        return str(value).lower() == "true"
    if kind is int and isinstance(value, float) or kind is not str and isinstance(value, bool):
        raise ValueError(f"{name}: not an integer")
    return kind(value)


def _bool_cell(text: str) -> bool:
    if text not in ("True", "False", "true", "false"):
        raise ValueError("not a boolean")
    return text.lower() == "true"


# A CSV cell (text) to its column's type, as _typed does for text but without its checks of other types:
# 100,000 rows read back took 28 s through _typed, cell by cell, on a loaded machine.
# A text cell a spreadsheet would run as a formula (=, +, -, @, a tab or a carriage return first: OWASP's
# "CSV injection") is written behind a ' that Excel, LibreOffice and Sheets show as text; a cell that starts
# with ' gets one more, so reading back drops exactly one and every name round-trips.
FORMULA_FIRST = ("=", "+", "-", "@", "\t", "\r", "'")


def _text_cell(text: str) -> str | None:
    return (text[1:] if text.startswith("'") else text) or None


_FROM_TEXT = {str: _text_cell, int: lambda t: int(t) if t else None,
              float: lambda t: float(t) if t else None, bool: lambda t: _bool_cell(t) if t else None}
_CSV_CELLS = tuple((name, _FROM_TEXT[kind]) for name, kind, _ in COLUMNS)


def _coerce(raw: dict, text: bool = False) -> dict | None:
    """A row read back, typed by COLUMNS; None for a malformed or incomplete (e.g. half-written) row.
    `text`: every cell a str (CSV)."""
    try:
        if text:
            row = {name: cell(raw[name]) for name, cell in _CSV_CELLS}
        else:
            row = {name: _typed(name, kind, raw.get(name)) for name, kind, _ in COLUMNS}
    except (TypeError, ValueError):
        return None
    return row if row["point_id"] and is_complete(row) else None


def _lines(path: Path) -> list[str]:
    """The lines of a text output, without a last line that lacks its newline: a row is appended with
    its newline in one write, so such a line is one cut short (by a kill, a full disk)."""
    # utf-8-sig: a BOM (a spreadsheet's save) is no part of the header; no newline translation: a lone \r is torn
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as f:
        text = f.read()
    pieces = text.split("\n")  # not splitlines: a cell may hold U+2028 and the like, which CSV leaves unquoted
    return [piece + "\n" for piece in pieces[:-1]]  # the last piece: "" after a final newline, else torn


def _csv_raws(path: Path) -> tuple[list[str], list[dict]]:
    records = list(csv.reader(_lines(path)))
    names = records[0] if records else list(COLUMN_NAMES)
    # A record with another number of fields is torn (a short write, or two rows run together).
    return names, [dict(zip(names, r)) for r in records[1:] if len(r) == len(names)]


def _jsonl_raws(path: Path) -> tuple[list[str], list[dict]]:
    raws = []
    for line in _lines(path):
        try:
            raw = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short
        if isinstance(raw, dict):
            raws.append(raw)
    names = list(raws[0]) if raws else list(COLUMN_NAMES)
    return names, [raw for raw in raws if list(raw) == names]


def _parquet_raws(path: Path) -> tuple[list[str], list[dict]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise SpecError(f"cannot read it as parquet: {exc}", file=str(path),
                        expected="another --out file, or --force to overwrite it") from None
    return table.column_names, table.to_pylist()


def read_rows(path: Path) -> list[dict]:
    """The valid rows of an earlier run (none when the file does not exist); rows cut short or with
    a missing or mistyped column are left out, so their points are run again."""
    if not path.exists() or path.stat().st_size == 0:
        return []
    fmt = output_format(path)
    names, raws = {"csv": _csv_raws, "jsonl": _jsonl_raws, "parquet": _parquet_raws}[fmt](path)
    if tuple(names) != COLUMN_NAMES:
        versions = {raw.get("planner_version") or None if "planner_version" in names else None for raw in raws}
        if versions - {point_rows.planner_version()}:
            raise other_version(path, versions)
        raise SpecError("was written with other columns than this version of plan sweep", file=str(path),
                        expected="another --out file, or --force to overwrite it")
    text = fmt == "csv"  # the header is COLUMN_NAMES and every record has its fields: every cell is there
    return [row for row in (_coerce(raw, text) for raw in raws) if row is not None]


def other_version(path: Path, versions: set) -> SpecError:
    """The refusal to resume onto rows another planner version computed (`versions`: theirs; None:
    rows from before rows carried a version): kept as done, their numbers would pass for this version's."""
    this = point_rows.planner_version()
    named = sorted(str(v) for v in versions - {this, None})
    theirs = f"planner {', '.join(named)}" if named else ""
    if None in versions:
        theirs += (" and " if theirs else "") + "a planner that wrote no version (rows from before rows carried one)"
    return SpecError(f"its rows were computed by {theirs}; this is planner {this}, whose numbers may differ",
                     file=str(path), path="--out",
                     expected="another --out file, or --force to recompute every point and drop the other rows")


def is_normal(path: Path, rows: int) -> bool:
    """Whether a CSV or JSONL output is its header (CSV) and `rows` rows read back, one a line, ending
    with a newline: then rows can be appended without rewriting it first (100,000 rows took 20 s)."""
    if output_format(path) == "parquet" or not path.is_file():
        return False
    with open(path, "rb") as f:
        data = f.read()
    return data.endswith(b"\n") and data.count(b"\n") == rows + (output_format(path) == "csv")


def _csv_cell(value):
    if isinstance(value, str) and value.startswith(FORMULA_FIRST):
        return "'" + value  # not a formula in a spreadsheet (FORMULA_FIRST); read back without it
    return "" if value is None else value


def parquet_schema():
    import pyarrow as pa

    types = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
    return pa.schema([(name, types[kind]) for name, kind, _ in COLUMNS])


def write_rows(path: Path, rows: list[dict]) -> None:
    """Replace `path` with `rows` atomically (a temporary file renamed over it): a kill at any
    moment leaves the old file or the new one, never a part."""
    fmt = output_format(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist([{k: r[k] for k in COLUMN_NAMES} for r in rows],
                                                schema=parquet_schema()), tmp)
        else:
            with open(tmp, "w", newline="", encoding="utf-8") as f:
                _RowWriter(f, fmt, header=True).write_all(rows)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


class _RowWriter:
    def __init__(self, handle, fmt: str, header: bool) -> None:
        self.handle, self.fmt = handle, fmt
        self.csv = csv.writer(handle) if fmt == "csv" else None
        if header and self.csv is not None:
            self.csv.writerow(COLUMN_NAMES)

    def write(self, row: dict, flush: bool = True) -> None:
        if self.fmt == "csv":
            self.csv.writerow([_csv_cell(row[k]) for k in COLUMN_NAMES])
        elif self.fmt == "jsonl":
            self.handle.write(json.dumps({k: row[k] for k in COLUMN_NAMES}) + "\n")
        if self.fmt != "parquet" and flush:
            self.handle.flush()

    def write_all(self, rows: list[dict]) -> None:
        """Into a temporary file that is renamed when complete: no flush per row (100,000 rows took 15 s)."""
        for row in rows:
            self.write(row, flush=False)
        self.handle.flush()
