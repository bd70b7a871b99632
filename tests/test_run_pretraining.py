"""End-to-end tests of `python -m bert_tf.run_pretraining` on tiny TFRecords (subprocesses:
one real `python -m` run, the rest forked from a server that imported TensorFlow once).

- train + eval: checkpoints, eval_results.txt with the six keys and sane values, summaries;
- a run stopped half-way (--max_steps_per_run) and resumed in a new process follows the
  uninterrupted run's per-step losses and ends with the same weights and optimizer state
  (dropout on, so the RNG state and input position must be restored too);
- --max_train_minutes stops at a loop boundary with a checkpoint, then evaluates;
- Ctrl-C stops with exit 130 and leaves only complete checkpoints;
- (SIGTERM: tests/test_preemption.py, at --steps_per_loop=1000, with one and two workers;)
- a non-finite loss stops with one `error:` line naming the step and saves nothing after it
  (loss spikes and --eval_every_n_steps: tests/test_health.py);
- eval-only with another --bert_config_file is one `error:` line (strict restore);
- init_checkpoint warm-starts a longer-sequence "phase 2" and reports unused variables;
- an extended --vocab_file resizes init_checkpoint's embeddings, and
  --train_only_new_embeddings_steps trains only the new rows first;
- --dynamic_masking takes the special ids from --vocab_file and trains;
- bad flags and inputs give one `error:` line, exit 2, no traceback;
- the flagfiles in configs/ parse.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time

import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import (
    AUTOGRAPH_LOG,
    REPO_ROOT,
    error_lines,
    pretraining_flags,
    progress_losses,
    progress_steps,
    run_module,
    synthetic_examples,
    write_bert_config,
    write_tfrecords,
)

MODULE = "bert_tf.run_pretraining"
STEPS = 6
EVAL_KEYS = ["global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
             "next_sentence_accuracy", "next_sentence_loss"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    examples = synthetic_examples(96, seed=11, uneven_weights=False)
    half = {k: v[:48] for k, v in examples.items()}
    rest = {k: v[48:] for k, v in examples.items()}
    write_tfrecords(root / "train-0.tfrecord", half)
    write_tfrecords(root / "train-1.tfrecord", rest)
    write_tfrecords(root / "eval.tfrecord", synthetic_examples(24, seed=12))
    # "Phase 2": longer sequences and more predictions.
    write_tfrecords(root / "long.tfrecord", synthetic_examples(32, seed=13, seq=32, preds=8))
    write_bert_config(root / "bert_config.json", hidden_dropout_prob=0.1,
                      attention_probs_dropout_prob=0.1)
    return root


def common_flags(data, output_dir=None, **overrides):
    return pretraining_flags(data, output_dir, **dict({"num_train_steps": STEPS}, **overrides))


def checkpoint_tensors(prefix):
    reader = tf.train.load_checkpoint(os.fspath(prefix))
    # The input iterator's state is a variant tensor, which the reader cannot return.
    return {k: reader.get_tensor(k) for k, dtype in reader.get_variable_to_dtype_map().items()
            if k != "_CHECKPOINTABLE_OBJECT_GRAPH" and dtype != tf.variant}


@pytest.fixture(scope="module")
def straight(data, tmp_path_factory):
    """An uninterrupted run of STEPS steps, then eval: a real `python -m` process, so that
    the forked runs compared with it (resumed, warm-started, ...) are checked against one."""
    out = tmp_path_factory.mktemp("straight")
    proc = run_module(MODULE, common_flags(data, out, do_eval="true"),
                      env={AUTOGRAPH_LOG: os.fspath(out.parent / "straight_autograph.log")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_train_and_eval_write_checkpoints_results_and_summaries(straight):
    out, proc = straight
    assert progress_steps(proc.stderr) == list(range(1, STEPS + 1))
    assert "--do_eval reads training files" not in proc.stderr  # held-out eval file given
    assert tf.train.latest_checkpoint(os.fspath(out)).endswith(f"ckpt-{STEPS}")
    assert (out / "ckpt-3.index").exists()
    assert (out / "bert_config.json").exists()
    assert list((out / "train").glob("events.out.tfevents.*"))
    text = (out / "eval_results.txt").read_text()
    results = dict(line.split(" = ") for line in text.splitlines())
    assert sorted(results) == EVAL_KEYS
    values = {k: float(v) for k, v in results.items()}
    assert values["global_step"] == STEPS
    # A barely trained tiny model: MLM loss near ln(128) = 4.85, NSP loss near ln(2) = 0.69.
    assert 3.5 < values["masked_lm_loss"] < 6.0
    assert 0.4 < values["next_sentence_loss"] < 1.0
    assert 0.0 <= values["masked_lm_accuracy"] <= 1.0
    assert 0.0 <= values["next_sentence_accuracy"] <= 1.0
    assert values["loss"] == pytest.approx(
        values["masked_lm_loss"] + values["next_sentence_loss"], rel=1e-5)
    assert "***** Eval results *****" in proc.stdout


def test_a_run_converts_none_of_the_library_s_functions_with_autograph(straight):
    # The step loops and input functions are plain graph code; autograph would convert them
    # again in every process (tests/_site/sitecustomize.py logs what it converts; the file
    # exists once the process imported TensorFlow with the logging in place).
    out, _ = straight
    converted = (out.parent / "straight_autograph.log").read_text().split()
    assert [name for name in converted if name.startswith("bert_tf.")] == []


def test_a_resumed_run_follows_the_uninterrupted_trajectory(cli, straight, data, tmp_path):
    reference_dir, reference = straight
    first = cli.run(MODULE, common_flags(data, tmp_path, max_steps_per_run=4))
    assert first.returncode == 0, first.stderr[-3000:]
    assert progress_steps(first.stderr) == [1, 2, 3, 4]
    second = cli.run(MODULE, common_flags(data, tmp_path))
    assert second.returncode == 0, second.stderr[-3000:]
    assert re.search(r"resuming from .*ckpt-4 at step 4", second.stderr)
    assert progress_steps(second.stderr) == [5, 6]
    np.testing.assert_allclose(
        progress_losses(first.stderr) + progress_losses(second.stderr),
        progress_losses(reference.stderr), rtol=2e-6)
    ours = checkpoint_tensors(tmp_path / f"ckpt-{STEPS}")
    ref = checkpoint_tensors(reference_dir / f"ckpt-{STEPS}")
    # Model weights, Adam moments, iterations, step and the dropout RNG state all agree.
    assert sorted(ours) == sorted(ref)
    assert any(k.startswith("rng/") for k in ours)
    assert any(k.startswith("input/") for k in ours)  # the input position is saved too
    for key in ref:
        if key.startswith("save_counter/"):
            continue  # how many saves each run made (3 vs 2): not training state
        if isinstance(ref[key], bytes):  # the input layout string
            assert ours[key] == ref[key], key
            continue
        np.testing.assert_allclose(ours[key], ref[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_an_arithmetic_input_position_resumes_from_the_cached_record_counts(
        cli, data, tmp_path):
    arithmetic = dict(input_position="arithmetic")  # the TPU default (auto), forced here
    reference = cli.run(MODULE, common_flags(data, tmp_path / "reference", **arithmetic))
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert re.search(r"counted the records of 2 input file\(s\) .*: 96 records",
                     reference.stderr)
    counts = json.loads((tmp_path / "reference" / "input_record_counts.json").read_text())
    assert sorted(n for _, n in counts["files"].values()) == [48, 48]
    # The same run stopped after its checkpoint at step 3 (a run killed before step 6): its
    # output_dir without ckpt-6, whose rerun must follow the uninterrupted run from there.
    split = tmp_path / "split"
    shutil.copytree(tmp_path / "reference", split)
    for path in split.glob(f"ckpt-{STEPS}.*"):
        path.unlink()
    tf.compat.v1.train.update_checkpoint_state(os.fspath(split), "ckpt-3", ["ckpt-3"])
    second = cli.run(MODULE, common_flags(data, split, **arithmetic))
    assert second.returncode == 0, second.stderr[-3000:]
    assert re.search(r"resuming from .*split/ckpt-3 at step 3", second.stderr)
    assert "input reopened at step 3 from its record counts" in second.stderr
    assert "counted the records" not in second.stderr  # read from the cache
    assert progress_steps(second.stderr) == [4, 5, 6]
    np.testing.assert_allclose(progress_losses(second.stderr),
                               progress_losses(reference.stderr)[3:], rtol=2e-6)
    ours = checkpoint_tensors(split / f"ckpt-{STEPS}")
    ref = checkpoint_tensors(tmp_path / "reference" / f"ckpt-{STEPS}")
    # No iterator is saved: the position is the step.
    assert not any(k.startswith("input/") for k in ours)
    # Weights, Adam moments, step and the dropout RNG state end where the reference's do.
    assert sorted(ours) == sorted(ref) and any(k.startswith("rng/") for k in ours)
    for key in ref:
        if not key.startswith("save_counter/"):  # how many saves each run made
            np.testing.assert_allclose(ours[key], ref[key], rtol=1e-5, atol=1e-6, err_msg=key)


def read_until(run, pattern, timeout):
    """Reads the stderr of a ForkedRun until a line matches `pattern`; returns everything up
    to that line."""
    text, deadline = "", time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = run.poll() is None  # before reading: what a finished run wrote is all there
        text = run.stderr_so_far()
        end = 0
        for line in text[:text.rfind("\n") + 1].splitlines(keepends=True):
            end += len(line)
            if re.search(pattern, line):
                return text[:end]
        if not running:
            break
        time.sleep(0.1)
    raise AssertionError(f"{pattern!r} not seen in time; stderr:\n{text[-3000:]}")


def signal_when_seen(cli, args, pattern, sig):
    """Starts the command, sends `sig` once `pattern` appears in its log, and waits.

    Returns:
        (the finished process, the log after the pattern).
    """
    run = cli.start(MODULE, args)
    try:
        seen = read_until(run, pattern, timeout=240)
        run.send_signal(sig)
    except BaseException:
        run.send_signal(signal.SIGKILL)
        run.wait()
        raise
    proc = run.wait(timeout=120)
    return proc, proc.stderr[len(seen):]


def test_ctrl_c_stops_cleanly_and_leaves_complete_checkpoints(cli, data, tmp_path):
    args = common_flags(data, tmp_path, num_train_steps=100000, save_checkpoints_steps=2,
                        keep_checkpoint_max=100)
    proc, rest = signal_when_seen(cli, args, r"saved checkpoint .*ckpt-4", signal.SIGINT)
    assert proc.returncode == 130
    assert error_lines(rest) == ["error: interrupted"]
    assert "Traceback" not in rest
    # Nothing half-written: no temporaries, and every checkpoint listed is readable.
    names = os.listdir(tmp_path)
    assert not [n for n in names if "_temp" in n or ".tmp" in n], names
    state = tf.train.get_checkpoint_state(os.fspath(tmp_path))
    assert len(state.all_model_checkpoint_paths) >= 2
    for prefix in state.all_model_checkpoint_paths:
        step = checkpoint_tensors(prefix)["step/.ATTRIBUTES/VARIABLE_VALUE"]
        assert step == int(prefix.rsplit("-", 1)[1])


def test_non_finite_loss_stops_with_one_line_naming_the_step(cli, data, tmp_path):
    proc = cli.run(MODULE, common_flags(data, tmp_path, learning_rate=1e10,
                                        num_warmup_steps=0, save_checkpoints_steps=1))
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = error_lines(proc.stderr)
    assert len(lines) == 1
    match = re.fullmatch(r"error: non-finite loss \((nan|inf|-inf)\) at step (\d+); stopped "
                         r"without saving it \((.*)\); try a lower --learning_rate or a "
                         r"longer warmup \(--num_warmup_steps; --warmup_proportion when "
                         r"fine-tuning\)", lines[0])
    assert match, lines[0]
    bad_step = int(match.group(2))
    assert bad_step >= 2  # step 1 starts from the finite initial weights
    saved = sorted(int(p.name[5:-6]) for p in tmp_path.glob("ckpt-*.index"))
    # The state saved at bad_step - 1 gave the bad loss (deleted): the one before is the good
    # one; nothing is saved from the bad step on.
    assert saved == list(range(1, bad_step - 1))
    if bad_step == 2:
        assert match.group(3) == ("no good checkpoint: ckpt-1 held diverged states, deleted; a "
                                  "rerun starts from the initial weights"), match.group(3)
    else:
        assert re.fullmatch(rf"last good checkpoint: .*ckpt-{bad_step - 2}, kept; a rerun "
                            r"resumes from it", match.group(3)), match.group(3)
    assert "Traceback" not in proc.stderr


def test_init_checkpoint_warm_starts_a_longer_sequence_phase(cli, straight, data, tmp_path):
    reference_dir, _ = straight
    proc = cli.run(MODULE, common_flags(
        data, tmp_path, input_file=data / "long.tfrecord", eval_input_file=None,
        max_seq_length=32, max_predictions_per_seq=8, num_train_steps=2,
        init_checkpoint=reference_dir, no_nsp="true", do_eval="true", max_eval_steps=2))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(rf"init_checkpoint .*ckpt-{STEPS}: restored \d+ variables", proc.stderr)
    assert re.search(r"2 checkpoint variables UNUSED by this model: model/nsp_head", proc.stderr)
    assert "NOT in the checkpoint" not in proc.stderr
    assert progress_steps(proc.stderr) == [1, 2]  # a fresh step counter
    results = (tmp_path / "eval_results.txt").read_text().splitlines()
    keys = [line.split(" = ")[0] for line in results]
    assert keys == ["global_step", "loss", "masked_lm_accuracy", "masked_lm_loss"]


def test_continued_pretraining_follows_an_extended_vocab_and_trains_new_rows_first(
        cli, straight, data, tmp_path):
    """--vocab_file extends the checkpoint's vocab.txt ([unused0] and one appended token):
    vocab_size follows, the first step trains only the two new rows, the second everything.
    (The initial values and every format: tests/test_vocab_resize.py.)"""
    from bert_tf.interop.native import read_native

    base = tmp_path / "base"
    shutil.copytree(straight[0], base)
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]"] + [
        f"w{i}" for i in range(122)]
    (base / "vocab.txt").write_text("\n".join(tokens) + "\n")
    extended = tmp_path / "extended.txt"
    extended.write_text("\n".join(tokens[:5] + ["w1-w2"] + tokens[6:] + ["##w3"]) + "\n")
    out = tmp_path / "out"
    proc = cli.run(MODULE, common_flags(
        data, out, init_checkpoint=base, vocab_file=extended, num_train_steps=2,
        save_checkpoints_steps=1, train_only_new_embeddings_steps=1, learning_rate=1e-2,
        distribution_strategy="mirrored", num_cpu_devices=2))  # the weights held on 2 replicas
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"2 new rows of embeddings/word_embeddings, mlm/output_bias for .*ckpt-6 "
                     r"\(1 appended, 1 in \[unusedN\] slots; vocab_size 128 -> 129\)",
                     proc.stderr), proc.stderr[-3000:]
    assert progress_steps(proc.stderr) == [1, 2]
    assert "strategy MirroredStrategy with 2 replica(s)" in proc.stderr
    assert json.loads((out / "bert_config.json").read_text())["vocab_size"] == 129
    assert (out / "vocab.txt").read_text() == extended.read_text()
    before = read_native(os.fspath(base)).weights
    step1 = read_native(os.fspath(out / "ckpt-1")).weights
    step2 = read_native(os.fspath(out / "ckpt-2")).weights
    for name, value in before.items():
        if name in ("embeddings/word_embeddings", "mlm/output_bias"):
            assert step1[name].shape[0] == 129
            held = [i for i in range(128) if i != 5]
            np.testing.assert_array_equal(step1[name][held], value[held], err_msg=name)
            assert not np.array_equal(step1[name][[5, 128]], step2[name][[5, 128]])
        else:
            np.testing.assert_array_equal(step1[name], value, err_msg=name)
        assert not np.array_equal(step2[name], step1[name]), name


def test_eval_only_with_another_model_config_is_a_one_line_error(
        cli, straight, data, tmp_path):
    # The checkpoint's variables have other shapes than --bert_config_file's model: evaluating
    # would read partly random weights (it was a ValueError traceback).
    shutil.copytree(straight[0], tmp_path / "run")
    (tmp_path / "run" / "eval_results.txt").unlink()
    other = write_bert_config(tmp_path / "other.json", hidden_size=48)
    proc = cli.run(MODULE, common_flags(data, tmp_path / "run", bert_config_file=other,
                                        do_train="false", do_eval="true"))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr[-3000:]
    assert re.fullmatch(rf"error: cannot evaluate .*run/ckpt-{STEPS}: it does not match this "
                        r"model \(shape mismatch: model/\S+ \[32, 64\] vs \[48, 64\], .*\); was "
                        r"it trained with this --bert_config_file\?", lines[0]), lines[0]
    assert not (tmp_path / "run" / "eval_results.txt").exists()


def test_eval_only_reads_a_hugging_face_directory_and_its_own_config(
        cli, straight, data, tmp_path):
    """--do_eval alone from a Hugging Face directory, without --bert_config_file (its
    config.json is the default): the figures of the same weights evaluated in bert_tf's
    format. (It was refused: eval read --init_checkpoint as a bert_tf checkpoint.) A
    directory without the masked-LM head is refused in one line: its eval would score a
    random head."""
    import dataclasses

    from bert_tf.interop import hf_checkpoint
    from bert_tf.interop.model_files import MLM_PREFIX
    from bert_tf.interop.native import read_native

    files = read_native(os.fspath(straight[0]))
    hf_checkpoint.write(files, os.fspath(tmp_path / "hf"))
    headless = dataclasses.replace(files, weights={
        k: v for k, v in files.weights.items() if not k.startswith(MLM_PREFIX)})
    hf_checkpoint.write(headless, os.fspath(tmp_path / "headless"))
    flags = dict(bert_config_file=None, do_train="false", do_eval="true")
    proc = cli.run(MODULE, common_flags(data, tmp_path / "out", **flags,
                                        init_checkpoint=tmp_path / "hf"))
    assert proc.returncode == 0, proc.stderr[-3000:]

    def results(path):
        lines = path.read_text().splitlines()
        return {k: float(v) for k, v in (line.split(" = ") for line in lines)
                if k != "global_step"}

    expected = results(straight[0] / "eval_results.txt")
    assert results(tmp_path / "out" / "eval_results.txt") == pytest.approx(expected, abs=1e-5)

    proc = cli.run(MODULE, common_flags(data, tmp_path / "out2", **flags,
                                        init_checkpoint=tmp_path / "headless"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert error_lines(proc.stderr) == [
        f"error: --init_checkpoint={tmp_path / 'headless'} lacks 5 weights of the model to "
        "evaluate (mlm/transform/kernel, mlm/transform/bias, mlm/transform/layer_norm/gamma, "
        "...): they would be scored at their random initial "
        "values (an encoder without its pretraining heads cannot be evaluated on masked LM; "
        "pass --no_nsp if only the NSP head is missing)"]
    # An HF config.json given as --bert_config_file names what to do instead.
    proc = cli.run(MODULE, common_flags(data, tmp_path / "out3", **dict(
        flags, bert_config_file=tmp_path / "hf" / "config.json")))
    assert error_lines(proc.stderr) == [
        f"error: {tmp_path / 'hf' / 'config.json'}: a Hugging Face config.json, not a "
        "bert_config.json: give its directory as --init_checkpoint without "
        "--bert_config_file (its config.json is read from there), or convert it with python "
        "-m bert_tf.convert_checkpoint"]


def test_max_train_minutes_stops_at_a_loop_boundary_saves_and_evaluates(cli, data, tmp_path):
    # A budget spent by the first timed call: the first call (it traces the step) counts
    # nothing by itself, the second counts both steps' time, so the run stops after step 2,
    # saves, then evaluates. (The budget's schedule: tests/test_budget_schedule.py.)
    proc = cli.run(MODULE, common_flags(data, tmp_path, max_train_minutes=1e-6,
                                        do_eval="true", log_every_n_steps=100,
                                        eval_input_file=None))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # No --eval_input_file: eval reads the training files, and says so once.
    assert proc.stderr.count("--do_eval reads training files (no --eval_input_file)") == 1
    assert "--max_train_minutes=1e-06 reached at step 2: saving a checkpoint" in proc.stderr
    assert progress_steps(proc.stderr) == [1, 2]  # the first step's line, then the stop
    assert tf.train.latest_checkpoint(os.fspath(tmp_path)).endswith("ckpt-2")
    assert "global_step = 2\n" in (tmp_path / "eval_results.txt").read_text()


@pytest.mark.parametrize("overrides, message", [
    ({"unknown_flag": "1"}, r"error: Unknown command line flag 'unknown_flag'"),
    ({"max_train_minutes": -1}, r"error: --max_train_minutes must be >= 0, got -1.0"),
    ({"eval_every_n_steps": 2, "do_train": "false", "do_eval": "true"},
     r"error: --eval_every_n_steps applies only with --do_train"),
    ({"divergence_threshold": 0.5},
     r"error: --divergence_threshold must be 0 \(off\) or above 1, got 0.5"),
    ({"do_train": "false"}, r"error: at least one of --do_train or --do_eval must be true"),
    ({"max_seq_length": 128},
     r"error: --max_seq_length=128 exceeds max_position_embeddings=64 of the bert_config"),
    ({"output_dir": None}, r"error: --output_dir is required"),
    ({"max_seq_length": 12}, r"error: input_ids has length 16 in .*train-0.tfrecord but "
                             r"--max_seq_length=12"),
    ({"input_file": "/no/such/file-*"}, r"error: --input_file: no file matches '/no/such/file-\*'"),
    ({"train_batch_size": 7, "distribution_strategy": "mirrored", "num_cpu_devices": 2},
     r"error: --train_batch_size=7 is not divisible by 2 replicas \(= 2\)"),
    ({"dynamic_masking": "true"}, r"error: --dynamic_masking needs --vocab_file: .*"),
    ({"dynamic_masking": "true", "vocab_file": "/no/such/vocab.txt"},
     r"error: vocab file not found: /no/such/vocab.txt"),
    ({"dynamic_masking": "true", "vocab_file": REPO_ROOT / "README.md", "max_ngram_size": 3},
     r"error: --max_ngram_size=3 is not supported with --dynamic_masking: .*"),
    ({"do_whole_word_mask": "true"},
     r"error: --do_whole_word_mask applies only with --dynamic_masking .*"),
    ({"train_only_new_embeddings_steps": 2},
     r"error: --train_only_new_embeddings_steps needs --init_checkpoint and an extended "
     r"--vocab_file"),
    ({"vocab_file": REPO_ROOT / "README.md", "masked_lm_prob": 0.2},
     r"error: --vocab_file and --masked_lm_prob apply only with --dynamic_masking \(the stored "
     r"masks are used as written\)"),
])
def test_bad_flags_give_one_line_errors(cli, data, tmp_path, overrides, message):
    overrides = {"output_dir": tmp_path / "out", **overrides}
    proc = cli.run(MODULE, common_flags(data, **overrides))
    assert proc.returncode == 2
    assert len(error_lines(proc.stderr)) == 1, proc.stderr[-2000:]
    assert re.fullmatch(message, error_lines(proc.stderr)[0]), error_lines(proc.stderr)
    assert "Traceback" not in proc.stderr


def write_vocab(path, size):
    """A learned-style vocabulary: the five specials first (so [MASK] is 4, not 103)."""
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(size - 5)]
    path.write_text("\n".join(words) + "\n")
    return path


def test_dynamic_masking_trains_with_the_vocab_s_ids(cli, straight, data, tmp_path):
    vocab = write_vocab(tmp_path / "vocab.txt", 128)
    proc = cli.run(MODULE, common_flags(data, tmp_path / "out", dynamic_masking="true",
                                        vocab_file=vocab, masked_lm_prob=0.3))
    assert proc.returncode == 0, proc.stderr[-3000:]
    losses = progress_losses(proc.stderr)
    assert len(losses) == STEPS and np.all(np.isfinite(losses))
    # Same seed, same records: only the fresh masks make the losses differ.
    assert not np.allclose(losses, progress_losses(straight[1].stderr))


def test_dynamic_masking_vocab_larger_than_the_model_is_a_one_line_error(cli, data, tmp_path):
    vocab = write_vocab(tmp_path / "vocab.txt", 200)
    proc = cli.run(MODULE, common_flags(data, tmp_path / "out", dynamic_masking="true",
                                        vocab_file=vocab))
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        "error: --vocab_file has 200 tokens, more than vocab_size=128 in --bert_config_file"]


def test_input_ids_beyond_the_config_vocab_are_a_one_line_error(cli, data, tmp_path):
    small_vocab = write_bert_config(tmp_path / "small_vocab.json", vocab_size=64)
    proc = cli.run(MODULE, common_flags(data, tmp_path / "out", bert_config_file=small_vocab))
    assert proc.returncode == 2
    assert re.fullmatch(r"error: input_ids in .*train-0.tfrecord has token id \d+, outside "
                        r"vocab_size of --bert_config_file=64 .*", error_lines(proc.stderr)[0])


def test_unwritable_output_dir_is_a_one_line_error(cli, data, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    proc = cli.run(MODULE, common_flags(data, blocker / "out"))
    assert proc.returncode == 2
    assert re.fullmatch(r"error: --output_dir=.*a_file/out: cannot create it \(.*\)",
                        error_lines(proc.stderr)[0])


@pytest.mark.parametrize("flagfile", ["base.flags", "base_phase2.flags", "demo.flags",
                                      "continue_pretraining.flags"])
def test_config_flagfiles_parse(flagfile):
    # Every flag in the file is known (else absl fails first); the run stops at the first
    # check instead of starting a job.
    proc = run_module(MODULE, [f"--flagfile=configs/{flagfile}", "--do_train=false",
                               "--do_eval=false"])
    assert error_lines(proc.stderr) == [
        "error: at least one of --do_train or --do_eval must be true"]


# ----------------------------------------------------------------- damaged and bad records


def damage_record(src, dst, index):
    """Copies the TFRecord file src to dst with record `index`'s payload damaged (its data
    checksum fails); returns (the frame's byte offset, records in the file)."""
    import struct

    data = bytearray(src.read_bytes())
    offset, starts = 0, []
    while offset < len(data):
        starts.append(offset)
        offset += 16 + struct.unpack("<Q", data[offset:offset + 8])[0]
    data[starts[index] + 12 + 5] ^= 0x5A
    dst.write_bytes(bytes(data))
    return starts[index], len(starts)


def test_a_damaged_record_stops_the_run_naming_the_file_and_record(cli, data, tmp_path):
    damaged = tmp_path / "damaged.tfrecord"
    offset, n = damage_record(data / "train-1.tfrecord", damaged, 30)
    proc = cli.run(MODULE, common_flags(data, tmp_path / "out", input_file=damaged))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert error_lines(proc.stderr) == [
        f"error: corrupted input TFRecord {damaged}: record 30 (counting from 0, at byte "
        f"{offset}): bad data checksum; {n - 30} record(s) from there to the end of the file "
        f"cannot be read (--skip_corrupt_records skips them and goes on)"]
    assert "Traceback" not in proc.stderr


def test_skip_corrupt_records_goes_on_and_reports_exact_counts(cli, data, tmp_path):
    damaged = tmp_path / "damaged.tfrecord"
    _, n = damage_record(data / "train-1.tfrecord", damaged, 30)
    eval_file = tmp_path / "eval.tfrecord"
    eval_offset, eval_n = damage_record(data / "eval.tfrecord", eval_file, 21)
    proc = cli.run(MODULE, common_flags(
        data, tmp_path / "out", input_file=f"{data / 'train-0.tfrecord'},{damaged}",
        eval_input_file=eval_file, do_eval="true", skip_corrupt_records="true"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Every progress line counts the records skipped so far: whole passes over the damage
    # (the shuffle buffer reads ahead many passes of this small input).
    counts = [int(c) for c in re.findall(r"\| skipped (\d+) corrupt records", proc.stderr)]
    assert len(counts) == STEPS and counts == sorted(counts)
    assert counts[0] > 0 and all(c % (n - 30) == 0 for c in counts)
    match = re.search(r"training input: skipped (\d+) corrupt input record\(s\): (.*): "
                      r"(\d+) record\(s\) from byte \d+ on \(bad data checksum\) x (\d+) pass",
                      proc.stderr)
    assert match and match.group(2) == str(damaged), proc.stderr[-3000:]
    assert int(match.group(3)) == n - 30
    assert int(match.group(1)) == (n - 30) * int(match.group(4)) >= counts[-1]
    # Eval reads its input once: exactly the records after the damage.
    assert (f"eval input: skipped {eval_n - 21} corrupt input record(s): {eval_file}: "
            f"{eval_n - 21} record(s) from byte {eval_offset} on (bad data checksum) x 1 "
            f"pass(es)") in proc.stderr
    assert "evaluated 3 batches (21 examples)" in proc.stderr


def test_a_masked_position_beyond_max_seq_length_in_a_later_record_is_one_line(
        cli, data, tmp_path):
    examples = synthetic_examples(16, seed=21, uneven_weights=False)
    examples["masked_lm_positions"][2, 0] = 16  # the first record is checked before training
    bad = tmp_path / "bad_positions.tfrecord"
    write_tfrecords(bad, examples)
    proc = cli.run(MODULE, common_flags(data, tmp_path / "out", input_file=bad))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert error_lines(proc.stderr) == [
        f"error: masked_lm_positions has position 16 outside [0, --max_seq_length=16) in "
        f"record 2 (counting from 0) of {bad}"]
    assert "Traceback" not in proc.stderr


# The masked batches the CLI's input config gives (the flags parsed as the CLI does).
_BATCH_SCRIPT = """
import dataclasses, json, sys
import numpy as np
from absl import flags
from bert_tf import run_pretraining
from bert_tf.data import input_pipeline

flags.FLAGS(["run_pretraining"] + sys.argv[1:])
config = run_pretraining.config_from_flags().train_input
batches = input_pipeline.make_pretraining_dataset(dataclasses.replace(config, batch_size=48))
out = {"continuation_ids": list(config.masking.continuation_ids), "rows": []}
for batch in batches.take(4):
    b = {k: v.numpy() for k, v in batch.items()}
    now = np.take_along_axis(b["input_ids"], b["masked_lm_positions"], axis=1)
    real = b["masked_lm_weights"] > 0
    out["rows"] += [[int(x), int(y)] for x, y in zip(now[real], b["masked_lm_ids"][real])]
print(json.dumps(out))
"""


@pytest.mark.parametrize("whole_word", [False, True])
def test_dynamic_masking_batches_use_the_vocab_file_s_ids(cli, data, tmp_path, whole_word):
    import json

    # 100 tokens (fewer than the model's 128, as a vocab may be), [MASK] = 4 (not Google's
    # 103), "##" pieces at 60..99.
    words = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(55)]
             + [f"##p{i}" for i in range(40)])
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(words) + "\n")
    args = common_flags(data, tmp_path / "out", dynamic_masking="true", vocab_file=vocab,
                        do_whole_word_mask=str(whole_word).lower(), masked_lm_prob=0.3)
    proc = cli.run_code(_BATCH_SCRIPT, args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["continuation_ids"] == (list(range(60, 100)) if whole_word else [])
    now, label = np.array(out["rows"]).T
    assert len(now) > 300
    # [MASK] is the vocab's 4 in ~80% of the predictions (Google's 103 would be 0%).
    assert 0.7 < np.mean(now == 4) < 0.9
    # The random replacements (neither [MASK] nor kept) come from the vocab's 100 ids, while
    # the records' own ids go up to the model's 128.
    replaced = now[(now != 4) & (now != label)]
    assert len(replaced) > 15 and replaced.max() < 100
    assert label.max() >= 100
