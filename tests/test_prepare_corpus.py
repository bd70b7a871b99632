"""End-to-end tests of `python -m data_tools.prepare_corpus` (subprocess runs): WikiExtractor
--json output to BERT's input format and on through build_vocab and create_pretraining_data,
the same bytes for one and two workers, and every kind of bad input (one-line error or a
counted warning, exit code, nothing partial left)."""

import bz2
import json
import os
import signal
import subprocess
import sys
import time

import pytest


def _run(module, args, repo_root, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(repo_root), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", f"data_tools.{module}"] + list(args),
                          cwd=repo_root, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _prepare(args, repo_root):
    args = list(args)
    if not any(a.startswith("--progress_seconds") for a in args):
        args.append("--progress_seconds=0")
    return _run("prepare_corpus", args, repo_root)


def _error_line(proc):
    """The single `error: ...` line; asserts there is no traceback."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def _wikiextractor_json(corpus_lines, root, max_lines=2000):
    """The bundled corpus as WikiExtractor --json writes it: one article per line, with id,
    revid, url, title and text (paragraphs separated by newlines), in files root/AA/wiki_00
    (plain) and root/AB/wiki_00.bz2 (as with --compress)."""
    articles, sentences = [], []
    for line in corpus_lines[:max_lines] + [""]:
        if line.strip():
            sentences.append(line)
        elif sentences:
            paragraphs = [" ".join(sentences[i:i + 5]) for i in range(0, len(sentences), 5)]
            n = len(articles)
            articles.append({"id": str(n + 12), "revid": "", "title": f"Article {n}",
                             "url": f"https://en.wikipedia.org/wiki?curid={n + 12}",
                             "text": "\n".join(paragraphs)})
            sentences = []
    half = len(articles) // 2
    lines = [json.dumps(a, ensure_ascii=False) + "\n" for a in articles]
    (root / "AA").mkdir(parents=True)
    (root / "AA" / "wiki_00").write_text("".join(lines[:half]), encoding="utf-8")
    (root / "AB").mkdir()
    (root / "AB" / "wiki_00.bz2").write_bytes(bz2.compress("".join(lines[half:]).encode()))
    return articles


def test_wikiextractor_json_to_pretraining_data_same_bytes_for_1_and_2_workers(
        tmp_path, corpus_lines, repo_root):
    src = tmp_path / "text"
    articles = _wikiextractor_json(corpus_lines, src)
    outputs = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}" / "corpus-{shard}-of-{num_shards}.txt"
        proc = _prepare([f"--input_file={src}/*/wiki_*", f"--output_file={out}",
                         "--input_format=jsonl", "--num_output_shards=2",
                         f"--num_workers={workers}", "--chunk_mb=0.05", "--dedup",
                         "--progress_seconds=0.000001"], repo_root)
        assert proc.returncode == 0, proc.stderr
        assert "progress: " in proc.stderr and "% of input" in proc.stderr
        names = sorted(os.listdir(tmp_path / f"w{workers}"))
        assert names == ["corpus-00000-of-00002.txt", "corpus-00001-of-00002.txt"]
        outputs[workers] = [(tmp_path / f"w{workers}" / n).read_bytes() for n in names]
    assert outputs[1] == outputs[2]
    assert f"wrote {len(articles)} documents" in proc.stderr
    assert "dropped 0 empty, 0 short, 0 duplicate" in proc.stderr and "MB/s" in proc.stderr
    # Article k went to shard k % 2; its first paragraph's first sentence opens it.
    first_docs = [text.decode().split("\n\n")[0] for text in outputs[1]]
    for shard in (0, 1):
        assert first_docs[shard].split("\n")[0] == corpus_lines[
            [i for i, line in enumerate(corpus_lines) if line.strip()
             and (i == 0 or not corpus_lines[i - 1].strip())][shard]]
    # The output feeds the rest of the pipeline.
    corpus_glob = str(tmp_path / "w2" / "corpus-*.txt")
    vocab = tmp_path / "vocab.txt"
    proc = _run("build_vocab", [f"--input_file={corpus_glob}", f"--vocab_file={vocab}",
                                "--vocab_size=2000"], repo_root)
    assert proc.returncode == 0, proc.stderr
    records = tmp_path / "train.tfrecord"
    proc = _run("create_pretraining_data", [
        f"--input_file={corpus_glob}", f"--output_file={records}", f"--vocab_file={vocab}",
        "--dupe_factor=1", "--max_seq_length=64", "--max_predictions_per_seq=10",
        "--num_workers=1", "--progress_seconds=0"], repo_root)
    assert proc.returncode == 0, proc.stderr
    assert records.stat().st_size > 100_000


def test_plain_text_languages_and_filters(tmp_path, repo_root):
    src = tmp_path / "abstracts.txt"
    src.write_text("Это произошло в 1990 г. в Москве. Никто не знал.\n"
                   "Коротко.\n"
                   "Это произошло в 1990 г. в Москве.   Никто не знал.\n"
                   "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    proc = _prepare([f"--input_file={src}", f"--output_file={out}", "--document_per=line",
                     "--language=ru", "--min_sentences=2", "--dedup"], repo_root)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text(encoding="utf-8") == ("Это произошло в 1990 г. в Москве.\n"
                                               "Никто не знал.\n")
    assert "wrote 1 documents, 2 sentences" in proc.stderr
    assert "dropped 0 empty, 1 short, 1 duplicate" in proc.stderr


def test_broken_json_lines_are_counted_warnings(tmp_path, repo_root):
    src = tmp_path / "crawl.jsonl"
    src.write_text('{"text": "Fine one. Two."}\n{"text": "cut off\n{"text": "Fine again."}\n'
                   'not json at all\n', encoding="utf-8")
    out = tmp_path / "out.txt"
    proc = _prepare([f"--input_file={src}", f"--output_file={out}", "--input_format=jsonl"],
                    repo_root)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "Fine one.\nTwo.\n\nFine again.\n"
    assert f"{src}:2: broken JSON line skipped (" in proc.stderr
    assert f"{src}:4: broken JSON line skipped (" in proc.stderr
    assert "2 broken JSON line(s) skipped" in proc.stderr and "error:" not in proc.stderr


def test_non_utf8_bytes_are_replaced_and_counted(tmp_path, repo_root):
    src = tmp_path / "latin1.txt"
    src.write_bytes("Café au lait. Très bon.\n".encode("latin-1"))
    out = tmp_path / "out.txt"
    proc = _prepare([f"--input_file={src}", f"--output_file={out}"], repo_root)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text(encoding="utf-8") == "Caf\ufffd au lait.\nTr\ufffds bon.\n"
    assert f"{src}: 2 invalid UTF-8 byte sequence(s) replaced by U+FFFD" in proc.stderr
    assert "1 warning(s)" in proc.stderr


@pytest.mark.parametrize("content, extra, message", [
    ('{"text": "broken\n[1, 2\n', ["--input_format=jsonl"],
     r"error: every JSON line of the 1 input file\(s\) is broken \(2 line\(s\); first: "
     r".*in\.txt:1: broken JSON line skipped \("),
    ('{"id": 1, "title": "T", "body": "Text."}\n', ["--input_format=jsonl"],
     r"error: --text_field='text': no such field in .*in\.txt:1 \(its fields: id, title, "
     r"body\)$"),
    ("", [], r"error: no text in the 1 input file\(s\): empty or blank lines only$"),
    ("\n \n\t\n", ["--document_per=line"],
     r"error: no text in the 1 input file\(s\): empty or blank lines only$"),
    ("One sentence.\n\nAnother one.\n", ["--min_sentences=2"],
     r"error: no document left to write: of 2 read, 0 empty, 2 shorter than "
     r"--min_sentences=2 or --min_chars=0, 0 duplicates$"),
    ("Text.\n", ["--language=English"], r"error: --language='English': expected a language"),
    ("Text.\n", ["--input_format=csv"], r"error: flag --input_format=csv: value should be"),
    ("Text.\n", ["--min_chars=-5"], r"error: --min_chars=-5: must be >= 0$"),
    ("Text.\n", ["--num_output_shards=0", "--output_file={out}-{shard}"],
     r"error: --num_output_shards=0: must be >= 1$"),
    ("Text.\n", ["--heldout_every=50"],
     r"error: --heldout_file and --heldout_every go together"),
    ("Text.\n", ["--heldout_every=1", "--heldout_file={out}.h"],
     r"error: --heldout_every=1: must be 0 \(none\) or >= 2"),
    ("Text.\n", ["--heldout_every=5", "--heldout_file={in}"],
     r"error: --heldout_file would overwrite an input file: .*in\.txt$"),
])
def test_bad_input_is_one_error_line_and_no_output(tmp_path, repo_root, content, extra,
                                                  message):
    import re

    src = tmp_path / "in.txt"
    src.write_text(content, encoding="utf-8")
    out = tmp_path / "out.txt"
    args = [f"--input_file={src}", f"--output_file={out}"]
    args += [a.replace("{out}", str(out)).replace("{in}", str(src)) for a in extra]
    proc = _prepare(args, repo_root)
    assert re.match(message, _error_line(proc)), proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]  # nothing written, no temp file


def test_missing_input_and_input_as_output(tmp_path, repo_root):
    proc = _prepare([f"--input_file={tmp_path}/none-*.txt", f"--output_file={tmp_path}/o"],
                    repo_root)
    assert _error_line(proc) == f"error: --input_file: no file matches '{tmp_path}/none-*.txt'"
    src = tmp_path / "in.txt"
    src.write_text("Text.\n")
    proc = _prepare([f"--input_file={src}", f"--output_file={src}"], repo_root)
    assert _error_line(proc) == f"error: --output_file would overwrite an input file: {src}"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_leaves_nothing(tmp_path, corpus_path, repo_root, sig):
    src = tmp_path / "big.txt"
    src.write_bytes(corpus_path.read_bytes() * 12)  # 28 MB: a few seconds of work
    out_dir = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(repo_root))
    proc = subprocess.Popen(
        [sys.executable, "-m", "data_tools.prepare_corpus", f"--input_file={src}",
         f"--output_file={out_dir}/part-{{shard}}.txt", "--num_output_shards=2",
         "--num_workers=2", "--chunk_mb=0.2", "--document_per=line"],
        cwd=repo_root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (out_dir.is_dir() and len(os.listdir(out_dir)) == 2):  # the temp shards
            assert proc.poll() is None and time.monotonic() < deadline, "run ended too early"
            time.sleep(0.01)
        time.sleep(0.3)  # the workers are busy now
        os.kill(proc.pid, sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and "error: interrupted" in stderr, stderr
    assert "Traceback" not in stderr
    assert os.listdir(out_dir) == []
