"""docs/reference/cli.md is what scripts/cli_reference.py writes from the commands' flags now.

The script asks every console script of setup.cfg for its flags (`--helpxml`, one process
each); a flag added, removed or reworded without regenerating the page fails here.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "cli_reference.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("cli_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    # dataclasses look the module up by name while the file executes.
    sys.modules.setdefault("cli_reference", module)
    spec.loader.exec_module(module)
    return module


def test_checked_in_cli_reference_matches_the_code():
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (
        "docs/reference/cli.md is stale: run `python scripts/cli_reference.py` and commit "
        f"it.\n{result.stdout[-6000:]}{result.stderr[-2000:]}")


def test_reference_has_every_console_script_and_its_flags():
    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    module = _load_script()
    scripts = module.console_scripts()
    assert len(scripts) >= 11
    for script, entry in scripts:
        assert f"\n## {script}\n" in page
        assert f"`python -m {entry.removesuffix('.__main__')}`" in page
    # A flag the fine-tuning commands share is attributed to the module that defines it.
    assert ("| `--init_checkpoint` | string |  | A bert_tf checkpoint or output directory"
            in page)
    assert "`bert_tf.finetune.cli` |" in page
    # Enum values are the type; absl's "<a|b>: " prefix is not repeated in the help.
    assert "| `--format` | saved_model \\| keras_hub | `saved_model` | What to write. |" in page


def test_docstring_split_and_flag_rows():
    module = _load_script()
    summary, example = module.split_docstring(
        "Does one thing,\nwell.\n\n    python -m pkg.job --a=1 \\\\\n        --b=2\n\nMore.\n")
    assert summary == "Does one thing, well."
    assert example == "python -m pkg.job --a=1 \\\n    --b=2"
    from xml.etree import ElementTree

    row = module.flag_row(ElementTree.fromstring(
        "<flag><file>/x/site-packages/bert_tf/run_glue.py</file><name>protocol</name>"
        "<meaning>&lt;fixed|grid&gt;: fixed or grid.</meaning><default>fixed</default>"
        "<type>string enum</type><enum_value>fixed</enum_value><enum_value>grid</enum_value>"
        "</flag>"))
    assert row == module.FlagRow(name="protocol", type="fixed | grid", default="`fixed`",
                                 help="fixed or grid.", module="bert_tf.run_glue")
