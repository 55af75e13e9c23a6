"""Check the documents' figures against their records, and that no document cites a path outside the repository.

    .venv/bin/python scripts/check_figures.py             # README.md and docs/benchmarks.md's results tables
    .venv/bin/python scripts/check_figures.py --root DIR  # another copy of the repository

A results table is a markdown table whose header has a `figure` and a `record` column. In every row, the record
cell links the JSON files the row's figures come from (docs/results/*.json, relative to the document; a link may
end in `#a.b[2].c` to look only under that field), and every number of the figure cell (outside backticks) must be
found in one of them at the precision it is written with: 5,975.9 is any value that rounds to 5975.9, and 14.8%
is a value that rounds to 14.8 or, as a fraction, to 0.148. Every markdown document of the repository is also
read for relative links and `../` paths that leave it or name nothing in it, and for links to headings that
do not exist. Exits 1 with one line per problem (`FILE:LINE: what`), 0 when all
hold. tests/unit/test_check_figures.py runs it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FIGURE_DOCS = ("README.md", "docs/benchmarks.md")
"""The documents whose results tables are checked."""

NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(%?)")
"""A written figure: digits with optional thousands separators and decimals, and an optional percent sign."""

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
ESCAPE = re.compile(r"(?<![\w./-])((?:\.\./)+[\w.\-/]+)")
"""A relative path that climbs (`../shared/x.md`), wherever a document writes it."""


@dataclass(frozen=True)
class Figure:
    text: str
    value: float
    decimals: int
    percent: bool

    def found_in(self, numbers: list[float]) -> bool:
        """Some recorded value, rounded to the figure's decimals, is the figure (a percentage also as a fraction)."""
        scales = (1.0, 100.0) if self.percent else (1.0,)
        return any(round(x * scale, self.decimals) == round(self.value, self.decimals)
                   for x in numbers for scale in scales)


def figures(cell: str) -> list[Figure]:
    """The numbers a table cell writes, outside code spans."""
    prose = re.sub(r"`[^`]*`", " ", cell)
    return [Figure(m.group(0), float(m.group(1).replace(",", "") + (m.group(2) or "")),
                   len(m.group(2) or ".") - 1, bool(m.group(3))) for m in NUMBER.finditer(prose)]


def numbers(node) -> list[float]:
    """Every number of a JSON document (booleans are no numbers)."""
    if isinstance(node, bool):
        return []
    if isinstance(node, int | float):
        return [float(node)]
    if isinstance(node, dict):
        return [x for value in node.values() for x in numbers(value)]
    if isinstance(node, list):
        return [x for value in node for x in numbers(value)]
    return []


def field(node, path: str):
    """The part of a JSON document at a dotted path ("stages.baseline.runs[0]"); KeyError where there is none."""
    for part in filter(None, re.split(r"\.|(\[\d+\])", path)):
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    return node


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def results_rows(text: str):
    """(line number, row's cells by column name) of every results table of a markdown document."""
    lines = text.splitlines()
    header = None
    for number, line in enumerate(lines, 1):
        if not line.lstrip().startswith("|"):
            header = None
            continue
        row = cells(line)
        if header is None:
            header = [c.lower() for c in row] if {"figure", "record"} <= {c.lower() for c in row} else []
        elif header and not set(line.replace("|", "").strip()) <= set("-: "):
            yield number, dict(zip(header, row, strict=False))


class Records:
    """JSON records read once each, relative to the repository root."""

    def __init__(self, root: Path):
        self.root, self._read = root.resolve(), {}

    def numbers(self, path: Path, under: str | None) -> list[float]:
        if path not in self._read:
            self._read[path] = json.loads(path.read_text())
        return numbers(field(self._read[path], under) if under else self._read[path])


def check_row(doc: Path, number: int, row: dict[str, str], records: Records) -> list[str]:
    where = f"{doc.relative_to(records.root)}:{number}"
    links = [target for target in LINK.findall(row.get("record", "")) if ".json" in target]
    if not links:
        return [f"{where}: the row cites no JSON record in its record cell"]
    found: list[float] = []
    for target in links:
        name, _, under = target.partition("#")
        path = (doc.parent / name).resolve()
        if not path.is_relative_to(records.root / "docs" / "results") or not path.is_file():
            return [f"{where}: {name} is no record in docs/results/ of this repository"]
        try:
            found += records.numbers(path, under or None)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            return [f"{where}: {target}: {type(exc).__name__} {exc}"]
    shown = figures(row.get("figure", ""))
    if not shown:
        return [f"{where}: the row's figure cell has no figure"]
    return [f"{where}: {f.text} is not in {', '.join(links)}" for f in shown if not f.found_in(found)]


def anchors(doc: Path) -> set[str]:
    """The anchors GitHub gives a markdown document's headings (lower case, punctuation dropped, spaces to -)."""
    found, fenced = set(), False
    for line in doc.read_text().splitlines():
        fenced ^= line.startswith("```")
        heading = re.match(r"#+\s+(.*)", line)
        if heading and not fenced:
            found.add(re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-"))
    return found


def links(doc: Path, root: Path) -> list[str]:
    """Relative links and ../ paths of a markdown document that leave the repository or name nothing in it,
    and links to a heading of a markdown document that has no such heading."""
    problems = []
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        where = f"{doc.relative_to(root)}:{number}"
        targets = [t for t in LINK.findall(line) if "://" not in t and not t.startswith("mailto:")]
        for target in targets + ESCAPE.findall(line):
            name, _, anchor = target.partition("#")
            path = (doc.parent / name).resolve() if name else doc
            if not path.is_relative_to(root) or not path.exists():
                problems.append(f"{where}: {target} is not in the repository (paths are relative to the document)")
            elif anchor and path.suffix == ".md" and target in targets and anchor not in anchors(path):
                problems.append(f"{where}: {target}: {path.relative_to(root)} has no heading #{anchor}")
    return problems


def markdown_files(root: Path) -> list[Path]:
    skip = {".venv", ".git", ".peers", "node_modules", "runs"}
    return sorted(p for p in root.rglob("*.md") if not skip & set(p.relative_to(root).parts))


def check(root: Path, docs: tuple[str, ...] = FIGURE_DOCS) -> list[str]:
    root = root.resolve()
    records = Records(root)
    problems = []
    for name in docs:
        doc = root / name
        rows = list(results_rows(doc.read_text()))
        if not rows:
            problems.append(f"{name}: no results table (a table with figure and record columns)")
        for number, row in rows:
            problems += check_row(doc, number, row, records)
    for doc in markdown_files(root):
        problems += links(doc, root)
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, default=ROOT, help="the repository to check (default: this one)")
    args = p.parse_args(argv)
    problems = check(args.root)
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
