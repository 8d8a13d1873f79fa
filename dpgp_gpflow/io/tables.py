"""Tables as the command line reads them: CSV files (separator, decimal mark and thousands separator given or
guessed, never misread) and Parquet files, their columns turned into finite float64 numbers in one place
(:func:`columns`), or refused with one line naming the file, the column and the row (:class:`TableError`).

Every selected cell must be a finite number (no missing values, booleans, text or numbers in another format),
and a CSV row must have as many fields as the header.

Privacy assumption: a refusal in a private column names the column, the row and the kind of problem, never
the value nor what it looks like (``private=True``); public columns may be quoted.

Only light modules at import (pandas is imported by the functions that need it, so that ``dpgp --help`` and
the refusals before a table is read stay fast: tests/test_entry_point.py checks).
"""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ..validation import MAX_MAGNITUDE

if TYPE_CHECKING:
    import pandas as pd

__all__: list = []  # internal: the command line's tables (dpgp_gpflow.cli)


class TableError(ValueError):
    """A table that cannot be read as asked, or a cell that is not a finite number: one line naming the file,
    the column and the row (for a private column, never the value)."""


def one_line(exc: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(exc).split())


#: Lines of a CSV file read to guess its separator and decimal mark.
SNIFF_LINES = 20
#: A number as the command line reads it once its decimal mark is "." (no thousands separators, no
#: ``1_000``, no spaces inside): Python's ``float`` accepts more than this.
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_NOT_FINITE = re.compile(r"[+-]?(?:inf|infinity)", re.IGNORECASE)
#: How a missing value is written in a cell (lower case; an empty cell too).
_MISSING = frozenset({"", "na", "n/a", "nan", "-nan", "null", "none", "#n/a", "<na>"})
#: Booleans, refused rather than read as 1/0 (lower case).
_BOOLEANS = frozenset({"true", "false", "yes", "no"})
#: Thousands separators that the messages recognise (and ``--thousands`` may name).
_THOUSANDS = (",", ".", "'", " ", "\u00a0", "\u202f")


def _sample(path: Path, lines: int = SNIFF_LINES) -> str:
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as f:
        return "".join(line for _, line in zip(range(lines), f))


def sniff_separator(path: Path, lines: int = SNIFF_LINES) -> str:
    """The field separator of a CSV file, guessed by ``csv.Sniffer`` from its first ``lines`` lines
    among ``, ; TAB |``; ``","`` when it cannot tell."""
    try:
        return csv.Sniffer().sniff(_sample(path, lines), delimiters=",;\t|").delimiter
    except (csv.Error, OSError):
        return ","


def _grouped(thousands: str, decimal: str) -> re.Pattern:
    """A number whose integer digits are grouped by threes with ``thousands`` (``1,234``, ``-12.345,5``)."""
    t, d = re.escape(thousands), re.escape(decimal)
    return re.compile(rf"[+-]?\d{{1,3}}(?:{t}\d{{3}})+(?:{d}\d*)?(?:[eE][+-]?\d+)?")


def sniff_decimal(path: Path, sep: str, lines: int = SNIFF_LINES) -> str:
    """The decimal mark of a CSV file: ``","`` when ``sep`` is ``";"`` and, among the data fields of its
    first ``lines`` lines, some number is written with one comma (``12,5``, ``1.234,5``) and none with a
    point and no comma (``12.5``); else ``"."``.

    The guess cannot misread a value: a field is read only if it is a number with the mark in use, and
    a field that is a number with either mark (no comma, no point) is an integer, the same with both.
    A file that mixes the marks is refused, naming the first field that does not fit."""
    if sep != ";":
        return "."
    comma = re.compile(r"[+-]?(?:\d{1,3}(?:\.\d{3})+|\d*),\d+(?:[eE][+-]?\d+)?")
    point = re.compile(r"[+-]?(?:\d*\.\d+|\d+\.)(?:[eE][+-]?\d+)?")
    try:
        fields = [f.strip() for row in list(csv.reader(io.StringIO(_sample(path, lines)), delimiter=sep))[1:]
                  for f in row]
    except (csv.Error, OSError):
        return "."
    commas = [f for f in fields if comma.fullmatch(f)]
    if commas and not any(point.fullmatch(f) for f in fields):
        if all(THOUSANDS_LIKE.fullmatch(f) for f in commas):  # 2,059: a decimal comma, or 2059 in thousands?
            raise TableError(f"{path}: numbers such as {commas[0]!r} may be written with a decimal comma or with a "
                             "thousands separator: give --decimal ',' or --thousands ','")
        return ","
    return "."


#: A number that reads the same shape with a decimal comma and with a thousands comma (``2,059``): a
#: sample whose comma numbers all look like this leaves the decimal mark to ``--decimal``/``--thousands``.
THOUSANDS_LIKE = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+")


class Table(NamedTuple):
    """A CSV or Parquet table as read (:func:`read_table`); :func:`columns` turns its columns into numbers."""

    path: Path
    #: The columns: the cells' text as written for a CSV file, as stored for Parquet.
    frame: pd.DataFrame
    #: Where each row is, for messages: its 1-based line in a CSV file (the header is line 1, if first),
    #: its 1-based row number in a Parquet file.
    rows: np.ndarray
    where: str  #: ``"line"`` (CSV) or ``"row"`` (Parquet)
    decimal: str  #: the CSV decimal mark
    thousands: Optional[str]  #: the CSV thousands separator accepted, if any


def csv_format(sep: Optional[str], decimal: Optional[str], thousands: Optional[str]) -> Tuple[
        Optional[str], Optional[str], Optional[str]]:
    """``--sep``, ``--decimal`` and ``--thousands`` checked (:class:`TableError`); ``--sep`` may be written
    ``\\t`` or ``tab`` for a TAB."""
    if sep in ("\\t", "tab", "TAB"):
        sep = "\t"
    if sep is not None and (len(sep) != 1 or sep in '"\r\n'):
        raise TableError(f"--sep must be one character (TAB: --sep '\\t'), got {sep!r}")
    if decimal is not None and decimal not in (".", ","):
        raise TableError(f"--decimal must be . or , got {decimal!r}")
    if thousands is not None:
        if thousands not in _THOUSANDS:
            raise TableError(f"--thousands must be one of {list(_THOUSANDS)}, got {thousands!r}")
        if thousands == (decimal or "."):
            raise TableError(f"--thousands {thousands!r} is the decimal mark too: give --decimal")
    return sep, decimal, thousands


def read_table(path: Path, sep: Optional[str] = None, decimal: Optional[str] = None,
               thousands: Optional[str] = None, expect: Sequence[str] = ()) -> Table:
    """A CSV or Parquet file (by extension) as a :class:`Table`; :class:`TableError` (one line) if it cannot be
    read, is empty, names a column twice or, for a CSV file, has a row with more or fewer fields than
    its header (an unquoted thousands separator or decimal comma, a stray separator).

    CSV (:func:`csv_format` checks the options): ``sep`` the field separator (default
    :func:`sniff_separator`), fields quoted with ``"``; ``decimal`` the decimal mark (default: with
    ``thousands`` ``","`` or ``"."`` the other mark, else :func:`sniff_decimal`); ``thousands`` a thousands
    separator to accept between groups of three digits (default: none, and numbers written with one are
    refused). Parquet columns are read as stored; ``sep``, ``decimal`` and ``thousands`` are ignored.

    ``expect``: column names that must be in the table (:func:`columns` checks them again), checked in a CSV
    file as soon as its rows are read, before pandas is imported (a wrong column name is refused at once)."""
    if not path.is_file():
        raise TableError(f"{path}: no such file")
    if path.suffix.lower() in (".parquet", ".pq"):
        import pandas as pd

        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # pyarrow and pandas raise many kinds; all mean "cannot read this table"
            raise TableError(f"{path}: cannot read it as Parquet ({one_line(exc)})") from None
        _check_header(path, list(frame.columns))
        if frame.shape[0] == 0:
            raise TableError(f"{path}: the table is empty")
        return Table(path, frame, np.arange(1, frame.shape[0] + 1), "row", ".", None)
    sep = sep or sniff_separator(path)
    if decimal is None:  # with --thousands , or . the other mark; else guessed
        decimal = {",": ".", ".": ","}.get(thousands or "") or sniff_decimal(path, sep)
    header: Optional[List[str]] = None
    records: List[List[str]] = []
    lines: List[int] = []
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f, delimiter=sep)
            end = 0  # the last line of the previous record: a record starts on the next one
            for record in reader:
                start, end = end + 1, reader.line_num
                if len(record) <= 1 and not "".join(record).strip():
                    if header is None or len(header) > 1:
                        continue  # a blank line: no fields
                    # one column: a blank line is an empty value (as a missing one is written), never dropped
                    record = [""]
                if header is None:
                    header, header_line = record, start
                    _check_header(path, header)
                elif len(record) != len(header):
                    raise TableError(
                        f"{path}: line {start} has {len(record)} field(s), the header (line {header_line}) "
                        f"{len(header)} (separator {sep!r}): an unquoted thousands separator or decimal comma, or a "
                        "stray separator? Quote such values, or see --sep")
                else:
                    records.append(record)
                    lines.append(start)
    except UnicodeDecodeError as exc:
        raise TableError(f"{path}: cannot read it as CSV: not UTF-8 text (byte {exc.start}); save it as UTF-8") \
            from None
    except csv.Error as exc:
        raise TableError(f"{path}: cannot read it as CSV ({one_line(exc)})") from None
    if header is None or not records:
        raise TableError(f"{path}: the table is empty")
    _check_present(path, expect, header)
    import pandas as pd

    frame = pd.DataFrame({name: pd.Series([r[j] for r in records], dtype=object) for j, name in enumerate(header)})
    return Table(path, frame, np.asarray(lines), "line", decimal, thousands)


def _check_present(path: Path, names: Sequence[str], header: Sequence[Any]) -> None:
    """:class:`TableError` naming the columns of ``names`` that a table with this ``header`` does not have."""
    missing = [c for c in names if c not in header]
    if missing:
        raise TableError(f"{path}: no column(s) {missing}; the table has {list(header)}")


def _check_header(path: Path, header: Sequence[Any]) -> None:
    """:class:`TableError` when a table names a column twice (for a CSV file: as written, before pandas would
    rename one of them)."""
    repeated = sorted({str(c) for c in header if list(header).count(c) > 1})
    if repeated:
        raise TableError(f"{path}: the table names the column(s) {repeated} more than once; give each column "
                         "its own name")


def person_groups(table: Table, name: Optional[str]) -> Optional[np.ndarray]:
    """The public ``--groups`` column as integer person codes [rows] (rows with the same identifier, a
    number or a text, belong to one person; codes in order of first appearance), or None without
    ``--groups``. :class:`TableError` naming the row of a missing identifier. Public: who is who, not the outputs."""
    import pandas as pd

    if name is None:
        return None
    if name not in table.frame.columns:
        raise TableError(f"{table.path}: no column {name!r} for --groups; the table has {list(table.frame.columns)}")
    series = table.frame[name]
    missing = np.flatnonzero(series.isna().to_numpy() | (series.astype(str).str.strip() == "").to_numpy())
    if missing.size:
        raise TableError(f"{table.path}: --groups column {name!r}, {table.where} {table.rows[int(missing[0])]}: "
                         "no person identifier")
    codes, _ = pd.factorize(series.astype(str).str.strip())
    return codes.astype(np.int64)


def _number_text(cell: str, decimal: str, thousands: Optional[str]) -> Optional[str]:
    """``cell`` as text that :data:`_NUMBER` matches (decimal mark ".", no thousands separator), or ``None``
    when it is not a number written with ``decimal`` (and, if given, ``thousands`` between groups of three
    digits)."""
    s = cell.strip()
    if thousands is not None and thousands in s:
        if not _grouped(thousands, decimal).fullmatch(s):
            return None
        s = s.replace(thousands, "")
    if decimal != ".":
        if "." in s:
            return None
        s = s.replace(decimal, ".")
    return s if _NUMBER.fullmatch(s) else None


def _why(cell: str, decimal: str, thousands: Optional[str], private: bool) -> str:
    """Why ``cell`` is not read as a finite number; for the private column, the kind of problem only."""
    s, shown = cell.strip(), repr(cell if len(cell) <= 40 else cell[:37] + "...")
    low = s.lower()
    if low in _MISSING:
        return "an empty cell (a missing value)" if not s else ("a missing value" + ("" if private else f" {shown}"))
    if low in _BOOLEANS:
        return f"a boolean{'' if private else ' ' + shown} (booleans are not read as 1/0: write the numbers)"
    if _NOT_FINITE.fullmatch(s):
        return "a value that is not finite" if private else f"{shown} is not finite"
    if private:  # the value is never shown, nor what it looks like
        return (f"a non-numeric value (read with the decimal mark {decimal!r}"
                f"{'' if thousands is None else f' and thousands separator {thousands!r}'}: see --decimal, --thousands)")
    hints = []
    other = "," if decimal == "." else "."
    if s.count(other) == 1 and _number_text(s.replace(other, decimal), decimal, None) is not None:
        hints.append(f"a decimal {'comma' if other == ',' else 'point'}? give --decimal {other!r}")
    for t in _THOUSANDS:
        if t != decimal and t != thousands and t in s and _grouped(t, decimal).fullmatch(s):
            hints.append(f"a thousands separator? give --thousands {t!r}")
    return f"non-numeric value {shown}" + (f" ({'; '.join(hints)})" if hints else "")


def _column_values(table: Table, name: str, private: bool) -> np.ndarray:
    """Column ``name`` of ``table`` as finite float64 numbers, or :class:`TableError` naming the column and the
    first cell that is not one: a missing value or empty cell, a boolean, a value that is not finite or
    not a number (one written with another decimal mark or a thousands separator included). For the
    private column the message names the row and the kind of problem, never the value."""
    import pandas as pd

    series = table.frame[name]
    label = f"the private column {name!r}" if private else f"column {name!r}"
    if pd.api.types.is_bool_dtype(series.dtype):  # Parquet: stored as booleans
        raise TableError(f"{table.path}: {label} holds booleans (True/False): they are not read as 1/0; store "
                         "the numbers")
    if pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_complex_dtype(series.dtype):
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            i = int(bad[0])
            kind = "a missing value" if pd.isna(series.iloc[i]) else (
                "a value that is not finite" if private else f"{float(values[i])!r} is not finite")
            raise TableError(f"{table.path}: {label}, {table.where} {table.rows[i]}: {kind}")
        return values
    if not (pd.api.types.is_object_dtype(series.dtype) or pd.api.types.is_string_dtype(series.dtype)):
        raise TableError(f"{table.path}: {label} holds {series.dtype} values, not numbers")
    cells = ["" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v) for v in series.tolist()]
    texts = [_number_text(c, table.decimal, table.thousands) for c in cells]
    numbers = [i for i, t in enumerate(texts) if t is not None]
    values = np.full(len(cells), np.nan)
    if numbers:  # pandas' converter, as pd.read_csv reads them (not always the nearest float64: within 1 ulp)
        values[numbers] = pd.to_numeric(pd.Series([texts[i] for i in numbers], dtype=object)).to_numpy(np.float64)
    bad = np.flatnonzero(~np.isfinite(values))  # not a number, or beyond the float64 range (1e999 reads as inf)
    if bad.size:
        i = int(bad[0])
        why = (_why(cells[i], table.decimal, table.thousands, private) if texts[i] is None
               else "a value beyond the float64 range" if private else f"{cells[i]!r} is beyond the float64 range")
        raise TableError(f"{table.path}: {label}, {table.where} {table.rows[i]}: {why}")
    return values


def columns(table: Table, names: Sequence[str], *, private: bool = False) -> np.ndarray:
    """The named columns of ``table`` as a finite float64 array [rows, len(names)]: the one place where a
    cell becomes a number (:func:`_column_values`; :class:`TableError` naming the column and row otherwise).

    For the private column the message never describes its values (no counts, no examples)."""
    _check_present(table.path, names, list(table.frame.columns))
    arr = np.stack([_column_values(table, c, private) for c in names], axis=1)
    if not private:  # public: its values may be named; the private column is clipped to --bounds instead
        for c, column in zip(names, arr.T):
            if np.max(np.abs(column)) > MAX_MAGNITUDE:
                raise TableError(f"{table.path}: column {c!r} has values beyond +-{MAX_MAGNITUDE:g} (largest "
                                 f"{np.max(np.abs(column)):.6g}), which would overflow the kernel: rescale it")
    return arr
