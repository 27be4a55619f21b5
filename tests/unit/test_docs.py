"""The README and docs/ say what the code does: cited files exist, the commands are the ones
`make run` installs, and the files their walk-throughs write are ignored by git."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_markdown_file_a_page_cites_is_in_the_repository(page: Path) -> None:
    cited = set(re.findall(r"[\w./-]*\b[A-Za-z_][\w-]*\.md\b", page.read_text()))
    missing = [
        name for name in cited if not (page.parent / name).exists() and not (ROOT / name).exists()
    ]
    assert not missing, f"{page.name} cites {missing}, which the repository does not have"
    # Nor sections of design documents kept outside it ("PRODUCT §4").
    assert not re.findall(r"\b(?:SPEC|PRODUCT)\b(?:\.md)?\s*§", page.read_text())


def test_readme_runs_the_command_from_the_venv_make_run_makes() -> None:
    venv = re.search(r"^VENV := (\S+)$", (ROOT / "Makefile").read_text(), flags=re.M)
    assert venv is not None
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Command line", 1)[1].split("\n## ", 1)[0]
    assert f"`{venv.group(1)}/bin/posthaste ...`" in section
    assert f"source {venv.group(1)}/bin/activate" in section
    # A command to paste as is names the venv's binary.
    assert not re.search(r"\$\(posthaste ", readme)


def test_files_the_walkthroughs_and_pip_install_leave_are_ignored() -> None:
    # ``--no-index``: the patterns alone decide, whatever the checkout holds.
    leftovers = ["email.json", "domain.json", "domain_id.txt", "build/lib/x.py", "posthaste-data/x"]
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *leftovers],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    assert sorted(ignored) == sorted(leftovers)
