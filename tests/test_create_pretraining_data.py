"""End-to-end tests of `python -m data_tools.create_pretraining_data` (subprocess runs):
determinism across worker counts, records readable with the original feature spec, gzip and
v2 names, and every kind of bad input (one-line error, exit code, nothing partial left)."""

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from _text_inputs import input_variants

from bert_tf.core import schema

SEQ, PRED = 128, 20


def _run(args, repo_root, timeout=300, **popen):
    env = dict(os.environ, PYTHONPATH=str(repo_root), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", "data_tools.create_pretraining_data"] + args,
                          cwd=repo_root, env=env, capture_output=True, text=True,
                          timeout=timeout, **popen)


def _error_line(proc):
    """The single `error: ...` line; asserts there is no traceback."""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture()
def small_corpus(tmp_path, corpus_lines):
    path = tmp_path / "small.txt"
    path.write_text("\n".join(corpus_lines[:3000]) + "\n", encoding="utf-8")
    return path


def _base(inp, out, vocab, *extra):
    return [f"--input_file={inp}", f"--output_file={out}", f"--vocab_file={vocab}",
            "--dupe_factor=2", "--progress_seconds=0"] + list(extra)


def test_byte_identical_for_one_and_two_workers_and_records_are_consistent(
        tmp_path, small_corpus, google_vocab_path, repo_root):
    outputs = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}" / "train-{shard}-of-{num_shards}.tfrecord"
        proc = _run(_base(small_corpus, out, google_vocab_path, f"--num_workers={workers}",
                          "--num_output_shards=2", "--chunk_mb=0.1"), repo_root)
        assert proc.returncode == 0, proc.stderr
        assert "wrote " in proc.stderr and "*** Example ***" in proc.stderr
        names = sorted(os.listdir(tmp_path / f"w{workers}"))
        assert names == ["train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
        outputs[workers] = [(tmp_path / f"w{workers}" / n).read_bytes() for n in names]
    assert outputs[1] == outputs[2]
    _check_records([str(tmp_path / "w2" / n) for n in sorted(os.listdir(tmp_path / "w2"))])


def test_compressed_and_bom_inputs_give_the_same_records(tmp_path, corpus_lines,
                                                         google_vocab_path, repo_root):
    outs = {}
    for name, data in input_variants(("\n".join(corpus_lines[:1500]) + "\n").encode()).items():
        (tmp_path / name).write_bytes(data)
        out = tmp_path / f"{name}.tfrecord"
        # Splits of 30 KB: a plain file is read in several, a compressed one in one.
        proc = _run(_base(tmp_path / name, out, google_vocab_path, "--num_workers=2",
                          "--log_examples=0", "--chunk_mb=0.03"), repo_root)
        assert proc.returncode == 0, proc.stderr
        outs[name] = out.read_bytes()
    assert len(set(outs.values())) == 1 and _check_records_count(tmp_path / "plain.txt.tfrecord")


def _check_records(paths, compression=None, v2=False):
    spec = schema.parsing_spec(SEQ, PRED, use_v2_feature_names=v2)
    ids_name = schema.stored_name(schema.INPUT_IDS, v2)
    seg_name = schema.stored_name(schema.SEGMENT_IDS, v2)
    total = 0
    ds = tf.data.TFRecordDataset(paths, compression_type=compression)
    for batch in ds.batch(1024).map(lambda x: tf.io.parse_example(x, spec)):
        b = {k: v.numpy() for k, v in batch.items()}
        n = b["input_mask"].sum(1)
        total += len(n)
        pos = np.arange(SEQ)[None, :]
        assert (b["input_mask"] == (pos < n[:, None])).all()  # a prefix of ones
        ids, seg = b[ids_name], b[seg_name]
        assert (ids[:, 0] == 101).all() and (ids[pos >= n[:, None]] == 0).all()
        assert (ids[np.arange(len(n)), n - 1] == 102).all()
        # Segment ids: 0...0 1...1 then 0 padding (non-decreasing inside the real tokens).
        assert (np.diff(np.where(pos < n[:, None], seg, 1), axis=1) >= 0).all()
        assert (seg[pos >= n[:, None]] == 0).all()
        w = b["masked_lm_weights"]
        k = w.sum(1).astype(int)
        assert (w == (np.arange(PRED)[None, :] < k[:, None])).all()
        p = b["masked_lm_positions"]
        real = np.arange(PRED)[None, :] < k[:, None]
        assert (p[real] > 0).all() and (np.where(real, p, 0) < n[:, None]).all()
        # Sorted and unique: strictly increasing, padding slots replaced by larger values.
        assert (np.diff(np.where(real, p, SEQ + np.arange(PRED)), axis=1) > 0).all()
        assert set(np.unique(b["next_sentence_labels"])) <= {0, 1}
    assert total > 500
    return total


def test_local_run_never_imports_tensorflow(tmp_path, small_corpus, google_vocab_path,
                                            repo_root):
    # TensorFlow costs ~2.6 s and ~600 MB per process: local files must not need it.
    code = ("import runpy, sys\n"
            "sys.argv = ['cpd'] + sys.argv[1:]\n"
            "try:\n"
            "    runpy.run_module('data_tools.create_pretraining_data', run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            "print('tensorflow' in sys.modules)\n")
    env = dict(os.environ, PYTHONPATH=str(repo_root))
    proc = subprocess.run([sys.executable, "-c", code] + _base(
        small_corpus, tmp_path / "o.tfrecord", google_vocab_path, "--num_workers=2",
        "--output_compression=gzip"), cwd=repo_root, env=env, capture_output=True, text=True,
        timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_gzip_and_v2_feature_names(tmp_path, small_corpus, google_vocab_path, repo_root):
    out = tmp_path / "out.tfrecord.gz"
    proc = _run(_base(small_corpus, out, google_vocab_path, "--output_compression=gzip",
                      "--use_v2_feature_names", "--num_workers=1"), repo_root)
    assert proc.returncode == 0, proc.stderr
    assert "input_word_ids:" in proc.stderr and "input_type_ids:" in proc.stderr
    _check_records([str(out)], compression="GZIP", v2=True)


def test_mlm_only_whole_word_ngram_flags_and_progress(tmp_path, small_corpus,
                                                      google_vocab_path, repo_root):
    out = tmp_path / "out.tfrecord"
    proc = _run(_base(small_corpus, out, google_vocab_path, "--no_nsp", "--do_whole_word_mask",
                      "--whole_word_mask_mode=original", "--max_ngram_size=3",
                      "--max_predictions_per_seq=126", "--num_workers=2", "--chunk_mb=0.05",
                      "--progress_seconds=0.000001"), repo_root)
    assert proc.returncode == 0, proc.stderr
    assert "progress: " in proc.stderr and "ETA" in proc.stderr and "IsNext" not in proc.stderr
    spec = schema.parsing_spec(SEQ, 126)
    for raw in tf.data.TFRecordDataset(str(out)).take(300):
        ex = {k: v.numpy() for k, v in tf.io.parse_single_example(raw, spec).items()}
        n = ex["input_mask"].sum()
        assert (ex["segment_ids"] == 0).all() and ex["next_sentence_labels"][0] == 0
        assert ex["input_ids"][0] == 101 and ex["input_ids"][n - 1] == 102
        assert 1 <= ex["masked_lm_weights"].sum() <= round(0.15 * n)


def test_bad_utf8_empty_file_and_one_sentence_documents(tmp_path, google_vocab_path, repo_root):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"The first sentence \xff\xfe is here .\nAnother one .\n\nSolo sentence .\n\n"
                    b"Third document \xc3 only .\n")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    out = tmp_path / "out.tfrecord"
    proc = _run(_base(f"{bad},{empty}", out, google_vocab_path, "--dupe_factor=3",
                      "--num_workers=1"), repo_root)
    assert proc.returncode == 0, proc.stderr
    # \xff, \xfe and the truncated \xc3 are three invalid sequences.
    assert f"{bad}: 3 invalid UTF-8 byte sequence(s) replaced" in proc.stderr
    assert f"{empty}: empty file, skipped" in proc.stderr
    assert "2 warning(s)" in proc.stderr
    assert _check_records_count(out) > 0


def _check_records_count(path):
    return sum(1 for _ in tf.data.TFRecordDataset(str(path)))


def test_no_document_at_all_is_fatal(tmp_path, google_vocab_path, repo_root):
    blank = tmp_path / "blank.txt"
    blank.write_bytes(b"\n   \n\t\n\x00\x01\n")  # the last line tokenizes to nothing
    out = tmp_path / "out" / "x.tfrecord"
    proc = _run(_base(blank, out, google_vocab_path, "--num_workers=1"), repo_root)
    assert proc.returncode == 2
    assert _error_line(proc).startswith("error: no text to write")
    assert os.listdir(tmp_path / "out") == []


def test_ten_megabyte_line(tmp_path, corpus_lines, google_vocab_path, repo_root):
    words = " ".join(corpus_lines[:400]).split()
    line = " ".join(words * (10_000_000 // (len(" ".join(words)) + 1) + 1))[:10_000_000]
    path = tmp_path / "long.txt"
    path.write_text("\n".join(corpus_lines[:40]) + "\n\n" + line + "\n\n"
                    + "\n".join(corpus_lines[40:80]) + "\n", encoding="utf-8")
    out = tmp_path / "out.tfrecord"
    proc = _run(_base(path, out, google_vocab_path, "--num_workers=2"), repo_root, timeout=240)
    assert proc.returncode == 0, proc.stderr
    # (Its peak memory, ~2.2M tokens in one line, is benchmarks/data/
    # bench_create_pretraining_data.py's to print: --long_line_mb.)
    assert _check_records_count(out) > 10
    # The loss is said, once, with the numbers and where to split the text.
    from bert_tf.core.tokenization import FullTokenizer

    tokenizer = FullTokenizer(google_vocab_path, True)
    long_short_lines = sum(len(tokenizer.tokenize(x)) > 125 for x in corpus_lines[:80])
    found = re.findall(r"(\d+) line\(s\) have more than 125 tokens \(what --max_seq_length=128 "
                       r"leaves for text\): truncation cuts at least (\d+) of the corpus' "
                       r"(\d+) tokens \(([\d.]+)%\) from every dupe\. Is the text split into "
                       r"sentences, one per line\? python -m data_tools.prepare_corpus",
                       proc.stderr)
    assert len(found) == 1, proc.stderr[-3000:]
    lines, lost, total, share = found[0]
    assert int(lines) == 1 + long_short_lines
    assert int(lost) > 2_000_000 and float(share) > 99.0 and int(total) > int(lost)
    assert " 1 warning(s)" in proc.stderr


def test_no_truncation_warning_when_every_line_fits(tmp_path, corpus_lines, google_vocab_path,
                                                    repo_root):
    tokenizer_lines = corpus_lines[:200]
    path = tmp_path / "short.txt"
    path.write_text("\n".join(x for x in tokenizer_lines if len(x) < 300) + "\n",
                    encoding="utf-8")
    proc = _run(_base(path, tmp_path / "out.tfrecord", google_vocab_path, "--num_workers=1"),
                repo_root)
    assert proc.returncode == 0, proc.stderr
    assert "truncation cuts" not in proc.stderr and " 0 warning(s)" in proc.stderr


def _vocab_variant(tmp_path, google_vocab_path, name, transform):
    lines = open(google_vocab_path, encoding="utf-8").read().split("\n")
    path = tmp_path / name
    path.write_bytes(transform(lines))
    return path


@pytest.mark.parametrize("case", ["missing", "not_utf8", "no_mask", "empty"])
def test_bad_vocab(case, tmp_path, small_corpus, google_vocab_path, repo_root):
    transforms = {
        "not_utf8": lambda lines: "\n".join(lines).encode() + b"\n\xff\xfe\n",
        "no_mask": lambda lines: "\n".join(x for x in lines if x != "[MASK]").encode(),
        "empty": lambda lines: b"",
    }
    vocab = (tmp_path / "nope.txt" if case == "missing"
             else _vocab_variant(tmp_path, google_vocab_path, "v.txt", transforms[case]))
    out = tmp_path / "o" / "out.tfrecord"
    proc = _run(_base(small_corpus, out, vocab), repo_root)
    assert proc.returncode == 2
    assert _error_line(proc) == {
        "missing": f"error: vocab file not found: {vocab}",
        # The bundled vocab's 30,522 lines, the empty line its final newline leaves, then
        # the bad bytes.
        "not_utf8": f"error: vocab file {vocab} is not UTF-8 (line 30524)",
        "no_mask": f"error: vocab file {vocab} lacks special token(s) [MASK]",
        "empty": f"error: vocab file {vocab} is empty",
    }[case]
    assert not (tmp_path / "o").exists() or os.listdir(tmp_path / "o") == []


@pytest.mark.parametrize("flags,message", [
    (["--max_predictions_per_seq=126"], "--max_predictions_per_seq=126: must be in [1, 125]"),
    (["--max_seq_length=4"], "--max_seq_length=4: must be >= 5"),
    (["--masked_lm_prob=0"], "--masked_lm_prob=0.0: must be in (0, 1]"),
    (["--masked_lm_prob=1.5"], "--masked_lm_prob=1.5"),
    (["--short_seq_prob=-0.1"], "--short_seq_prob=-0.1"),
    (["--dupe_factor=0"], "--dupe_factor=0: must be >= 1"),
    (["--whole_word_mask_mode=perword"], "--whole_word_mask_mode='perword'"),
    (["--max_ngram_size=0"], "--max_ngram_size=0"),
    (["--output_compression=zip"], "--output_compression='zip'"),
    (["--num_workers=0"], "--num_workers=0"),
    (["--num_output_shards=3"], "--num_output_shards=3 but --output_file lists 1 file(s)"),
])
def test_impossible_flags(flags, message, tmp_path, small_corpus, google_vocab_path, repo_root):
    proc = _run(_base(small_corpus, tmp_path / "out.tfrecord", google_vocab_path, *flags),
                repo_root)
    assert proc.returncode == 2
    assert message in _error_line(proc)
    assert os.listdir(tmp_path) == ["small.txt"]


def test_missing_input_and_unwritable_output(tmp_path, small_corpus, google_vocab_path,
                                             repo_root):
    proc = _run(_base(tmp_path / "nothing-*.txt", tmp_path / "o.tfrecord", google_vocab_path),
                repo_root)
    assert proc.returncode == 2 and "no file matches" in _error_line(proc)
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    proc = _run(_base(small_corpus, blocker / "sub" / "o.tfrecord", google_vocab_path),
                repo_root)
    assert proc.returncode == 2
    assert _error_line(proc).startswith(f"error: cannot create output directory {blocker}")
    proc = _run(["--input_file=x"], repo_root)
    assert proc.returncode == 2 and "--output_file is required" in _error_line(proc)


def _session_processes(sid):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":  # field 6 (session) of stat
                found.append(int(pid))
    return found


def _start_long_run(tmp_path, corpus_path, google_vocab_path, repo_root, ignore_sigint=False,
                    final_pass=False):
    big = tmp_path / "big.txt"
    big.write_bytes(corpus_path.read_bytes().rstrip(b"\n") * 1 + b"\n\n")
    big.write_bytes(big.read_bytes() * (1 if final_pass else 8))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = _base(big, out_dir / "t-{shard}.tfrecord", google_vocab_path, "--dupe_factor=10",
                 "--num_output_shards=2", "--num_workers=2",
                 "--shuffle_memory_mb=1")
    env = dict(os.environ, PYTHONPATH=str(repo_root), TF_CPP_MIN_LOG_LEVEL="2")
    # As a shell without job control starts `job &`: SIGINT ignored, inherited by the job.
    # Otherwise SIGINT's usual disposition, whatever this test process inherited.
    disposition = signal.SIG_IGN if ignore_sigint else signal.SIG_DFL
    proc = subprocess.Popen([sys.executable, "-m", "data_tools.create_pretraining_data"] + args,
                            cwd=repo_root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, disposition))
    deadline = time.monotonic() + 60
    # Wait until the shuffle spills to its temporary directory beside the outputs.
    while not any(n.startswith(".bert_tf-shuffle-") for n in os.listdir(out_dir)):
        assert proc.poll() is None and time.monotonic() < deadline, "run ended too early"
        time.sleep(0.05)
    if not final_pass:
        time.sleep(0.3)  # workers are busy now
        return proc, out_dir
    # The final pass removes each bucket's files once read: wait for their number to fall.
    spill = next(out_dir / n for n in os.listdir(out_dir) if n.startswith(".bert_tf-shuffle-"))
    most = 0
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, "run ended too early"
        count = len(os.listdir(spill))
        if count < most:
            return proc, out_dir
        most = max(most, count)
        time.sleep(0.01)


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


@pytest.mark.parametrize("how", ["sigint", "sigint_started_ignored", "sigterm", "kill_worker",
                                 "sigint_in_final_pass"])
def test_interrupt_or_crash_leaves_nothing(how, tmp_path, corpus_path, google_vocab_path,
                                           repo_root):
    proc, out_dir = _start_long_run(tmp_path, corpus_path, google_vocab_path, repo_root,
                                    ignore_sigint=how == "sigint_started_ignored",
                                    final_pass=how == "sigint_in_final_pass")
    try:
        if how != "kill_worker":
            os.kill(proc.pid, signal.SIGTERM if how == "sigterm" else signal.SIGINT)
        else:
            workers = _children(proc.pid)
            assert workers, "no worker process found"
            os.kill(workers[0], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if how != "kill_worker":
        assert proc.returncode == 130 and "error: interrupted" in stderr, stderr[-2000:]
    else:
        assert proc.returncode == 2 and "error: a worker process died" in stderr
    assert "Traceback" not in stderr
    assert os.listdir(out_dir) == []  # no shard, no temporary file or spill directory
    deadline = time.monotonic() + 10
    while _session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _session_processes(proc.pid) == []  # the workers are gone too
