"""Tests of bert_tf.core.errors: every entry point reports bad flags and user errors in one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bert_tf.core import errors

ENTRY_POINTS = ["data_tools.build_vocab", "data_tools.create_pretraining_data",
                "bert_tf.run_pretraining", "bert_tf.export", "bert_tf.convert_checkpoint"]


def _stderr_lines(proc: subprocess.CompletedProcess) -> list:
    # TensorFlow's C++ start-up chatter is not ours; everything else counts.
    return [line for line in proc.stderr.splitlines()
            if line.strip()
            and not line.startswith(("WARNING: All log", "I0000", "E0000", "W0000"))]


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_unknown_flag_is_one_line_and_exit_2(module, repo_root):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-m", module, "--no_such_flag=1"], cwd=repo_root,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == errors.EXIT_USER_ERROR
    assert _stderr_lines(proc) == ["error: Unknown command line flag 'no_such_flag'"]


def test_cli_main_turns_user_error_into_exit_2(capsys):
    @errors.cli_main
    def main(argv):
        raise errors.UserError("the vocab has no [MASK]")

    with pytest.raises(SystemExit) as e:
        main(["prog"])
    assert e.value.code == errors.EXIT_USER_ERROR
    assert capsys.readouterr().err == "error: the vocab has no [MASK]\n"


def test_cli_main_keeps_tracebacks_for_bugs():
    @errors.cli_main
    def main(argv):
        raise ZeroDivisionError("bug")

    with pytest.raises(ZeroDivisionError):
        main(["prog"])


def test_cli_main_interrupt_exits_130(capsys):
    @errors.cli_main
    def main(argv):
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as e:
        main(["prog"])
    assert e.value.code == errors.EXIT_INTERRUPTED
    assert capsys.readouterr().err == "error: interrupted\n"


def test_reason_is_one_short_line():
    import tensorflow as tf

    from bert_tf.core.errors import reason

    assert reason(FileNotFoundError(2, "No such file or directory")) == "No such file or directory"
    op_error = tf.errors.DataLossError(None, None, "corrupted record at 12\n\t [[{{node x}}]]")
    assert reason(op_error) == "corrupted record at 12"
    assert reason(ValueError("first\nsecond")) == "first"
    assert reason(ValueError("  ")) == "ValueError"
    assert len(reason(RuntimeError("x" * 1000))) == 300


def test_exit_at_once_does_not_wait_for_the_teardown(repo_root):
    # A thread that never ends stands for TensorFlow's slow teardown (sys.exit would wait for
    # it forever): the message is printed and the process ends with the code.
    code = ("import threading\n"
            "from bert_tf.core import errors\n"
            "threading.Thread(target=threading.Event().wait).start()\n"
            "print('written', flush=True)\n"
            "errors.exit_at_once('stopped by SIGTERM at step 3', 143)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo_root, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 143
    assert proc.stdout == "written\n"
    assert proc.stderr == "stopped by SIGTERM at step 3\n"
