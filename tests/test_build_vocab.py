"""Tests for data_tools.build_vocab and data_tools.vocab.vocab_learner."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from _text_inputs import input_variants

from bert_tf.core import tokenization
from bert_tf.core.errors import UserError
from data_tools.vocab import vocab_learner
from data_tools.vocab.vocab_learner import VocabConfig, learn_vocab

GOOGLE_LAYOUT = (["[PAD]"] + [f"[unused{i}]" for i in range(99)]
                 + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"])


def run_cli(*args, cwd=None, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "data_tools.build_vocab", *args],
                          capture_output=True, text=True, cwd=cwd or root, env=env,
                          timeout=600)  # a hang fails this test, not the whole suite


def _articles(lines):
    docs, cur = [], []
    for line in lines:
        if line.strip():
            cur.append(line)
        elif cur:
            docs.append(cur)
            cur = []
    if cur:
        docs.append(cur)
    return docs


def test_golden_tiny_corpus():
    """Hand-worked merges: low x3, lower, lowest; alphabet e l o r s t w (ids 5..11).

    Pair counts: (l,##o)=5 and (##o,##w)=5 tie, and the smaller pair of ids wins -> "lo";
    then (lo,##w)=5 -> "low"; then (low,##e)=2 -> "lowe"; every other pair is seen once,
    under min_frequency=2, so the last two places are padding.
    """
    tokens, stats = learn_vocab(["low low low", "lower lowest"],
                                VocabConfig(vocab_size=24, num_unused=0, min_frequency=2))
    alphabet = list("elorstw")
    assert tokens == (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + alphabet
                      + ["##" + c for c in alphabet] + ["lo", "low", "lowe"]
                      + ["[unused0]", "[unused1]"])
    assert (stats.lines, stats.words, stats.alphabet, stats.learned, stats.padding) == (
        2, 5, 7, 17, 2)


def test_punctuation_needs_no_continuation_piece():
    tokens, _ = learn_vocab(["ab, ab. \u4e2d\u6587ab!"],
                            VocabConfig(vocab_size=40, num_unused=0, min_frequency=1))
    assert {",", ".", "!", "\u4e2d", "\u6587", "a", "b", "##a", "##b"} <= set(tokens)
    assert not {"##,", "##.", "##!", "##\u4e2d", "##\u6587"} & set(tokens)


def test_corpus_layout_and_round_trip(corpus_lines, tmp_path):
    """Learn 8,192 pieces from all but the last 12 articles; tokenize train and held-out."""
    docs = _articles(corpus_lines)
    train = [line for doc in docs[:-12] for line in doc]
    heldout = [line for doc in docs[-12:] for line in doc]
    tokens, stats = learn_vocab(iter(train), VocabConfig(vocab_size=8192))
    assert len(tokens) == 8192 and len(set(tokens)) == 8192
    assert tokens[:104] == GOOGLE_LAYOUT
    assert stats.padding == 0 and stats.learned == 8192 - 104
    # Every alphabet character is a piece, and a ## piece unless punctuation.
    singles = {t for t in tokens[104:] if len(t) == 1}
    assert len(singles) == stats.alphabet > 80
    for c in singles:
        assert (("##" + c) in tokens) == (not tokenization.is_punctuation(c)), c

    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    tok = tokenization.FullTokenizer(str(path), do_lower_case=True)
    assert [tok.vocab[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [
        0, 100, 101, 102, 103]
    train_ids = tok.encode_batch(train)
    n_train = sum(map(len, train_ids))
    assert sum(i == tok.unk_id for ids in train_ids for i in ids) == 0
    # Measured: 1.078 pieces per word on the training part (Google's 30k vocab: 1.067).
    assert n_train / stats.words < 1.10
    held_ids = tok.encode_batch(heldout)
    n_held = sum(map(len, held_ids))
    unk = sum(i == tok.unk_id for ids in held_ids for i in ids)
    # Measured: 1 [UNK] in 41k held-out tokens ("władysław": "ł" never occurs in training).
    assert unk / n_held < 1e-4


def test_limit_alphabet_drops_rare_characters():
    lines = ["abc abc cab"] * 5 + ["\u00e9t\u00e9"]
    tokens, stats = learn_vocab(lines, VocabConfig(vocab_size=30, num_unused=0,
                                                   do_lower_case=False, limit_alphabet=3))
    assert stats.alphabet == 3
    assert "\u00e9" not in tokens and "t" not in tokens
    tokens, stats = learn_vocab(lines, VocabConfig(vocab_size=30, num_unused=0,
                                                   do_lower_case=False, limit_alphabet=None))
    assert {"\u00e9", "##\u00e9", "t", "##t"} <= set(tokens)
    # Uncased: accents are stripped before learning, as FullTokenizer does.
    tokens, _ = learn_vocab(lines, VocabConfig(vocab_size=30, num_unused=0))
    assert "\u00e9" not in tokens and "e" in tokens


def test_config_errors():
    with pytest.raises(UserError, match=r"--vocab_size=104 is too small: the 104 special"):
        learn_vocab(["a"], VocabConfig(vocab_size=104))
    with pytest.raises(UserError, match=r"--vocab_size=110 is too small: 104 special tokens "
                                        r"and \d+ alphabet pieces"):
        learn_vocab(["the quick brown fox jumps"], VocabConfig(vocab_size=110))
    with pytest.raises(UserError, match="--num_unused=-1 must be >= 0"):
        vocab_learner.check_config(VocabConfig(vocab_size=1000, num_unused=-1))
    with pytest.raises(UserError, match="--min_frequency=0 must be >= 1"):
        vocab_learner.check_config(VocabConfig(vocab_size=1000, min_frequency=0))
    with pytest.raises(UserError, match="the input has no text"):
        learn_vocab(["", "  ", "\x00\u200b"], VocabConfig(vocab_size=1000))


# --- The command line -------------------------------------------------------------------

def test_cli_writes_deterministic_vocab(corpus_path, tmp_path):
    outs = []
    for i, seed in enumerate(("1", "2")):
        out = tmp_path / f"v{i}.txt"
        proc = run_cli(f"--input_file={corpus_path}", f"--vocab_file={out}",
                       "--vocab_size=2000", "--do_lower_case=true",
                       env_extra={"PYTHONHASHSEED": seed})
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.strip().splitlines()
        assert len(lines) == 1
        assert lines[0].startswith(f"wrote {out}: 2000 tokens (104 special, 1896 learned incl. a ")
        assert "from 17541 lines (513601 words) in 1 file(s), 0 warning(s)" in lines[0]
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert sorted(os.listdir(tmp_path)) == ["v0.txt", "v1.txt"]  # No temporary left over.
    tokens = outs[0].decode("utf-8").split("\n")
    assert tokens[-1] == "" and len(tokens) == 2001 and tokens[:104] == GOOGLE_LAYOUT


def test_cli_glob_list_and_bad_utf8(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"caf\xe9 au lait\n\nthe cafe\n")
    (tmp_path / "b.txt").write_bytes("the caf\u00e9\n".encode())
    out = tmp_path / "out" / "vocab.txt"
    out.parent.mkdir()
    proc = run_cli(f"--input_file={tmp_path}/a.*,{tmp_path}/b.txt", f"--vocab_file={out}",
                   "--vocab_size=200", "--do_lower_case=false", "--num_unused=10",
                   "--min_frequency=1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"warning: {tmp_path}/a.txt: 1 invalid UTF-8 byte sequence(s) replaced")
    assert "from 3 lines (7 words) in 2 file(s), 1 warning(s)" in proc.stdout
    tokens = out.read_text(encoding="utf-8").splitlines()
    assert tokens[11:15] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(tokens) == 200
    # The replacement character is deleted by the clean-up, so "caf" is a word of its own.
    tok = tokenization.FullTokenizer(str(out), do_lower_case=False)
    assert tok.tokenize("caf au lait, the caf\u00e9") == [
        "caf", "au", "lait", "[UNK]", "the", "caf\u00e9"]  # "," never occurs in the input.


@pytest.mark.parametrize("case", ["no_match", "empty", "too_small", "unwritable", "missing"])
def test_cli_errors(case, tmp_path, corpus_path):
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n\n", encoding="utf-8")
    out = tmp_path / "v.txt"
    args = {
        "no_match": [f"--input_file={tmp_path}/nothing-*.txt", f"--vocab_file={out}",
                     "--vocab_size=500"],
        "empty": [f"--input_file={blank}", f"--vocab_file={out}", "--vocab_size=500"],
        "too_small": [f"--input_file={corpus_path}", f"--vocab_file={out}", "--vocab_size=150"],
        "unwritable": [f"--input_file={corpus_path}", f"--vocab_file={tmp_path}/no/dir/v.txt",
                       "--vocab_size=500"],
        "missing": [f"--input_file={corpus_path}", "--vocab_size=500"],
    }[case]
    expected = {
        "no_match": f"error: --input_file: no file matches '{tmp_path}/nothing-*.txt'",
        "empty": "error: the input has no text (every line is blank or only control "
                 "characters)",
        "too_small": "error: --vocab_size=150 is too small: 104 special tokens and ",
        "unwritable": f"error: cannot write {tmp_path}/no/dir/v.txt: No such file or directory",
        "missing": "error: --vocab_file is required",
    }[case]
    proc = run_cli(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["blank.txt"]  # Nothing written, no temporary.


def test_compressed_and_bom_inputs_give_the_same_vocabulary(tmp_path, corpus_lines):
    outs = {}
    for name, data in input_variants(("\n".join(corpus_lines[:800]) + "\n").encode()).items():
        (tmp_path / name).write_bytes(data)
        out = tmp_path / f"vocab-{name}"
        proc = run_cli(f"--input_file={tmp_path / name}", f"--vocab_file={out}",
                       "--vocab_size=600", "--num_unused=5")
        assert proc.returncode == 0, proc.stderr
        lines = sum(bool(x.strip()) for x in corpus_lines[:800])
        assert f"from {lines} lines" in proc.stdout and "0 warning(s)" in proc.stdout
        outs[name] = out.read_bytes()
    assert len(set(outs.values())) == 1 and len(outs["plain.txt"].splitlines()) == 600


def test_cli_same_vocabulary_for_any_worker_count(tmp_path, corpus_path):
    """1, 2 and 3 workers over splits of 8, 0.3 and 0.2 MB: byte-identical vocabularies."""
    outs = []
    for workers, split in (("1", "8"), ("2", "0.3"), ("3", "0.2")):
        out = tmp_path / f"v{workers}.txt"
        proc = run_cli(f"--input_file={corpus_path}", f"--vocab_file={out}",
                       "--vocab_size=2000", f"--num_workers={workers}", f"--split_mb={split}")
        assert proc.returncode == 0, proc.stderr
        assert "from 17541 lines (513601 words) in 1 file(s), 0 warning(s)" in proc.stdout
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]
    assert len(outs[0].splitlines()) == 2000


def test_cli_sample_is_seeded_and_capped_counts_are_reported(tmp_path, corpus_path):
    outs = {}
    for name, extra in (("a", ["--num_workers=1", "--random_seed=3"]),
                        ("b", ["--num_workers=2", "--random_seed=3", "--split_mb=0.2"]),
                        ("c", ["--num_workers=2", "--random_seed=4"])):
        out = tmp_path / f"v{name}.txt"
        proc = run_cli(f"--input_file={corpus_path}", f"--vocab_file={out}",
                       "--vocab_size=1000", "--sample_mb=0.5", "--max_words=5000", *extra)
        assert proc.returncode == 0, proc.stderr
        # 8 blocks of 64 KiB, plus the ends of the lines that cross a block's end.
        sample = float(proc.stdout.split("(a sample of ")[1].split(" MB)")[0])
        assert 0.50 <= sample <= 0.54, proc.stdout
        assert ", learned from the 5000 most frequent of " in proc.stdout
        outs[name] = out.read_bytes()
    assert outs["a"] == outs["b"] != outs["c"]


def test_cli_rejects_a_sample_of_compressed_input(tmp_path):
    import gzip

    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(b"the cat\n" * 100))
    proc = run_cli(f"--input_file={tmp_path}/a.txt.gz", f"--vocab_file={tmp_path}/v.txt",
                   "--vocab_size=500", "--sample_mb=1")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --sample_mb reads blocks at random offsets, which a compressed file does not "
        f"allow: decompress {tmp_path}/a.txt.gz first"]
    assert sorted(os.listdir(tmp_path)) == ["a.txt.gz"]


def test_beam_is_imported_only_with_the_flag_and_said_when_missing(tmp_path, repo_root):
    # As if Beam were not installed: importing it raises ImportError.
    code = ("import sys; sys.modules['apache_beam'] = None\n"
            "from data_tools import build_vocab as m\n"
            "assert 'data_tools.vocab.beam_vocab' not in sys.modules\n"
            "m.console_main()\n")
    (tmp_path / "in.txt").write_text("One sentence.\n")
    env = dict(os.environ, PYTHONPATH=str(repo_root))
    proc = subprocess.run(
        [sys.executable, "-c", code, f"--input_file={tmp_path / 'in.txt'}",
         f"--vocab_file={tmp_path / 'v.txt'}", "--vocab_size=500",
         "--beam_pipeline_options=--runner=DirectRunner"],
        cwd=repo_root, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --beam_pipeline_options needs Apache Beam: pip install 'bert_tf[beam]' (or "
        "'apache-beam>=2.77')"]
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]


def test_sigterm_while_counts_are_spilled_leaves_nothing(tmp_path, corpus_path):
    # A scheduler stops the job while sorted runs of counts are on disk: the job must answer
    # like Ctrl-C (exit 130, one line) and remove its runs and temporary vocabulary.
    import signal
    import time

    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(corpus_path.read_bytes() * 8)
    out, spill = tmp_path / "out", tmp_path / "spill"
    out.mkdir()
    spill.mkdir()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "data_tools.build_vocab", f"--input_file={corpus}",
         f"--vocab_file={out}/vocab.txt", "--vocab_size=2000", "--max_words=300",
         "--num_workers=1", "--split_mb=0.05", f"--temp_dir={spill}"],
        cwd=root, env=dict(os.environ, PYTHONPATH=root), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not any(files for _, _, files in os.walk(spill)):  # a first run is written
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "error: interrupted" in stderr, stderr[-2000:]
    assert "Traceback" not in stderr
    assert os.listdir(out) == [] and os.listdir(spill) == []
