"""Tests of bert_tf.export.task_serving and qa_serving: the raw-text SavedModel of a fine-tuned
model gives exactly what the host featurizers, the in-process model and the host
post-processing give, on hard strings (accents, µ, CJK, controls, [UNK], long inputs)."""

import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops the SavedModel needs)

from bert_tf.core.errors import UserError
from bert_tf.core.tokenization import FullTokenizer
from bert_tf.export import task_serving
from bert_tf.export.qa_serving import SpanServingModule, max_context_window, plan_windows
from bert_tf.finetune import heads
from bert_tf.finetune.classification import classification_data
from bert_tf.finetune.label_list import save_label_list
from bert_tf.finetune.squad import squad_data, squad_postprocess
from bert_tf.finetune.tagging import tagging_data, tagging_metrics
from bert_tf.modeling.config import BertConfig
from bert_tf.text.tf_tokenization import TFBertTokenizer

CONFIG = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)
LABELS = ["negative", "neutral", "positive"]
TAGS = ["O", "B-LOC", "B-PER", "E-PER", "I-LOC", "I-PER", "S-MISC"]
SQUAD = {"max_seq_length": 64, "doc_stride": 16, "max_query_length": 12,
         "max_answer_length": 6, "n_best_size": 5}

HARD = [
    "Héllo, wörld! The café's crème brûlée costs 5µm... naïve façade?",
    "東京は日本の首都です。 北京 is 中国's capital",
    "ΣΟΦΟΣ İstanbul ÅNGSTRÖM ǅemal straße",
    "a snow☃man 🙂 said\u200b hi\u00a0there\u202fnow",
    "",
    "tabs\tand\nnewlines  and   spaces ",
    " ".join(f"word{i}-x" for i in range(30)),  # longer than max_seq_length: truncated
]
LONG_SENTENCE = ("The µ-meson (muon), discovered in 1936 by Carl D. Anderson & Seth Neddermeyer "
                 "at Caltech, weighs ~105.66 MeV/c²; naïve models of Zürich's café-owners "
                 "predicted 東京 and 北京 would differ—they didn't! " * 2)


def _task_model(kind, num_labels, seed, readout="pooler"):
    """A task model with random weights, larger than the initializer's so that predictions
    vary with the input."""
    model = heads.model_of_kind(kind, CONFIG, num_labels, readout)
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        if weight.path.split("/")[-1] not in ("gamma", "beta"):
            weight.assign(rng.normal(0.0, 0.3, weight.shape))
    return model


def _model_dir(tmp_path, vocab, kind, num_labels, labels, settings, seed):
    """A fine-tuned output dir as the runner leaves it; returns (dir, the model)."""
    model = _task_model(kind, num_labels, seed, settings.get("classifier_readout", "pooler"))
    path = tmp_path / f"{kind}_{num_labels}"
    path.mkdir()
    tf.train.Checkpoint(model=model).save(str(path / "ckpt"))
    CONFIG.to_json_file(str(path / "bert_config.json"))
    shutil.copy(vocab, path / "vocab.txt")
    if kind != "span":
        save_label_list(str(path / "label_list.json"), labels)
    info = {"kind": kind, "num_labels": num_labels, "do_lower_case": True, **settings}
    (path / "finetune_task.json").write_text(json.dumps(info))
    return str(path), model


def _export(model_dir, tmp_path, name, model=None):
    export_dir = str(tmp_path / "export" / name / "1")
    assert task_serving.export_finetuned(model_dir, export_dir, model) == export_dir
    assert os.listdir(os.path.dirname(export_dir)) == ["1"]  # no temporary left over
    return tf.saved_model.load(export_dir)


def _strings(tensor):
    return [[x.decode() for x in row] for row in tensor.numpy()]


@pytest.fixture(scope="module")
def tokenizer(google_vocab_path):
    return FullTokenizer(google_vocab_path, do_lower_case=True)


def _host_logits(model, arrays):
    inputs = {k: arrays[k] for k in heads.INPUT_NAMES}
    return {k: v.numpy() for k, v in model(inputs, training=False).items()}


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, google_vocab_path, cli):
    """A 3-class classifier's output dir, exported by `python -m bert_tf.export`.

    Its head reads the mean over the real tokens (`--classifier_readout=mean`): the export
    rebuilds the readout named in finetune_task.json, and the served rows, cut to their
    longest, must average the same tokens as the host's rows padded to 32.
    """
    tmp_path = tmp_path_factory.mktemp("classifier")
    model_dir, model = _model_dir(tmp_path, google_vocab_path, "classifier", 3, LABELS,
                                  {"max_seq_length": 32, "classifier_readout": "mean"}, seed=9)
    export_dir = str(tmp_path / "export" / "1")
    result = cli.run("bert_tf.export", [f"--output_dir={model_dir}",
                                        f"--export_dir={export_dir}"], timeout=600)
    assert result.returncode == 0, result.stderr
    assert f"exported fine-tuned {model_dir} as saved_model to {export_dir}" in result.stdout
    assert os.listdir(os.path.dirname(export_dir)) == ["1"]  # no temporary left over
    return tf.saved_model.load(export_dir), model


@pytest.mark.parametrize("signature", ["serving_default", "classify", "classify_pair"])
def test_classifier_matches_host_featurizer_and_model(classifier, signature, tokenizer):
    loaded, model = classifier
    assert sorted(loaded.signatures) == ["classify", "classify_pair", "serving_default"]
    texts = list(zip(HARD, HARD[::-1] if signature == "classify_pair" else [None] * len(HARD)))
    examples = [classification_data.Example(str(i), a, b, None)
                for i, (a, b) in enumerate(texts)]
    arrays = classification_data.featurize(examples, LABELS, tokenizer, 32).arrays
    logits = _host_logits(model, arrays)["logits"]
    kwargs = {"text_a": tf.constant(HARD)}
    if signature == "classify_pair":
        kwargs["text_b"] = tf.constant(HARD[::-1])
    out = loaded.signatures[signature](**kwargs)
    np.testing.assert_allclose(out["probabilities"].numpy(), tf.nn.softmax(logits).numpy(),
                               atol=1e-5)
    assert [x.decode() for x in out["label"].numpy()] == [LABELS[i] for i in logits.argmax(-1)]
    assert len(set(logits.argmax(-1))) >= 2  # the labels really differ


def test_regression_classifier_returns_a_score(google_vocab_path, tokenizer):
    """label_list null: one float output (served in process; saving is tested above)."""
    model = _task_model("classifier", 1, seed=2)
    module = task_serving.ClassifierServingModule(
        model, TFBertTokenizer(google_vocab_path, True), 32, None)
    examples = [classification_data.Example(str(i), a, a[::-1], None)
                for i, a in enumerate(HARD)]
    arrays = classification_data.featurize(examples, None, tokenizer, 32).arrays
    out = module.classify_pair(tf.constant(HARD), tf.constant([a[::-1] for a in HARD]))
    assert sorted(out) == ["score"]
    np.testing.assert_allclose(out["score"].numpy(),
                               _host_logits(model, arrays)["logits"][:, 0], atol=1e-5)


def test_tagger_matches_host_windows_tags_and_entities(tmp_path, google_vocab_path, tokenizer):
    model_dir, model = _model_dir(tmp_path, google_vocab_path, "tagger", len(TAGS), TAGS,
                                  {"max_seq_length": 32}, seed=3)
    loaded = _export(model_dir, tmp_path, "ner", model)  # the model in memory, after training
    texts = HARD + [LONG_SENTENCE, "  \t ", "x\ufe0f \ufe0f y"]
    sentences = [tagging_data.Sentence(t.split(), None) for t in texts]
    features = tagging_data.featurize(sentences, None, tokenizer, 32)
    assert max(np.bincount(features.arrays["example_index"])) >= 4  # a long sentence
    logits = _host_logits(model, features.arrays)["logits"]
    tags = tagging_data.predictions_to_tags(features, logits, TAGS)
    out = {k: v.numpy() for k, v in loaded.signatures["tag"](text=tf.constant(texts)).items()}
    for i, text in enumerate(texts):
        spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
        n = len(spans)
        assert out["num_words"][i] == n
        assert [w.decode() for w in out["words"][i, :n]] == text.split()
        assert [t.decode() for t in out["tags"][i, :n]] == tags[i]
        assert [(int(a), int(b)) for a, b in zip(out["word_start"][i, :n],
                                                 out["word_end"][i, :n])] == spans
        assert set(out["words"][i, n:]) <= {b""} and set(out["word_start"][i, n:]) <= {-1}
        entities = [(kind, spans[s][0], spans[e - 1][1])
                    for kind, s, e in tagging_metrics.tags_to_spans(tags[i])]
        m = out["num_entities"][i]
        assert m == len(entities)
        got = list(zip((t.decode() for t in out["entity_type"][i, :m]),
                       out["entity_start"][i, :m].tolist(), out["entity_end"][i, :m].tolist()))
        assert got == entities
        assert [t.decode() for t in out["entity_text"][i, :m]] == [text[a:b]
                                                                   for _, a, b in entities]
    assert sum(out["num_entities"]) > 5


def test_tagger_with_other_tags_gives_no_entities(google_vocab_path):
    """POS-like tags are no chunks: words and tags only (served in process)."""
    model = _task_model("tagger", 3, seed=8)
    module = task_serving.TaggerServingModule(model, TFBertTokenizer(google_vocab_path, True),
                                              16, ["NN", "VB", "DT"])
    out = module.tag(tf.constant(["the dog barks", ""]))
    assert out["num_words"].numpy().tolist() == [3, 0]
    assert set(out["tags"].numpy()[0]) <= {b"NN", b"VB", b"DT"}
    assert out["num_entities"].numpy().tolist() == [0, 0]
    assert out["entity_type"].shape == (2, 0)


@pytest.mark.parametrize("size,stride", [(1, 1), (5, 2), (5, 5), (8, 3), (8, 20)])
def test_window_plans_match_host(size, stride):
    counts = list(range(0, 30))
    n = tf.constant(counts)
    full = lambda v: tf.fill([len(counts)], v)  # noqa: E731
    for clamp_last in (False, True):
        if clamp_last and stride > size:
            continue  # tagging refuses a stride longer than the window
        step = min(size, stride)
        windows = plan_windows(n, full(size), full(step), clamp_last)
        got = [[] for _ in counts]
        for ex, start, length in zip(windows.example.numpy(), windows.start.numpy(),
                                     windows.length.numpy()):
            got[ex].append((int(start), int(length)))
        if clamp_last:
            expected = [[(s, min(size, c - s)) for s in tagging_data.window_starts(c, size, step)]
                        for c in counts]
        else:
            expected = [squad_data.doc_windows(c, size, stride) for c in counts]
        assert got == expected
        example = tf.repeat(tf.range(len(counts)), n)
        position = tf.ragged.range(n).flat_values
        best = max_context_window(example, position, n, full(size), full(step), windows,
                                  clamp_last).numpy()
        expected_best = np.concatenate(
            [squad_data.max_context_window(c, w) for c, w in zip(counts, expected)])
        np.testing.assert_array_equal(best, expected_best)


def _squad_host(model, tokenizer, questions, contexts, settings, version_2=False,
                threshold=0.0):
    examples = []
    for i, (question, context) in enumerate(zip(questions, contexts)):
        words, starts = squad_data.split_context(context)
        examples.append(squad_data.SquadExample(str(i), question, context, tuple(words),
                                                tuple(starts), None))
    features = squad_data.featurize(
        examples, tokenizer, max_seq_length=settings["max_seq_length"],
        doc_stride=settings["doc_stride"], max_query_length=settings["max_query_length"])
    logits = _host_logits(model, features.arrays)
    result = squad_postprocess.postprocess(
        examples, features.feature_meta, logits["start_logits"], logits["end_logits"],
        do_lower_case=True, n_best_size=settings["n_best_size"],
        max_answer_length=settings["max_answer_length"], version_2_with_negative=version_2,
        null_score_diff_threshold=threshold)
    return examples, features, [result.answers[str(i)] for i in range(len(examples))]


QUESTIONS = ["Who discovered the µ-meson?", "Où est le café?",
             "what is 東京 and which MeV/c² value, and when, where, by whom, why?",
             "Snow?", "empty", "Σ?"]


def test_span_extractor_matches_host_windows_and_postprocess(tmp_path, google_vocab_path,
                                                              tokenizer):
    model_dir, model = _model_dir(tmp_path, google_vocab_path, "span", 2, None, SQUAD, seed=4)
    loaded = _export(model_dir, tmp_path, "squad")
    contexts = [LONG_SENTENCE, HARD[0] + "  \n " + HARD[2], LONG_SENTENCE.upper(), HARD[3],
                "", HARD[2]]
    _, features, expected = _squad_host(model, tokenizer, QUESTIONS, contexts, SQUAD)
    assert np.bincount([m.example_index for m in features.feature_meta]).max() >= 3
    out = loaded.signatures["answer"](question=tf.constant(QUESTIONS),
                                      context=tf.constant(contexts))
    assert [a.decode() for a in out["answer"].numpy()] == [x.answer for x in expected]
    assert out["start"].numpy().tolist() == [x.start for x in expected]
    assert out["end"].numpy().tolist() == [x.end for x in expected]
    np.testing.assert_allclose(out["score"].numpy(), [x.score for x in expected], atol=1e-5)
    assert expected[4].answer == "" and len({x.answer for x in expected}) == 6


def test_answer_offsets_of_every_short_span_match_host(google_vocab_path, tokenizer):
    """The in-graph piece -> character mapping against squad_postprocess's text alignment,
    for every span of 1 to 3 pieces in every window (including [UNK] fallbacks)."""
    module = SpanServingModule(None, TFBertTokenizer(google_vocab_path, True), 64, 16, 12, 6, 5)
    contexts = [LONG_SENTENCE, HARD[0] + " \u202f " + HARD[2], HARD[3], HARD[1]]
    examples, features, _ = _squad_host(
        lambda inputs, training: {"start_logits": tf.zeros(tf.shape(inputs["input_ids"])),
                                  "end_logits": tf.zeros(tf.shape(inputs["input_ids"]))},
        tokenizer, ["q"] * len(contexts), contexts, SQUAD)
    rows, firsts, lasts, expected = [], [], [], []
    windows_of = {}
    for f, meta in enumerate(features.feature_meta):
        windows_of.setdefault(meta.example_index, []).append(f)
    for meta in features.feature_meta:
        example = examples[meta.example_index]
        pieces_of_example = squad_postprocess.context_pieces(windows_of[meta.example_index],
                                                              features.feature_meta)
        offset = int(np.argmax(meta.token_to_word >= 0))
        n = int((meta.token_to_word >= 0).sum())
        for s in range(n):
            for e in range(s, min(s + 3, n)):
                rows.append(meta.example_index)
                firsts.append(meta.window_start + s)
                lasts.append(meta.window_start + e)
                text, start, end = squad_postprocess.span_text(
                    example, meta, offset + s, offset + e, True, pieces_of_example)
                expected.append((text, start, end))
    assert any("[UNK]" in text for text, _, _ in expected)
    context = tf.constant([contexts[r] for r in rows])
    pieces = module.context_pieces(context)
    base = tf.gather(pieces["base"], tf.range(len(rows)))
    text, start, end = module.span_text(context, pieces, base + firsts, base + lasts)
    got = list(zip((t.decode() for t in text.numpy()), start.numpy().tolist(),
                   end.numpy().tolist()))
    assert got == expected


def test_squad_v2_null_answers_match_host(google_vocab_path, tokenizer):
    """SQuAD 2.0 settings, served in process (the SavedModel path is the test above)."""
    settings = dict(SQUAD, n_best_size=3)
    model = _task_model("span", 2, seed=5)
    module = SpanServingModule(model, TFBertTokenizer(google_vocab_path, True),
                               version_2_with_negative=True, null_score_diff_threshold=-0.5,
                               **settings)
    contexts = [LONG_SENTENCE, HARD[0], HARD[2], HARD[1], "", HARD[3]]
    _, _, expected = _squad_host(model, tokenizer, QUESTIONS, contexts, settings,
                                 version_2=True, threshold=-0.5)
    out = module.answer(tf.constant(QUESTIONS), tf.constant(contexts))
    assert [a.decode() for a in out["answer"].numpy()] == [x.answer for x in expected]
    assert out["start"].numpy().tolist() == [x.start for x in expected]
    np.testing.assert_allclose(out["score"].numpy(), [x.score for x in expected], atol=1e-5)
    assert "" in [x.answer for x in expected] and {x.answer for x in expected} != {""}


def test_bad_directories_are_one_line_errors(tmp_path, google_vocab_path):
    with pytest.raises(UserError, match="no finetune_task.json"):
        task_serving.export_finetuned(str(tmp_path), str(tmp_path / "out"))
    model_dir, _ = _model_dir(tmp_path, google_vocab_path, "tagger", len(TAGS), TAGS,
                              {"max_seq_length": 32}, seed=6)
    save_label_list(os.path.join(model_dir, "label_list.json"), ["O", "B-X"])
    with pytest.raises(UserError, match="label_list.json does not fit the tagger of 7"):
        task_serving.export_finetuned(model_dir, str(tmp_path / "out"))
    save_label_list(os.path.join(model_dir, "label_list.json"), TAGS)
    info = json.loads(open(os.path.join(model_dir, "finetune_task.json")).read())
    with open(os.path.join(model_dir, "finetune_task.json"), "w") as f:
        json.dump({**info, "classifier_readout": "max"}, f)
    with pytest.raises(UserError, match="^" + re.escape(
            f"{model_dir}/finetune_task.json: unknown classifier_readout 'max' (expected one "
            "of pooler, cls, mean)") + "$"):
        task_serving.export_finetuned(model_dir, str(tmp_path / "out"))
