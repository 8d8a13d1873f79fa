"""The ``dpgp`` command line on tables as people have them (issue 29 item 3): separators, decimal marks,
thousands separators, ragged rows, booleans and missing values in CSV and Parquet files; the
ClippingWarning as one line; a large ``--grid`` kept out of the card.

Every refusal: exit code 2, one line on stderr naming the column and the row (or the line), no output
file, the ledger untouched. Values read are compared with pandas' and NumPy's own parsers.
"""

from __future__ import annotations

import contextlib
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dpgp_gpflow as dp
from dpgp_gpflow.cli import STORED_INPUT_VALUES, main
from dpgp_gpflow.io.tables import TableError, columns, read_table, sniff_decimal

from conftest import shared_data_dir
from test_cli import _ledger, _one_line, _run, _untouched

PUBLIC = ["--lengthscale", "20", "--variance", "100", "--noise", "10", "--bounds", "60", "180", "--epsilon", "1",
          "--delta", "0.01", "--quiet"]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tables")
    rng = np.random.default_rng(1)
    n = 30
    frame = pd.DataFrame({"age": np.round(rng.uniform(0, 80, n), 2), "weight": np.round(rng.uniform(40, 100, n), 3)})
    frame["height"] = np.round(100 + 0.8 * frame["age"].clip(upper=20) + 0.1 * frame["weight"] + rng.normal(0, 3, n), 3)
    frame.to_csv(d / "data.csv", index=False)
    # the same table as a German spreadsheet writes it: ';' between fields, ',' as the decimal mark
    frame.to_csv(d / "komma.csv", index=False, sep=";", decimal=",")
    pd.DataFrame({"age": [5.5, 30.25, 60.0]}).to_csv(d / "at.csv", index=False)
    # two columns, so that the separator can be guessed (one column holds no separator to see)
    pd.DataFrame({"age": [5.5, 30.25, 60.0], "id": [1, 2, 3]}).to_csv(d / "at-komma.csv", index=False, sep=";",
                                                                     decimal=",")
    return d


def read_card(path: Path) -> dict:
    """The privacy card of a release file, read as plain JSON (the format's own reader not involved)."""
    return json.loads(Path(path).read_text())["card"]


def _release(work: Path, data, *extra, x=("age",), y="height", at=("--grid", "4")) -> list:
    return ["release", data, "--x", *x, "--y", y, *PUBLIC, *at, *extra]


# ---------------------------------------------------------------------------------------------
# Reading right: compared with pandas' and NumPy's parsers


def test_a_comma_decimal_file_is_read_as_pandas_reads_it_with_no_flag(work):
    table = read_table(work / "komma.csv")
    assert table.decimal == ","  # sniffed: ';' separator, numbers with one comma, none with a point
    reference = pd.read_csv(work / "komma.csv", sep=";", decimal=",")
    got = columns(table, ["age", "weight", "height"])
    np.testing.assert_array_equal(got, reference[["age", "weight", "height"]].to_numpy())
    np.testing.assert_array_equal(got, pd.read_csv(work / "data.csv").to_numpy())  # as written with '.'
    # the explicit flag wins over the guess: the same file read with '.' is refused, never misread
    with pytest.raises(TableError, match=r"column 'age', line 2: non-numeric value '[\d,]+' \(a decimal comma\?"):
        columns(read_table(work / "komma.csv", decimal="."), ["age"])


@pytest.mark.parametrize("text, sep, decimal", [
    ("a;b\n1,5;2\n3;4\n", ";", ","),
    ("a;b\n1.234,5;2\n3;4\n", ";", ","),  # thousands '.' with a decimal comma
    ('"height";"weight"\n151.765;47.8\n139.7;36\n', ";", "."),  # Howell1.csv
    ("a;b\n1,5;2.5\n", ";", "."),  # both marks: no guess (and the file is refused below)
    ("a;b\n1;2\n", ";", "."),  # integers: either mark reads them the same
    ('a,b\n"1,5",2\n', ",", "."),  # only ';' files are guessed
])
def test_decimal_mark_is_sniffed_by_the_documented_rule(tmp_path, text, sep, decimal):
    (tmp_path / "t.csv").write_text(text)
    assert sniff_decimal(tmp_path / "t.csv", sep) == decimal


def test_a_file_mixing_decimal_marks_is_refused_at_the_first_field_that_does_not_fit(work):
    # the first 20 lines write commas: ',' is guessed; line 26 writes a point: refused there, not misread
    lines = ["age;height"] + [f"{i},5;1{i:02d},25" for i in range(24)] + ["30.5;140,5", "31,5;141,5"]
    (work / "mixed.csv").write_text("\n".join(lines) + "\n")
    ledger = _ledger(work, "mixed.sqlite")
    code, stderr = _run(_release(work, "mixed.csv", "--ledger", ledger, "-o", "mixed.json"), work)
    _one_line(code, stderr, "column 'age', line 26: non-numeric value '30.5' (a decimal point? give --decimal '.')")
    _untouched(ledger)
    assert not (work / "mixed.json").exists()


@pytest.mark.parametrize("text, thousands, expected", [
    ('x,y\n"1,234",5\n"12,345.5",6\n7,8\n', ",", [1234.0, 12345.5, 7.0]),
    ("x;y\n1.234,5;5\n-12.345.678;6\n7,25;8\n", ".", [1234.5, -12345678.0, 7.25]),  # decimal ',' implied
    ("x\ty\n1'234.5\t5\n7\t8\n", "'", [1234.5, 7.0]),
])
def test_thousands_separators_are_read_with_the_flag_as_pandas_reads_them(tmp_path, text, thousands, expected):
    (tmp_path / "t.csv").write_text(text)
    got = columns(read_table(tmp_path / "t.csv", thousands=thousands), ["x"])[:, 0]
    np.testing.assert_array_equal(got, expected)
    sep = {",": ",", ".": ";", "'": "\t"}[thousands]
    decimal = "," if thousands == "." else "."
    reference = pd.read_csv(tmp_path / "t.csv", sep=sep, thousands=thousands, decimal=decimal)
    np.testing.assert_array_equal(got, reference["x"].to_numpy(dtype=np.float64))


def test_howell1_reads_with_no_flag_and_releases(tmp_path):
    data = shared_data_dir()
    if data is None or not (data / "Howell1.csv").is_file():
        pytest.skip("Howell1.csv is absent: the papers' data folder ../shared/data (or $DPGP_SHARED_DATA) is not there")
    table = read_table(data / "Howell1.csv")  # ';' separated, quoted header, '.' decimals: nothing given
    reference = np.loadtxt(data / "Howell1.csv", delimiter=";", skiprows=1)  # height weight age male
    assert list(table.frame.columns) == ["height", "weight", "age", "male"] and table.decimal == "."
    np.testing.assert_array_equal(columns(table, ["height", "weight", "age", "male"]), reference)
    argv = ["release", data / "Howell1.csv", "--x", "age", "--y", "height", "--bounds", "60", "160", "--lengthscale",
            "10", "--variance", "400", "--noise", "50", "--epsilon", "1", "--delta", "0.01", "--grid", "5", "-o",
            "kung.json", "--quiet"]
    code, stderr = _run(argv, tmp_path)
    assert code == 0, stderr
    assert dp.load(tmp_path / "kung.json").mean.shape == (5, 1)


# ---------------------------------------------------------------------------------------------
# Refused: one line naming the column and the row, exit 2, nothing spent

CSV_REFUSALS = {  # id: (file text, extra argv, message)
    "decimal comma read with --decimal .": (
        "age;height\n1,5;150,5\n2,5;151\n", ["--decimal", "."],
        "column 'age', line 2: non-numeric value '1,5' (a decimal comma? give --decimal ',')"),
    "decimal comma with --sep , : ragged": (
        "age;height\n1,5;150,5\n2,5;151\n", ["--sep", ","], "line 2 has 3 field(s), the header (line 1) 1"),
    "unquoted thousands in every row": (  # pandas took the first column as an index: age := 234
        "age,height\n1,234,150\n2,345,160\n3,456,170\n", [], "line 2 has 3 field(s), the header (line 1) 2"),
    "one short row after a blank line": (
        "age,height\n1,150\n\n2,160\n3\n4,170\n", [], "line 5 has 1 field(s), the header (line 1) 2"),
    "a quoted field over two lines counts both": (
        'age,height,note\n1,150,"a\nb"\n2,160\n', [], "line 4 has 2 field(s), the header (line 1) 3"),
    "quoted thousands separator": (
        'age,height\n1,150\n"1,234",160\n', [],
        ("column 'age', line 3: non-numeric value '1,234' (a decimal comma? give --decimal ','; a thousands "
         "separator? give --thousands ',')")),
    "thousands point with a decimal comma": (
        "age;height\n1,5;150\n1.234,5;160\n", [],
        "column 'age', line 3: non-numeric value '1.234,5' (a thousands separator? give --thousands '.')"),
    "misplaced group with --thousands": (
        'age,height\n"1,234",150\n"12,34",160\n', ["--thousands", ","], "column 'age', line 3: non-numeric value '12,34'"),
    "booleans in an input": (
        "age,height\nTrue,150\nFalse,160\n", [], "column 'age', line 2: a boolean 'True' (booleans are not read as 1/0"),
    "yes/no in an input": ("age,height\n1,150\nno,160\n", [], "column 'age', line 3: a boolean 'no'"),
    "booleans in the output": (
        "age,height\n1,true\n2,false\n", [], "the private column 'height', line 2: a boolean (booleans are not read"),
    "empty cell in an input": ("age,height\n1,150\n,160\n", [], "column 'age', line 3: an empty cell (a missing value)"),
    "NaN in an input": ("age,height\n1,150\nNaN,160\n", [], "column 'age', line 3: a missing value 'NaN'"),
    "inf in an input": ("age,height\n1,150\n-inf,160\n", [], "column 'age', line 3: '-inf' is not finite"),
    "beyond float64 in an input": ("age,height\n1,150\n1e999,160\n", [], "column 'age', line 3: '1e999' is beyond"),
    "empty cell in the output": ("age,height\n1,150\n2,\n", [], "the private column 'height', line 3: an empty cell"),
    "inf in the output": ("age,height\n1,150\n2,inf\n", [], "the private column 'height', line 3: a value that is not"),
    "text in the output": ("age,height\n1,150\n2,tall\n", [], "the private column 'height', line 3: a non-numeric value"),
    "underscores are not digits": ("age,height\n1_000,150\n2,160\n", [], "column 'age', line 2: non-numeric value '1_000'"),
    "--decimal other than . or ,": ("age,height\n1,150\n", ["--decimal", ";"], "--decimal must be . or ,"),
    "--thousands the decimal mark": ("age,height\n1,150\n", ["--thousands", "."], "--thousands '.' is the decimal mark"),
    "--sep of two characters": ("age,height\n1,150\n", ["--sep", ";;"], "--sep must be one character"),
}


@pytest.mark.parametrize("case", list(CSV_REFUSALS))
def test_csv_refusals_name_the_column_and_row_and_spend_nothing(work, case):
    text, extra, message = CSV_REFUSALS[case]
    name = f"bad-{list(CSV_REFUSALS).index(case)}.csv"
    (work / name).write_text(text)
    ledger = _ledger(work, f"{name}.sqlite")
    code, stderr = _run(_release(work, name, *extra, "--ledger", ledger, "-o", "bad.json"), work)
    _one_line(code, stderr, message)
    if "private column" in message:  # the private value is never shown
        assert not re.search(r"true|inf|tall", stderr.split("'height'")[1]), stderr
    assert not (work / "bad.json").exists()
    _untouched(ledger)


def test_an_at_file_is_read_with_the_same_rules(work):
    ledger = _ledger(work, "at.sqlite")
    (work / "at-bool.csv").write_text("age\n1\nyes\n")
    (work / "at-blank.csv").write_text("age\n1\n\n3\n")  # one column: a blank line is an empty value (dropped before)
    for at, message in (("at-bool.csv", "at-bool.csv: column 'age', line 3: a boolean 'yes'"),
                        ("at-blank.csv", "at-blank.csv: column 'age', line 3: an empty cell (a missing value)"),
                        ("at-komma.csv", None)):  # sniffed: read as at.csv
        argv = _release(work, "data.csv", "--ledger", ledger, "-o", "at-out.json", at=("--at", at))
        code, stderr = _run(argv, work)
        if message is None:
            assert code == 0, stderr
            card = read_card(work / "at-out.json")
            np.testing.assert_array_equal(np.asarray(card["release_inputs"]), pd.read_csv(work / "at.csv").to_numpy())
        else:
            _one_line(code, stderr, message)
            assert not (work / "at-out.json").exists()
            _untouched(ledger)


def test_predict_reads_a_comma_decimal_file_and_writes_the_numbers(work):
    assert _run(_release(work, "data.csv", "-o", "fn.json", at=("--sparse", "5")), work)[0] == 0
    code, stderr = _run(["predict", "fn.json", "--at", "at-komma.csv", "-o", "pred.csv", "--quiet"], work)
    assert code == 0, stderr
    pred = pd.read_csv(work / "pred.csv")
    expected = pd.read_csv(work / "at.csv")
    np.testing.assert_array_equal(pred["age"], expected["age"])
    np.testing.assert_allclose(pred["mean"], dp.load(work / "fn.json").predict(expected.to_numpy()).mean[:, 0], rtol=1e-12)
    # one column: no separator to guess, so ',' and the decimal comma splits the row; --sep ';' reads it
    (work / "at-one.csv").write_text("age\n5,5\n30,25\n60\n")
    code, stderr = _run(["predict", "fn.json", "--at", "at-one.csv", "-o", "pred2.csv", "--quiet"], work)
    _one_line(code, stderr, "at-one.csv: line 2 has 2 field(s), the header (line 1) 1")
    assert not (work / "pred2.csv").exists()
    code, stderr = _run(["predict", "fn.json", "--at", "at-one.csv", "--sep", ";", "-o", "pred2.csv", "--quiet"], work)
    assert code == 0, stderr
    np.testing.assert_array_equal(pd.read_csv(work / "pred2.csv")["mean"], pred["mean"])


PARQUET_REFUSALS = {
    "bool input": ({"age": [True, False, True]}, "column 'age' holds booleans (True/False)"),
    "bool output": ({"height": [True, False, True]}, "the private column 'height' holds booleans"),
    "nullable int with a missing value": ({"age": pd.array([1, 2, None], dtype="Int64")},
                                          "column 'age', row 3: a missing value"),
    "float NaN": ({"age": [1.0, np.nan, 3.0]}, "column 'age', row 2: a missing value"),
    "float inf": ({"age": [1.0, 2.0, np.inf]}, "column 'age', row 3: inf is not finite"),
    "NaN output": ({"height": [150.0, np.nan, 160.0]}, "the private column 'height', row 2: a missing value"),
    "strings": ({"age": ["1", "two", "3"]}, "column 'age', row 2: non-numeric value 'two'"),
    "string booleans": ({"age": ["1", "2", "False"]}, "column 'age', row 3: a boolean 'False'"),
    "dates": ({"age": pd.to_datetime(["2020-01-01"] * 3)}, "column 'age' holds datetime64"),
}


@pytest.mark.parametrize("case", list(PARQUET_REFUSALS))
def test_parquet_columns_are_checked_like_csv_columns(work, case):
    pytest.importorskip("pyarrow", reason="Parquet needs pyarrow (pip install pyarrow): the Parquet checks skip")
    column, message = PARQUET_REFUSALS[case]
    frame = pd.DataFrame({"age": [1.0, 2.0, 3.0], "height": [150.0, 160.0, 170.0]})
    for name, values in column.items():
        frame[name] = values
    path = work / f"bad-{list(PARQUET_REFUSALS).index(case)}.parquet"
    frame.to_parquet(path)
    ledger = _ledger(work, f"{path.name}.sqlite")
    code, stderr = _run(_release(work, path.name, "--ledger", ledger, "-o", "bad.json"), work)
    _one_line(code, stderr, f"{path.name}: {message}")
    assert not (work / "bad.json").exists()
    _untouched(ledger)


def test_parquet_numbers_as_stored_are_read(work):
    pytest.importorskip("pyarrow", reason="Parquet needs pyarrow (pip install pyarrow): the Parquet checks skip")
    frame = pd.DataFrame({"age": pd.array([1, 2, 3], dtype="Int64"), "weight": ["1.5", "2", "-3e2"],
                          "height": np.array([150.5, 160.0, 170.25], dtype=np.float32)})
    frame.to_parquet(work / "typed.parquet")
    got = columns(read_table(work / "typed.parquet"), ["age", "weight", "height"])
    np.testing.assert_array_equal(got, [[1.0, 1.5, 150.5], [2.0, 2.0, 160.0], [3.0, -300.0, 170.25]])


#: The refusals and the clipped release that tests/test_cli_process.py runs in a fresh process (with the demo:
#: one TensorFlow start-up for both).
FRESH_CASES = ("unquoted thousands in every row", "quoted thousands separator", "booleans in the output",
               "decimal comma read with --decimal .", "empty cell in an input")
CLIP_BOUNDS = (105.0, 120.0)


# ---------------------------------------------------------------------------------------------
# The ClippingWarning as one line (on the command line: tests/test_cli_process.py); the library's warnings
# untouched


def test_the_library_keeps_its_normal_warnings_after_the_command_line(work, capsys):
    from dpgp_gpflow.validation import clip_outputs

    before = warnings.showwarning
    with contextlib.chdir(work):
        assert main(["release", "data.csv", "--x", "age", "--y", "height", "--bounds", "105", "120",
                     "--lengthscale", "20", "--variance", "100", "--noise", "10", "--epsilon", "1", "--delta", "0.01",
                     "--grid", "3", "--quiet", "-o", "clip-in.json"]) == 0
    assert "dpgp: warning:" in capsys.readouterr().err
    assert warnings.showwarning is before
    with pytest.warns(dp.ClippingWarning, match="1 of 2 private outputs"):
        clip_outputs(np.array([[0.0], [5.0]]), (-1.0, 1.0))


# ---------------------------------------------------------------------------------------------
# A large --grid does not fill the card


@pytest.mark.slow
def test_a_large_grid_stores_its_first_rows_and_show_prints_them(work, capsys):
    frame = pd.read_csv(work / "data.csv")
    common = ["release", "data.csv", "--x", "age", "weight", "--y", "height", "--bounds", "60", "180",
              "--lengthscale", "20", "30", "--variance", "100", "--noise", "10", "--epsilon", "1", "--delta", "0.01",
              "--quiet", "--seed", "1"]
    axes = [np.linspace(frame[c].min(), frame[c].max(), 71) for c in ("age", "weight")]
    grid = np.array([[a, w] for a in axes[0] for w in axes[1]])  # row-major: age, then weight
    assert grid.size > STORED_INPUT_VALUES >= 70 * 70 * 2  # 71 x 71 is over the limit, 70 x 70 within it
    assert _run([*common, "--grid", "71", "-o", "big.json"], work)[0] == 0
    card = read_card(work / "big.json")
    assert card["release_inputs_rows"] == 71 * 71
    np.testing.assert_allclose(card["release_inputs"], grid[:20], rtol=1e-15)
    assert len(json.dumps(card)) < 10_000  # the whole grid would be about 200,000 characters
    capsys.readouterr()
    with contextlib.chdir(work):
        assert main(["show", "big.json"]) == 0
    out = capsys.readouterr().out
    assert "release_inputs: 20 of 5041 row(s) (below)" in out
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("released values (5041; the file stores the "
                                                                       "inputs of the first 20 only"))
    loaded = dp.load(work / "big.json")
    for i in range(20):
        np.testing.assert_allclose([float(v) for v in lines[start + 2 + i].split()],
                                   [*grid[i], loaded.mean[i, 0], loaded.noise_std[i, 0]], rtol=1e-5)
    assert lines[start + 22] == "  ... and 5021 more row(s)"
    # within the limit: every row, checked against the card's inputs_hash
    assert _run([*common, "--grid", "70", "-o", "within.json"], work)[0] == 0
    card = read_card(work / "within.json")
    assert "release_inputs_rows" not in card and np.asarray(card["release_inputs"]).shape == (4900, 2)
    with contextlib.chdir(work):
        assert main(["show", "within.json"]) == 0
    assert "released values (4900):" in capsys.readouterr().out


def test_a_tab_separator_can_be_written_as_backslash_t(work, tmp_path):
    from dpgp_gpflow.io.tables import csv_format

    (tmp_path / "t.tsv").write_text("age\theight\n1,5\t150\n")  # a comma in a TAB file: no ragged row
    for given in ("\\t", "tab", "\t"):
        sep, decimal, _ = csv_format(given, ",", None)
        assert sep == "\t"
        np.testing.assert_array_equal(columns(read_table(tmp_path / "t.tsv", sep, decimal), ["age", "height"]),
                                      [[1.5, 150.0]])
