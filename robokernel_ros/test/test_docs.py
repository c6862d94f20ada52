"""The README opens with its two commands, and the docs site builds with warnings as errors.

`make test` runs `make docs` (sphinx-build -W) before pytest; these tests hold that
wiring in place and show that a warning on any page, one added later included, fails
the build.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _makefile_rule(target: str) -> tuple[list[str], list[str]]:
    """(prerequisites, recipe lines) of a Makefile target."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(rf"^{re.escape(target)}\s*:", line):
            prerequisites = line.split(":", 1)[1].split()
            recipe = []
            for body in lines[i + 1 :]:
                if not body.startswith("\t"):
                    break
                recipe.append(body.strip())
            return prerequisites, recipe
    raise AssertionError(f"the Makefile has no {target!r} target")


def _docs_command(src: Path, out: Path) -> list[str]:
    """The Makefile's sphinx-build command, pointed at another source and output folder."""
    _, recipe = _makefile_rule("docs")
    (line,) = [r for r in recipe if "sphinx-build" in r]
    argv = shlex.split(line.split("&&")[-1].strip())
    assert argv[0] == "sphinx-build", line
    assert argv[-2:] == ["docs", "docs/_build/html"], line
    return [sys.executable, "-m", "sphinx", *argv[1:-2], str(src), str(out)]


def test_the_readme_opens_with_make_demo_and_make_test():
    text = (ROOT / "README.md").read_text()
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[0] == "The two commands", headings[:3]
    first_block = re.search(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S)
    assert first_block is not None
    commands = [
        line.split("#", 1)[0].strip() for line in first_block.group(1).splitlines() if line.strip()
    ]
    assert commands == ["make demo", "make test"]
    assert text.index("make demo") < text.index("## ", text.index("## The two commands") + 3)


def test_make_test_builds_the_docs_with_warnings_as_errors():
    prerequisites, _ = _makefile_rule("test")
    assert "docs" in prerequisites
    argv = _docs_command(Path("src"), Path("out"))
    assert "-W" in argv and "--keep-going" in argv and "-E" in argv


def test_every_docs_page_opens_with_a_title():
    pages = sorted(DOCS.glob("*.md"))
    assert len(pages) >= 8, pages
    for page in pages:
        first = next(line for line in page.read_text().splitlines() if line.strip())
        assert first.startswith("# "), f"{page.name} starts with {first!r}, not a '# Title' line"


def test_rosdoc2_finds_the_site_where_it_looks_for_a_packages_sphinx_project():
    # rosdoc2's standard location: <package.xml's folder>/doc/conf.py
    conf = ROOT / "robokernel_ros" / "doc" / "conf.py"
    assert (ROOT / "robokernel_ros" / "package.xml").is_file()
    assert conf.is_file() and conf.resolve() == (DOCS / "conf.py").resolve()


def test_a_page_with_a_warning_fails_the_docs_build_and_only_that_page_warns(tmp_path):
    src = tmp_path / "docs"
    shutil.copytree(DOCS, src, ignore=shutil.ignore_patterns("_build"))
    # A page someone adds later: picked up by the index's glob, its broken reference a warning.
    (src / "zz_added_later.md").write_text("# Added later\n\nSee {doc}`no_such_page`.\n")
    result = subprocess.run(
        _docs_command(src, tmp_path / "html"), capture_output=True, text=True, timeout=300
    )
    assert result.returncode != 0, result.stdout + result.stderr
    warnings = [line for line in result.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert warnings, result.stderr
    assert all("zz_added_later" in line for line in warnings), "\n".join(warnings)
    assert "no_such_page" in result.stderr
    # The glob put the new page into the toctree: no "not included in any toctree" warning.
    assert "isn't included in any toctree" not in result.stderr


def test_every_file_the_readme_links_to_exists():
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    assert any(t.startswith("docs/") for t in targets), targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"
