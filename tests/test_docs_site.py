"""The docs site's settings that keep long lines readable (mkdocs.yml, setup.cfg, extra.css).

`mkdocs build --strict` passes whether or not a signature formatter is installed: without
ruff (or black) mkdocstrings prints every API signature on one line (the longest was 608
characters, cut off at the page's edge), so the docs extra must install one.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_docs_extra_installs_a_signature_formatter():
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg", encoding="utf-8")
    requirements = [line.split("#", 1)[0].strip()
                    for line in parser["options.extras_require"]["docs"].splitlines()]
    names = {re.split(r"[<>=\[ ]", line, maxsplit=1)[0] for line in requirements if line}
    assert names & {"ruff", "black"}, names


def test_signatures_are_separate_and_formatted_to_the_page_width():
    mkdocs = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^\s+separate_signature: true$", mkdocs, re.M)
    line_length = re.search(r"^\s+line_length: (\d+)$", mkdocs, re.M)
    # About 88 characters of code fit the content column at 1400 px.
    assert line_length and int(line_length.group(1)) <= 88


def test_code_blocks_wrap_instead_of_hiding_their_ends():
    mkdocs = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^extra_css:\n  - stylesheets/extra\.css$", mkdocs, re.M)
    css = (ROOT / "docs" / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    rule = re.search(r"\.md-typeset pre > code \{([^}]*)\}", css)
    assert rule and "white-space: pre-wrap" in rule.group(1)
    # The continuation indent needs a span per line.
    assert re.search(r"^\s+line_spans: __span$", mkdocs, re.M)
    assert 'pre > code > span[id^="__span"]' in css
