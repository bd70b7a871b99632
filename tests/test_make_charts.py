"""The results pages' charts show the figures of their data files.

A chart is an SVG checked in under docs/results/img/, drawn by scripts/make_charts.py from
docs/results/data/<name>.json. When a JSON file's figures change and the chart is not
redrawn, the page shows a chart that contradicts its table. Here every chart is drawn again
from its JSON and its text (labels, values, ratios, captions: the SVGs keep text as text)
must equal the checked-in SVG's, element for element. The text, not the bytes: the curves'
path data may differ in the last digits between matplotlib versions, the figures may not.
"""

from __future__ import annotations

import html
import importlib.util
import re
from pathlib import Path
from typing import List

import matplotlib  # noqa: F401  (the test extra: a fresh clone runs this file, no skip)
import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "results" / "data"
IMG = ROOT / "docs" / "results" / "img"
TEXT = re.compile(r"<text\b[^>]*>([^<]*)</text>")


def _load_make_charts():
    spec = importlib.util.spec_from_file_location("make_charts",
                                                  ROOT / "scripts" / "make_charts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_charts = _load_make_charts()


def svg_texts(svg: str) -> List[str]:
    """The text elements of an SVG, in document order, entities decoded."""
    return [html.unescape(text) for text in TEXT.findall(svg)]


@pytest.fixture(scope="module")
def redrawn(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("img")
    make_charts.draw_all(DATA, out)
    return out


def test_every_data_file_has_a_chart_and_every_chart_a_data_file():
    # PENDING: charts whose benchmark has not run yet; one leaves it with its data file.
    charts = set(make_charts.CHARTS) - make_charts.PENDING
    assert {p.stem for p in DATA.glob("*.json")} == charts
    assert {p.stem for p in IMG.glob("*.svg")} == charts


@pytest.mark.parametrize("name", sorted(set(make_charts.CHARTS) - make_charts.PENDING))
def test_the_checked_in_chart_shows_its_data(name, redrawn):
    checked_in = svg_texts((IMG / f"{name}.svg").read_text(encoding="utf-8"))
    drawn = svg_texts((redrawn / f"{name}.svg").read_text(encoding="utf-8"))
    assert drawn, f"{name}.svg has no text elements"
    assert checked_in == drawn, (
        f"docs/results/img/{name}.svg is stale: run python scripts/make_charts.py")


def test_the_fine_tuning_speed_chart_shows_the_benchmarks_ratios():
    # Hand-read from docs/results/finetuning.md's speed table: the chart must show these,
    # and the ratios the benchmark printed (1.03x, not 9.2 / 9.0 rounded again to 1.02x).
    texts = svg_texts((IMG / "finetune_throughput.svg").read_text(encoding="utf-8"))
    for label in ("9.2", "9.0", "1.03x", "37.2", "16.7", "2.23x"):
        assert label in texts
    assert "1.46x" not in texts and "1.02x" not in texts


def test_svg_texts_reads_text_elements_in_order():
    svg = ('<svg><text x="1">9.2</text><g><text style="a">A &amp; B</text></g>'
           '<path d="M 0 0"/></svg>')
    assert svg_texts(svg) == ["9.2", "A & B"]


def test_the_budget_minutes_chart_shows_each_points_difference_from_random(tmp_path):
    """Hand-made points (budget_curves.chart_data's format): every difference from random
    is written beside its point, each recipe in the legend."""
    doc = {"title": "GLUE against pretraining minutes", "machine": "machine: test CPU",
           "titles": {"c": "budget recipe", "f": "ELECTRA"},
           "points": [{"recipe": "c", "arm": "c", "minutes": 30.0, "schedule": "own",
                       "minus_random": 0.85, "minus_random_se": 0.39},
                      {"recipe": "f", "arm": "f120", "minutes": 30.0, "schedule": "long",
                       "minus_random": 2.5, "minus_random_se": 0.5},
                      {"recipe": "f", "arm": "f120", "minutes": 120.0, "schedule": "own",
                       "minus_random": 6.25, "minus_random_se": 0.4}]}
    path = tmp_path / "minutes.svg"
    make_charts.chart_pretraining_budget_minutes(doc).savefig(path)
    texts = svg_texts(path.read_text(encoding="utf-8"))
    assert [t for t in texts if t.startswith("+")] == ["+0.85", "+2.50", "+6.25"]
    assert "c: budget recipe" in texts and "f: ELECTRA" in texts
    assert "f: ELECTRA (snapshots of the long run)" in texts
