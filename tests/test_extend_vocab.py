"""Tests for data_tools.extend_vocab and data_tools.vocab.{extend, extend_job, extend_report}."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from _text_inputs import input_variants

from bert_tf.core import tokenization
from bert_tf.core.errors import UserError
from data_tools.vocab import extend, extend_job, vocab_learner, word_counting

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECIALS = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def letters_vocab(extra=()):
    """Specials, a..z and ##a..##z, then `extra`: token -> id."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens = SPECIALS + letters + ["##" + c for c in letters] + list(extra)
    return {t: i for i, t in enumerate(tokens)}


def brute_force_greedy(base, counts, candidates, steps):
    """The reference: at each step, re-tokenize every word with each remaining candidate
    added and take the one with the lowest total cost (ties: the smaller string)."""
    vocab = dict(base)
    tokenizer = tokenization.WordpieceTokenizer(vocab)

    def total():
        return sum(n * extend.word_cost(tokenizer.tokenize(w), w) for w, n in counts.items())

    chosen, left = [], sorted(candidates)
    for _ in range(steps):
        now, best = total(), None
        for c in left:
            vocab[c] = -1
            saving = now - total()
            del vocab[c]
            if best is None or saving > best[1]:
                best = (c, saving)
        if best is None or best[1] < 1:
            break
        chosen.append(best)
        vocab[best[0]] = -1
        left.remove(best[0])
    return chosen


def test_savings_that_grow_are_followed_exactly():
    """Hand-worked: base a..z, ##a..##z and ##bc; words abcdef x1, abx x5.

    abcdef is a ##bc ##d ##e ##f (5): ##cdef cannot be reached after ##bc, so alone it saves
    0. ab alone saves 1 per abx (a ##b ##x -> ab ##x): 5, and nothing on abcdef (ab ##c ##d
    ##e ##f is 5 too). Once ab is in, ##cdef gives ab ##cdef: 3 saved. Estimates kept from
    before (lazy greedy) would have dropped ##cdef at 0.
    """
    base = letters_vocab(["##bc"])
    counts = Counter({"abcdef": 1, "abx": 5})
    chosen = extend.choose_pieces(base, counts, ["##cdef", "ab", "##zz"], None, 1)
    assert [(c.piece, c.saving) for c in chosen] == [("ab", 5), ("##cdef", 3)]
    assert brute_force_greedy(base, counts, ["##cdef", "ab", "##zz"], 5) == [
        ("ab", 5), ("##cdef", 3)]


def test_a_piece_that_occurs_twice_saves_once_per_use():
    """x ##a ##b ##a ##b (5) -> x ##ab ##ab (3): 2 saved per xabab, x 4."""
    chosen = extend.choose_pieces(letters_vocab(), Counter({"xabab": 4}), ["##ab"], None, 1)
    assert [(c.piece, c.saving) for c in chosen] == [("##ab", 8)]


def test_unk_costs_more_than_any_split():
    """A piece that greedy matching strands ([UNK]) is a loss; one that removes [UNK] a gain.

    Base: a, ##b, ##c (no ##d). "abd" x2 is [UNK] (cost 4); "abc" x10 is a ##b ##c (3).
    "ab" alone: abc -> ab ##c saves 1 x 10 (abd stays [UNK]); "##d" alone: abd -> a ##b ##d
    saves 1 x 2. After ab, "##d" gives abd -> ab ##d: 4 - 2 = 2 x 2.
    """
    base = {t: i for i, t in enumerate(SPECIALS + ["a", "##b", "##c"])}
    assert extend.word_cost(["[UNK]"], "abd") == 4
    counts = Counter({"abc": 10, "abd": 2})
    chosen = extend.choose_pieces(base, counts, ["ab", "##d"], None, 1)
    assert [(c.piece, c.saving) for c in chosen] == [("ab", 10), ("##d", 4)]
    # A piece after which the rest cannot be matched: "ab" strands "abd" if ##d is missing
    # but "##bd" would have covered it: a ##bd (2) vs ab + [UNK].
    base2 = {t: i for i, t in enumerate(SPECIALS + ["a", "##b", "##c", "##bd"])}
    ranking = extend.GreedyRanking(base2, Counter({"abd": 3}), ["ab"])
    assert ranking.cost_of("abd") == 2 and ranking.gain == [-3 * (4 - 2)]
    assert extend.choose_pieces(base2, Counter({"abd": 3}), ["ab"], None, 1) == []


@pytest.fixture(scope="module")
def corpus_counts(corpus_path):
    words, seen, _ = word_counting.count_corpus([str(corpus_path)],
                                                word_counting.CountConfig())
    return words, seen


def test_greedy_equals_brute_force_on_corpus_words(corpus_counts):
    """Base: a 3,000-piece vocabulary learned on the corpus; candidates from an 8,000-piece
    one; 200 words that the base splits: the fast ranking picks what re-tokenizing every word
    for every candidate picks, step by step, with the same savings."""
    words, seen = corpus_counts
    stats = vocab_learner.LearnStats(lines=seen.lines, words=seen.num_words)
    small, _ = vocab_learner.learn_from_counts(words, seen.chars, stats,
                                               vocab_learner.VocabConfig(vocab_size=3000))
    base = {t: i for i, t in enumerate(small)}
    tokenizer = tokenization.WordpieceTokenizer(base)
    split = sorted((w for w in words if len(tokenizer.tokenize(w)) > 1),
                   key=lambda w: (-words[w], w))[:200]
    counts = Counter({w: words[w] for w in split})
    candidates = extend.candidate_pieces(
        words, seen.chars, vocab_learner.LearnStats(lines=seen.lines, words=seen.num_words),
        base, vocab_learner.VocabConfig(vocab_size=8000))
    assert len(candidates) > 4000 and not set(candidates) & set(base)
    used = sorted({c for c in candidates
                   if any((c[2:] in w[1:]) if c.startswith("##") else w.startswith(c)
                          for w in split)})
    chosen = extend.choose_pieces(base, counts, candidates, 6, 1)
    assert [(c.piece, c.saving) for c in chosen] == brute_force_greedy(base, counts, used, 6)
    assert len(chosen) == 6 and chosen[0].saving > chosen[-1].saving > 0


def test_min_frequency_stops_at_the_first_piece_below_it(corpus_counts, google_vocab_path):
    words, seen = corpus_counts
    base = tokenization.load_vocab(google_vocab_path)
    candidates = extend.candidate_pieces(
        words, seen.chars, vocab_learner.LearnStats(lines=seen.lines, words=seen.num_words),
        base, vocab_learner.VocabConfig(vocab_size=len(base)))
    ranking = extend.GreedyRanking(base, words, candidates)
    everything = ranking.choose(None, 1)
    assert len(everything) > 300
    savings = [c.saving for c in everything]
    assert min(savings) >= 1 and savings[0] == 26479  # "unk" (WikiText's <unk>) x 26,479
    threshold = 40
    cut = next(i for i, s in enumerate(savings) if s < threshold)
    stopped = extend.choose_pieces(base, words, candidates, None, threshold)
    assert stopped == everything[:cut] and 0 < cut < len(everything)
    assert extend.choose_pieces(base, words, candidates, 7, threshold) == everything[:7]


def test_casing_is_read_from_the_base_vocabulary(google_vocab_path):
    tokens = tokenization.vocab_list(tokenization.load_vocab(google_vocab_path))
    assert "\u211d" in tokens  # upper-case, but lower-casing does not change it
    assert extend_job.resolve_lower_case(tokens, None, "v") is True
    assert extend_job.resolve_lower_case(tokens, True, "v") is True
    cased = tokens + ["The", "##NA"]
    assert extend_job.resolve_lower_case(cased, None, "v") is False
    assert extend_job.resolve_lower_case(cased, False, "v") is False
    cjk = SPECIALS + ["\u4e2d", "\u6587"]  # no cased letter: either setting fits
    assert extend_job.resolve_lower_case(cjk, False, "v") is False
    assert extend_job.resolve_lower_case(cjk, True, "v") is True
    with pytest.raises(UserError, match="it is cased \\(2 pieces"):
        extend_job.resolve_lower_case(cased, True, "v")
    with pytest.raises(UserError, match="it is uncased"):
        extend_job.resolve_lower_case(tokens, False, "v")


def test_id_ranges():
    assert extend_job.id_ranges([1, 2, 3, 7, 9, 10]) == "1..3, 7, 9..10"
    assert extend_job.id_ranges([]) == ""


def test_lay_out_keeps_every_base_id():
    base = ["[PAD]", "[unused0]", "[UNK]", "[unused1]", "a", "[unused2]"]
    assert extend_job.lay_out(base, ["x", "##y"], "unused") == (
        ["[PAD]", "x", "[UNK]", "##y", "a", "[unused2]"], [1, 3])
    assert extend_job.lay_out(base, ["x"], "append") == (base + ["x"], [6])
    with pytest.raises(AssertionError):
        extend_job.lay_out(base, ["a"], "append")  # a repeated token


def fulltokenizer_counts(vocab_file, lines):
    """(words, tokens, [UNK]s) of `lines` by FullTokenizer (its fast path, which
    test_tokenization holds to the reference path): the reference for the report."""
    tok = tokenization.FullTokenizer(vocab_file)
    splitter = tokenization.CachedBasicTokenizer()
    words = tokens = unks = 0
    for line in lines:
        words += len(splitter.tokenize(line))
        ids = tok.encode(line)
        tokens += len(ids)
        unks += ids.count(tok.unk_id)
    return words, tokens, unks


def test_cli_unused_and_append(tmp_path, corpus_path, corpus_lines, google_vocab_path):
    """Both modes choose the same pieces; unused keeps the size and fills [unused0..] in id
    order, append adds after id 30,521; no base id moves; the report's figures are
    FullTokenizer's on the text."""
    base = open(google_vocab_path, encoding="utf-8").read().splitlines()
    procs = {mode: subprocess.Popen(
        [sys.executable, "-m", "data_tools.extend_vocab", f"--vocab_file={google_vocab_path}",
         f"--input_file={corpus_path}", f"--output_vocab_file={tmp_path / mode}.txt",
         f"--mode={mode}", "--num_new_tokens=120", "--num_workers=2", "--split_mb=0.5"],
        cwd=REPO_ROOT, env=dict(os.environ, PYTHONPATH=REPO_ROOT), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for mode in ("unused", "append")}
    outs = {}
    for mode, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        out = tmp_path / f"{mode}.txt"
        lines = stdout.splitlines()
        where = "in [unusedN] slots (ids 1..99, 104..124)" if mode == "unused" else \
            "appended (ids 30522..30641)"
        assert lines[0].startswith(f"wrote {out}: ") and f"120 new {where}" in lines[0]
        assert "from 17541 lines (513601 words) in 1 file(s), 0 warning(s)" in lines[0]
        assert lines[2].startswith("the 20 words that gain most") and len(lines) == 24
        assert lines[-1] == f"report: {out}.report.json"
        outs[mode] = (out.read_text(encoding="utf-8").splitlines(),
                      json.loads((tmp_path / f"{mode}.txt.report.json").read_text()))
    unused, report = outs["unused"]
    appended, report_append = outs["append"]
    new = [t["token"] for t in report["new_tokens"]]
    assert len(new) == 120 and new == [t["token"] for t in report_append["new_tokens"]]
    assert len(unused) == 30522 and unused[1:100] == new[:99] and unused[100:104] == [
        "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and unused[104:125] == new[99:]
    assert [i for i, (a, b) in enumerate(zip(base, unused)) if a != b] == (
        list(range(1, 100)) + list(range(104, 125)))
    assert appended[:30522] == base and appended[30522:] == new
    assert [t["id"] for t in report_append["new_tokens"]] == list(range(30522, 30642))

    words, before, unk_before = fulltokenizer_counts(google_vocab_path, corpus_lines)
    _, after, unk_after = fulltokenizer_counts(str(tmp_path / "unused.txt"), corpus_lines)
    assert report["before"]["words"] == words == 513601
    assert (report["before"]["tokens"], report["after"]["tokens"]) == (before, after)
    assert (report["before"]["unk_words"], report["after"]["unk_words"]) == (
        unk_before, unk_after)
    assert before - after == sum(t["tokens_saved"] for t in report["new_tokens"]) > 26479
    assert report["tokens_per_word_reduction"] == pytest.approx(1 - after / before)
    reduction = f"({-100 * (1 - after / before):+.1f} %)"
    assert reduction in stdout and f"{before / words:.4f} -> " in stdout
    top = report["top_words"]
    assert len(top) == 20 and top[0] == {"word": "unk", "count": 26479, "before": ["un", "##k"],
                                         "after": ["unk"], "tokens_saved": 26479}
    assert [t["tokens_saved"] for t in top] == sorted((t["tokens_saved"] for t in top),
                                                      reverse=True)
    assert report_append["after"] == report["after"]


def test_same_bytes_for_any_worker_count(tmp_path, corpus_lines, google_vocab_path):
    """1 worker in this process, 2 workers over 0.1 MB parts: byte-identical vocabularies and
    reports (but for the paths), also when the input is compressed."""
    text = ("\n".join(corpus_lines[:3000]) + "\n").encode("utf-8")
    results = []
    variants = input_variants(text)
    for name, workers in (("plain.txt", 1), ("plain.txt", 2), ("text.txt.gz", 2),
                          ("bom.txt", 1)):
        (tmp_path / name).write_bytes(variants[name])
        out = str(tmp_path / f"{name}-{workers}.vocab")
        extend_job.run(str(tmp_path / name), google_vocab_path, out,
                       extend_job.ExtendConfig(mode="append", num_new_tokens=60),
                       word_counting.CountConfig(num_workers=workers, split_bytes=100_000))
        report = json.loads(open(out + ".report.json", encoding="utf-8").read())
        assert report.pop("vocab_file") == out
        assert report.pop("base_vocab_file") == google_vocab_path
        results.append((open(out, "rb").read(), report))
    assert all(r == results[0] for r in results[1:])
    assert len(results[0][0].splitlines()) == 30582


def test_bad_base_vocabulary_and_flags_get_one_line(tmp_path, corpus_path, google_vocab_path):
    base = open(google_vocab_path, encoding="utf-8").read().splitlines()
    no_mask = tmp_path / "no_mask.txt"
    # Without [UNK] and [MASK] (the other specials are checked by the same line of code).
    no_mask.write_text("\n".join(t for t in base if t not in ("[UNK]", "[MASK]")) + "\n",
                       encoding="utf-8")
    cased = tmp_path / "cased.txt"
    cased.write_text("\n".join(base + ["The", "DNA"]) + "\n", encoding="utf-8")
    no_slots = tmp_path / "no_slots.txt"
    no_slots.write_text("\n".join(t for t in base if not t.startswith("[unused")) + "\n",
                        encoding="utf-8")
    out = tmp_path / "out" / "v.txt"
    out.parent.mkdir()
    common = [f"--input_file={corpus_path}", f"--output_vocab_file={out}"]
    cases = {
        "no_mask": ([f"--vocab_file={no_mask}"],
                    f"error: vocab file {no_mask} lacks special token(s) [UNK] [MASK]"),
        "too_many": ([f"--vocab_file={google_vocab_path}", "--num_new_tokens=995"],
                     "error: --num_new_tokens=995 is more than the 994 free [unusedN] slots "
                     f"of {google_vocab_path}: use --mode=append, or ask for at most 994"),
        "uncased": ([f"--vocab_file={google_vocab_path}", "--do_lower_case=false"],
                    "error: --do_lower_case=false contradicts the base vocabulary "
                    f"{google_vocab_path}: it is uncased (no piece has an upper-case letter);"
                    " use --do_lower_case=true"),
        "cased": ([f"--vocab_file={cased}", "--do_lower_case=true"],
                  f"error: --do_lower_case=true contradicts the base vocabulary {cased}: it "
                  "is cased (2 pieces with upper-case letters, e.g. 'The'); use "
                  "--do_lower_case=false"),
        "no_slots": ([f"--vocab_file={no_slots}"],
                     f"error: the base vocabulary {no_slots} has no [unusedN] slot: use "
                     "--mode=append"),
        "append_unbounded": ([f"--vocab_file={google_vocab_path}", "--mode=append"],
                             "error: --mode=append needs --num_new_tokens or --min_frequency "
                             "(when to stop adding)"),
        "overwrite": ([f"--vocab_file={google_vocab_path}", "--mode=append",
                       "--num_new_tokens=5", f"--output_vocab_file={google_vocab_path}"],
                      "error: --output_vocab_file would overwrite an input: "
                      f"{google_vocab_path}"),
    }
    procs = {name: subprocess.Popen(
        [sys.executable, "-m", "data_tools.extend_vocab"] + common + args, cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONPATH=REPO_ROOT), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for name, (args, _) in cases.items()}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (name, err)
        assert err.strip().splitlines() == [cases[name][1]], (name, err)
    assert os.listdir(out.parent) == []  # nothing written, no temporary left


def test_the_job_imports_no_tensorflow(tmp_path, corpus_lines, google_vocab_path):
    """The light data install runs it without TensorFlow: nothing it imports loads TF."""
    text = tmp_path / "t.txt"
    text.write_text("\n".join(corpus_lines[:200]) + "\n", encoding="utf-8")
    code = (
        "import sys\n"
        "from data_tools import extend_vocab\n"
        "from data_tools.vocab import extend_job, word_counting\n"
        f"extend_job.run({str(text)!r}, {google_vocab_path!r}, {str(tmp_path / 'v.txt')!r}, "
        "extend_job.ExtendConfig(num_new_tokens=3), word_counting.CountConfig())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('tensorflow', 'keras', 'keras_hub', 'tensorflow_text')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO_ROOT, env=dict(os.environ, PYTHONPATH=REPO_ROOT), timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    assert len((tmp_path / "v.txt").read_text(encoding="utf-8").splitlines()) == 30522
