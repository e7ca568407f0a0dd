"""The README and docs: size, set-up commands, links that resolve, vocabulary, generated references current."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_BYTES = 15_000
DOC_FILES = [README, *sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks" / "HISTORY.md"]
USER_FACING = [README, *sorted((ROOT / "docs").rglob("*.md"))]

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def _prose(text: str) -> str:
    """The text outside code blocks and inline code, where a link is a link."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = _slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_readme_is_at_most_15000_bytes() -> None:
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move detail to docs/guide or docs/reference"


def test_readme_starts_with_the_two_setup_commands() -> None:
    text = README.read_text(encoding="utf-8")
    first_block = re.search(r"```[a-z]*\n(.*?)```", text, re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines() if line.strip()]
    assert commands == ["make run", "make test"]
    assert text.index(first_block.group(0)) < text.index("\n## "), "the set-up commands come before any section"
    assert ".venv/bin/trainwise" in text and "source .venv/bin/activate" in text


def test_makefile_has_the_readme_targets() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("run", "test", "install"):
        assert re.search(rf"^{target}:", makefile, re.M), f"make {target} is in the README but not in the Makefile"


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    broken = []
    for target in LINK.findall(_prose(path.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target} (no heading #{anchor})")
    assert not broken, f"{path.relative_to(ROOT)}: broken links: {broken}"


def test_docs_cite_papers_not_internal_documents() -> None:
    """No "DIGEST", "seed NNN" or seed file name in user-facing text or code comments (tests and benchmarks too): cite
    the paper by author and title."""
    pattern = r"DIGEST\|seeds\? 00[0-4]\|seed-00[0-4]\|00[0-4]_[0-9a-f]\{16\}\|shared/seeds"
    # benchmarks/results/ holds what past runs wrote: their text changes when they are run again
    found = subprocess.run(["grep", "-rn", "--exclude-dir=*.egg-info", "--exclude-dir=results", "--exclude=test_docs.py",
                            pattern, "src", "README.md", "docs", "benchmarks", "tools", "tests"],
                           cwd=ROOT, capture_output=True, text=True).stdout
    assert found == "", f"cite the paper (docs/sources.md) instead:\n{found}"


def test_no_session_vocabulary_in_user_facing_text() -> None:
    pattern = re.compile(r"\b[Ss]ession[- ]\d+|\bthis session\b|\bsessions? \d+")
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in USER_FACING
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not hits, "\n".join(hits)


def _load(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "reference" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_matches_the_app() -> None:
    generator = _load("generate_cli")
    committed = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    assert committed == generator.render(), "docs/reference/cli.md is stale: run python docs/reference/generate_cli.py"


def test_cli_reference_names_every_command() -> None:
    text = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    for command in ("profile", "predict", "plan", "launch", "run", "catalog search", "pipeline profile"):
        assert f"`trainwise {command}`" in text


def test_profile_schema_reference_matches_the_model() -> None:
    generator = _load("generate_profile_schema")
    markdown, json_text = generator.render()
    reference = ROOT / "docs" / "reference"
    assert (reference / "profile.md").read_text(encoding="utf-8") == markdown, \
        "docs/reference/profile.md is stale: run python docs/reference/generate_profile_schema.py"
    assert (reference / "profile.schema.json").read_text(encoding="utf-8") == json_text


def test_link_checker_catches_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [missing](nowhere.md) [bad anchor](#nope) `[code](x.md)`\n")
    targets = LINK.findall(_prose(page.read_text()))
    assert targets == ["#title", "nowhere.md", "#nope"]
    assert _anchors(page) == {"title"}
