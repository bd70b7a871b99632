"""docs/reference/cli/ is what scripts/cli_reference.py writes from the commands' flags now.

The script asks every console script of setup.cfg for its flags (`--helpxml`, one process
each) and reads from the code which flags each requires; a flag added, removed, reworded
or made required without regenerating the pages fails here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "cli_reference.py"
PAGES = ROOT / "docs" / "reference" / "cli"


@pytest.fixture(scope="module")
def ref():
    # The script imports its sibling scripts/cli_required.py, as it does when run.
    sys.path.insert(0, str(SCRIPT.parent))
    import cli_reference

    return cli_reference


def _page(name: str) -> str:
    return (PAGES / name).read_text(encoding="utf-8")


def test_checked_in_cli_reference_matches_the_code():
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (
        "docs/reference/cli/ is stale: run `python scripts/cli_reference.py` and commit "
        f"it.\n{result.stdout[-6000:]}{result.stderr[-2000:]}")


def test_a_stale_or_left_over_page_is_reported(ref):
    pages = {"index.md": "a\n", "bert-tf-x.md": "b\n"}
    assert ref.stale_report(pages, dict(pages)) == ""
    report = ref.stale_report(pages, {"index.md": "a\n", "bert-tf-x.md": "c\n",
                                      "bert-tf-gone.md": "d\n"})
    assert "-c\n+b\n" in report
    assert "docs/reference/cli/bert-tf-gone.md (checked in)" in report


def test_one_page_per_console_script_listed_in_the_index_and_the_nav(ref):
    scripts = ref.console_scripts()
    assert len(scripts) >= 11
    index = _page("index.md")
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "reference/cli/index.md" in nav
    for script, entry in scripts:
        page = _page(f"{script}.md")
        assert page.startswith(f"# {script} {{ .cli-page }}\n")
        assert f"`python -m {entry.removesuffix('.__main__')}`" in page
        assert (f'[<code class="cli-flag">{script}</code>]({script}.md) &nbsp; '
                f"`python -m {entry.removesuffix('.__main__')}`\n:   " in index)
        assert f"reference/cli/{script}.md" in nav
    assert ref.missing_from_nav(["index.md", "bert-tf-nothing.md"]) == ["bert-tf-nothing.md"]


def test_flags_are_a_definition_list_of_unbreakable_names_not_a_wide_table():
    css = (ROOT / "docs" / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    rule = re.search(r"code\.cli-flag[^{]*\{([^}]*)\}", css)
    assert rule and "white-space: nowrap" in rule.group(1)
    assert "stylesheets/extra.css" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    page = _page("bert-tf-pretrain.md")
    assert "| --- |" not in page and "defined in" not in page
    entry = ('<code class="cli-flag">--adam_bias_correction</code>\n'
             ":   bool, default `true`. AdamW with bias-corrected moments;")
    assert entry in page
    # Enum values are the type; absl's "<a|b>: " prefix is not repeated in the help.
    assert ('<code class="cli-flag">--format</code>\n'
            ":   `saved_model` | `keras_hub`, default `saved_model`. What to write.\n"
            in _page("bert-tf-export.md"))


def test_required_flags_are_marked_from_the_code():
    pretrain = _page("bert-tf-pretrain.md")
    assert "\nRequired: `--input_file`, `--output_dir`.\n" in pretrain
    assert ('<code class="cli-flag">--output_dir</code> <span class="cli-required">required'
            '</span>\n' in pretrain)
    assert '<code class="cli-flag">--learning_rate</code>\n' in pretrain
    # absl's mark_flag_as_required, in a loop over the names.
    assert ("\nRequired: `--from_format`, `--input`, `--output`, `--to_format`.\n"
            in _page("bert-tf-convert.md"))
    squad = _page("bert-tf-squad.md")
    assert ('<code class="cli-flag">--train_file</code> <span class="cli-required '
            'cli-sometimes">sometimes required</span>\n:   *Required with `--do_train`.*'
            in squad)
    # A requirement stated for another command's flags is not this one's: bert-tf-export
    # imports the fine-tuning code, whose --bert_config_file is required without
    # --init_checkpoint, a flag export does not have.
    export = _page("bert-tf-export.md")
    assert '<code class="cli-flag">--bert_config_file</code>\n' in export
    assert "\nNo flag is required.\n" not in export


def test_shared_flags_get_their_own_section_naming_the_module_once():
    page = _page("bert-tf-classify.md")
    own, shared = page.split("\n## Shared flags: `bert_tf.finetune.cli`\n", 1)
    assert "\n## Flags\n" in own and "--task_name</code>" in own
    assert "--init_checkpoint</code>" in shared and "--init_checkpoint</code>" not in own
    assert "[`bert-tf-tag`](bert-tf-tag.md)" in shared.split("\n\n", 1)[0]
    assert page.count("bert_tf.finetune.cli") == 2  # the heading and its one line


def test_docstring_split_and_flag_rows(ref):
    summary, example = ref.split_docstring(
        "Does one thing,\nwell.\n\n    python -m pkg.job --a=1 \\\\\n        --b=2\n\nMore.\n")
    assert summary == "Does one thing, well."
    assert example == "python -m pkg.job --a=1 \\\n    --b=2"
    row = ref.flag_row(ElementTree.fromstring(
        "<flag><file>/x/site-packages/bert_tf/run_glue.py</file><name>protocol</name>"
        "<meaning>&lt;fixed|grid&gt;: fixed or grid.</meaning><default>fixed</default>"
        "<type>string enum</type><enum_value>fixed</enum_value><enum_value>grid</enum_value>"
        "</flag>"))
    assert row == ref.FlagRow(name="protocol", type="fixed | grid", default="`fixed`",
                              help="fixed or grid.", module="bert_tf.run_glue")
    assert ref.render_flag(ref.FlagRow("x", "integer", "`1`", "Steps.", "m", "")) == [
        '<code class="cli-flag">--x</code> <span class="cli-required">required</span>',
        ":   integer, default `1`. Steps.", ""]


def test_a_module_only_one_command_takes_flags_from_is_not_called_shared(ref):
    def command(script, *modules):
        rows = tuple(ref.FlagRow(f"f{i}", "string", "", "Help.", module)
                     for i, module in enumerate(modules))
        return ref.Command(script, modules[0], "Does it.", "", rows)

    a = command("bert-tf-a", "pkg.a", "pkg.shared", "pkg.only_a")
    b = command("bert-tf-b", "pkg.b", "pkg.shared")
    page = ref.render_command(a, [a, b])
    assert ("\n## Shared flags: `pkg.shared`\n\nDefined in `pkg.shared`; the same flags are "
            "taken by [`bert-tf-b`](bert-tf-b.md).\n" in page)
    assert "\n## Flags from `pkg.only_a`\n\n<div" in page
    assert "\nNo flag is required.\n" in page
