"""scripts/check_figures.py: every figure of README.md's and docs/benchmarks.md's results tables is in the JSON
record its row links, no document cites a path outside the repository; scripts/device_mfu.py: the shipped
references/device_mfu.json is what the records in docs/results/ give."""

import shutil
import sys
from pathlib import Path

import pytest
from commands import run_process

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import check_figures  # noqa: E402
import device_mfu  # noqa: E402

SKIP = shutil.ignore_patterns(".venv", ".git", "__pycache__", ".pytest_cache", "runs", "*.egg-info", ".peers")


@pytest.fixture
def copy(tmp_path) -> Path:
    """This repository's files (no virtualenv, no git) in a temporary folder, to be changed."""
    target = tmp_path / "repo"
    shutil.copytree(ROOT, target, ignore=SKIP)
    return target


def _check(root: Path, capsys) -> tuple[int, list[str]]:
    code = check_figures.main(["--root", str(root)])
    return code, capsys.readouterr().err.splitlines()


def test_the_documents_figures_are_in_their_records():
    out = run_process([sys.executable, "scripts/check_figures.py"], ROOT)
    assert out.returncode == 0, out.stderr
    rows = {name: list(check_figures.results_rows((ROOT / name).read_text())) for name in check_figures.FIGURE_DOCS}
    assert all(len(found) >= 5 for found in rows.values()), rows  # the tables are there and read


@pytest.mark.slow  # a copy of the repository
def test_a_readme_figure_changed_to_one_not_in_its_record_fails(copy, capsys):
    readme = copy / "README.md"
    text = readme.read_text()
    assert "**5,975.9 img/s**" in text and _check(copy, capsys)[0] == 0
    readme.write_text(text.replace("**5,975.9 img/s**", "**5,995.9 img/s**"))
    code, said = _check(copy, capsys)
    line = next(n for n, row in enumerate(readme.read_text().splitlines(), 1) if "5,995.9" in row)
    record = "docs/results/gpu-2026-11-27-h100-run4-part1.json#stages.baseline"
    assert code == 1 and said == [f"README.md:{line}: 5,995.9 is not in {record}"]
    # a percentage is read as one or as a fraction (MFU 0.1482 is 14.8%): 14.9% is in neither form
    readme.write_text(text.replace("MFU 14.8%", "MFU 14.9%"))
    assert "14.9% is not in" in _check(copy, capsys)[1][0]


@pytest.mark.slow  # a copy of the repository
def test_a_row_without_its_record_and_a_path_outside_the_repository_fail(copy, capsys):
    bench = copy / "docs" / "benchmarks.md"
    text = bench.read_text()
    row = next(line for line in text.splitlines() if "**7,026.3 img/s**" in line)
    unrecorded = row.split("| [gpu-")[0] + "| measured by hand |"
    outside = "MLPerf's figure (`../shared/reference/performance-anchors.md`)."
    bench.write_text(text.replace(row, unrecorded).replace("## Current figures", f"## Current figures\n\n{outside}"))
    said = _check(copy, capsys)[1]
    assert any(s.endswith(": the row cites no JSON record in its record cell") for s in said), said
    assert any(s.startswith("docs/benchmarks.md:10: ../shared/reference/performance-anchors.md is not in the "
                            "repository") for s in said), said
    # a record outside docs/results/ is no record, and a link to a heading that does not exist is found
    bench.write_text(text.replace("(results/gpu-2026-11-27-h200-part1.json#stages.baseline)",
                                  "(../src/dlscale/references/device_mfu.json)"))
    assert "is no record in docs/results/" in " ".join(_check(copy, capsys)[1])
    bench.write_text(text)
    tools = copy / "docs" / "tools.md"
    tools.write_text(tools.read_text() + "\n[x](benchmarks.md#no-such-heading)\n")
    line = len(tools.read_text().splitlines())
    assert _check(copy, capsys)[1] == [f"docs/tools.md:{line}: benchmarks.md#no-such-heading: docs/benchmarks.md has "
                                       "no heading #no-such-heading"]


def test_a_figure_matches_at_the_precision_it_is_written_with():
    shown = {f.text: f for f in check_figures.figures("**5,975.9 img/s** +- 5.7, MFU 14.8%; `--batch-size 512`")}
    assert list(shown) == ["5,975.9", "5.7", "14.8%"]  # the code span's number is not a figure
    assert shown["5,975.9"].found_in([5975.886]) and not shown["5,975.9"].found_in([5975.96, 597.59])
    assert shown["14.8%"].found_in([0.14819]) and shown["14.8%"].found_in([14.81])
    assert not shown["5.7"].found_in([0.057])  # only a percentage is also read as a fraction
    assert check_figures.figures("43 of 43")[0].found_in([43]) and not check_figures.figures("43")[0].found_in([43.6])
    document = {"stages": {"baseline": {"runs": [{"value": 1.0}, {"value": 2.5}]}}, "flag": True}
    assert check_figures.numbers(document) == [1.0, 2.5]
    assert check_figures.field(document, "stages.baseline.runs[1]") == {"value": 2.5}


def test_the_shipped_device_mfu_is_what_the_records_give():
    assert device_mfu.main(["--check"]) == 0
    built = device_mfu.build()
    h100 = built["devices"]["H100"]
    defaults = [e for e in h100 if "compiled default" in e["what"] and e["batch_size"] == 512]
    assert {round(100 * e["mfu"], 1) for e in defaults} == {14.8}  # the H100 runs 2-4
    assert max(e["mfu"] for e in built["devices"]["H200"]) == pytest.approx(0.1745, abs=1e-4)
    for entries in built["devices"].values():  # each entry is its record's figure
        for entry in entries:
            record = __import__("json").loads((ROOT / entry["record"]).read_text())
            assert round(check_figures.field(record, entry["field"]), 4) == entry["mfu"], entry["source"]
