"""The README a newcomer reads in five minutes (issue 41, item 3): short, its two commands unchanged,
one place for the generated headline table, and every link from it and from docs/ leading somewhere."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")

# .ci/run and a fresh clone run these two lines as written: they may not change by a character
MAIN_JOB = "python3 -m pip install -c constraints.txt -e . && python3 -m bench.run --model mobilenetv2"
TESTS = "python3 -m pip install -c constraints.txt -e '.[dev,ray,flower,models]' && python3 -m pytest -q"

LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_readme_is_at_most_200_lines():
    assert len(README.splitlines()) <= 200


def test_readme_holds_the_two_commands_as_lines_of_their_own():
    lines = README.splitlines()
    assert lines.count(MAIN_JOB) == 1 and lines.count(TESTS) == 1


def test_readme_holds_the_headline_markers_once_in_order():
    start, end = "<!-- findings:headline:start -->", "<!-- findings:headline:end -->"
    assert README.count(start) == 1 and README.count(end) == 1
    assert README.index(start) < README.index(end)


def _links(path: Path) -> list[tuple[Path, str]]:
    """(target file, anchor) of every relative markdown link in a file."""
    found = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if "://" in target or target.startswith(("#", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        found.append(((path.parent / file).resolve(), anchor))
    return found


def test_every_relative_link_leads_to_a_file():
    # docs/findings.md is written by `python -m bench.findings` and checked by that command's tests
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = [(page.name, str(target.relative_to(ROOT)))
               for page in pages for target, _ in _links(page)
               if not target.exists() and target != ROOT / "docs/findings.md"]
    assert missing == []


def test_links_into_findings_name_shipped_studies():
    # a section of docs/findings.md is headed by a study's name, the folder it ships in
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    anchors = {anchor for page in pages for target, anchor in _links(page)
               if target == ROOT / "docs/findings.md" and anchor}
    assert anchors, "no page links a section of docs/findings.md"
    assert sorted(a for a in anchors if not (ROOT / "results/reference" / a).is_dir()) == []
