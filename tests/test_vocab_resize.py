"""Tests of bert_tf.interop.vocab_resize (a model follows an extended vocabulary), its entry
points (fine-tuning's warm start, continued pretraining's start; convert_checkpoint in
test_convert_checkpoint.py, run_pretraining end to end in test_run_pretraining.py), the
new-rows-only phase of bert_tf.training.new_rows_only, and exports of a resized model.

Extended vocabularies are built by hand from the bundled Google vocabulary: new words written
into its [unused0..] slots, appended after it, or both.
"""

from __future__ import annotations

import json
import logging
import os
import types

import keras
import numpy as np
import pytest
import tensorflow as tf
from _pretraining_helpers import blocks_dataset_fn, minilm_dir, synthetic_examples, tiny_bert_config

from bert_tf.core.errors import UserError
from bert_tf.core.tokenization import FullTokenizer
from bert_tf.finetune import warm_start
from bert_tf.interop import continued_pretraining, formats, google_checkpoint, vocab_resize
from bert_tf.interop.model_files import ModelFiles, expected_shapes
from bert_tf.interop.native import read_native, write_native
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.pretraining_model import BertPretrainingModel
from bert_tf.modeling.weight_map import encoder_weight_map, get_weights, pretraining_weight_map
from bert_tf.training import optimization, trainer
from bert_tf.training.new_rows_only import NewRowsOnly

TINY = dict(vocab_size=30522, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=64, type_vocab_size=2,
            hidden_act="gelu", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
# "##vidly": inside a word, the base vocabulary reads it "##vid ##ly"; on its own, "vi ##dly".
NEW_WORDS = ("covid", "##vidly", "\u2603\u2603")  # the last: only [UNK] pieces
BASE_TEXT = ["The quick brown fox jumps over the lazy dog.",
             "Tokenization splits unaffordable words into pieces!"]


def extended_vocab(base: str, path, unused=(), append=()) -> str:
    """`base` with `unused` written into [unused0..] and `append` after it."""
    tokens = open(base, encoding="utf-8").read().split("\n")[:-1]
    slots = [i for i, t in enumerate(tokens) if vocab_resize.is_unused_slot(t)]
    for slot, word in zip(slots, unused):
        tokens[slot] = word
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens + list(append)) + "\n")
    return os.fspath(path)


def random_weights(config: BertConfig, seed: int, heads: bool = True):
    rng = np.random.default_rng(seed)
    return {n: (0.2 * rng.standard_normal(s)).astype(np.float32)
            for n, s in expected_shapes(config).items()
            if heads or not n.startswith(("mlm/", "nsp/"))}


def encoder_outputs(config: BertConfig, weights, ids):
    encoder = BertEncoder(config)
    mapping = encoder_weight_map(encoder)
    for name, weight in mapping.items():
        weight.assign(weights[name], name)
    out = encoder({"input_ids": ids, "input_mask": (ids > 0).astype(np.int32),
                   "segment_ids": np.zeros_like(ids)})
    return np.asarray(out["sequence_output"]), np.asarray(out["pooled_output"])


def base_token_ids(vocab_file: str) -> np.ndarray:
    tokenizer = FullTokenizer(vocab_file)
    rows = [[101] + tokenizer.encode(t) + [102] for t in BASE_TEXT]
    width = max(map(len, rows))
    return np.array([r + [0] * (width - len(r)) for r in rows], np.int32)


# ------------------------------------------------------------------ which rows are new


def test_vocab_change_finds_replaced_and_appended_rows(google_vocab_path, tmp_path):
    unused = extended_vocab(google_vocab_path, tmp_path / "u.txt", unused=NEW_WORDS)
    change = vocab_resize.vocab_change(google_vocab_path, unused)
    assert (change.base_size, change.size, change.new_ids) == (30522, 30522, (1, 2, 3))
    assert (change.replaced, change.appended) == (3, 0)
    both = extended_vocab(google_vocab_path, tmp_path / "b.txt", unused=["covid"],
                          append=["##vidly", "sars"])
    change = vocab_resize.vocab_change(google_vocab_path, both)
    assert change.new_ids == (1, 30522, 30523) and change.tokens[30523] == "sars"
    assert (change.replaced, change.appended) == (1, 2)
    same = extended_vocab(google_vocab_path, tmp_path / "same.txt")
    assert vocab_resize.vocab_change(google_vocab_path, same) is None


def test_vocabularies_that_move_a_base_token_are_refused(google_vocab_path, tmp_path):
    tokens = open(google_vocab_path, encoding="utf-8").read().split("\n")[:-1]
    cases = {
        # "the" (id 1996) moved to the end: every token after it shifts down by one.
        "moved": (tokens[:1996] + tokens[1997:] + ["the"],
                  rf"token {tokens[1997]!r} is id 1996 but id 1997 in the base vocabulary"),
        # A real token replaced in place (only [unusedN] slots may be).
        "replaced": (tokens[:1996] + ["covid"] + tokens[1997:],
                     r"id 1996 is 'covid' but 'the' in the base vocabulary .*only \[unusedN\]"),
        "shorter": (tokens[:-1], r"has 30521 tokens, fewer than the 30522 of the base "
                                 r"vocabulary .* \(it lacks '##～'\)"),
    }
    for name, (vocab, message) in cases.items():
        path = tmp_path / f"{name}.txt"
        path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
        with pytest.raises(UserError, match=message):
            vocab_resize.vocab_change(google_vocab_path, os.fspath(path))


def test_new_tokens_are_split_by_the_base_tokenizer_as_inside_a_word(google_vocab_path,
                                                                     tmp_path):
    tokenizer = FullTokenizer(google_vocab_path)
    assert vocab_resize.base_pieces("covid", tokenizer) == ["co", "##vid"]
    # A continuation piece is matched as a continuation from its first character: neither
    # as a word of its own nor glued to a word before it.
    assert vocab_resize.base_pieces("##vidly", tokenizer) == ["##vid", "##ly"]
    assert tokenizer.tokenize("vidly") == ["vi", "##dly"]
    assert tokenizer.tokenize("avidly") == ["avid", "##ly"]
    assert vocab_resize.base_pieces("##izers", tokenizer) == ["##izer", "##s"]
    assert vocab_resize.base_pieces("Covid-19", tokenizer) == ["co", "##vid", "-", "19"]
    assert vocab_resize.base_pieces(NEW_WORDS[2], tokenizer) == ["[UNK]"]
    assert vocab_resize.infer_do_lower_case(tokenizer.vocab)
    cased = tmp_path / "cased.txt"
    cased.write_text("[PAD]\n[UNK]\nThe\nthe\n")
    assert not vocab_resize.infer_do_lower_case(FullTokenizer(os.fspath(cased),
                                                              required_tokens=()).vocab)


# ------------------------------------------------------------------ initial values


def test_new_rows_are_the_mean_of_their_base_pieces_rows(google_vocab_path, tmp_path, caplog):
    config = BertConfig.from_dict(TINY)
    weights = random_weights(config, 0)
    files = ModelFiles(config, weights, google_vocab_path, "base")
    vocab = extended_vocab(google_vocab_path, tmp_path / "v.txt", unused=["covid"],
                           append=NEW_WORDS[1:])
    with caplog.at_level(logging.INFO, logger="absl"):
        resized = vocab_resize.resize_to_vocab(files, vocab)
    ids = FullTokenizer(google_vocab_path).vocab
    assert resized.config.vocab_size == 30524 and resized.vocab_file == vocab
    for name in ("embeddings/word_embeddings", "mlm/output_bias"):
        old, new = weights[name].astype(np.float64), resized.weights[name]
        assert new.shape[0] == 30524 and new.dtype == np.float32
        # By hand: covid = (co + ##vid) / 2 in slot [unused0] (id 1); ##vidly = (##vid + ##ly)
        # / 2 at 30522; the snowmen (only [UNK]) = the mean of the 29,528 rows that hold
        # tokens, i.e. all but the 994 [unusedN] rows.
        np.testing.assert_array_equal(
            new[1], ((old[ids["co"]] + old[ids["##vid"]]) / 2).astype(np.float32))
        np.testing.assert_array_equal(
            new[30522], ((old[ids["##vid"]] + old[ids["##ly"]]) / 2).astype(np.float32))
        filled = [i for t, i in ids.items() if not t.startswith("[unused")]
        assert len(filled) == 30522 - 994
        np.testing.assert_allclose(new[30523], old[filled].mean(axis=0), rtol=1e-6)
        base = np.delete(np.arange(30522), 1)
        np.testing.assert_array_equal(new[base], weights[name][base])  # bit for bit
    for name in set(weights) - set(vocab_resize.VOCAB_ROWS):
        assert resized.weights[name] is weights[name]
    lines = [r.getMessage() for r in caplog.records if "new rows" in r.getMessage()]
    assert lines == [
        f"vocabulary {vocab}: 3 new rows of embeddings/word_embeddings, mlm/output_bias for "
        "base (2 appended, 1 in [unusedN] slots; vocab_size 30522 -> 30524), each the mean "
        "of its base WordPieces' rows; 1 with only [UNK] pieces from the mean of the 29528 "
        "base token rows"]


def test_the_same_vocabulary_changes_nothing_and_logs_nothing(google_vocab_path, tmp_path,
                                                              caplog):
    config = BertConfig.from_dict(TINY)
    files = ModelFiles(config, random_weights(config, 1, heads=False), google_vocab_path, "b")
    copy = extended_vocab(google_vocab_path, tmp_path / "copy.txt")
    with caplog.at_level(logging.INFO, logger="absl"):
        same = vocab_resize.resize_to_vocab(files, copy)
    assert same.weights is files.weights and same.config == config
    assert same.vocab_file == copy and caplog.records == []
    # Without a base vocabulary a vocabulary of the same size is taken as the model's own
    # (as before vocabularies could be extended); another size cannot be placed.
    alone = ModelFiles(config, files.weights, None, "nowhere")
    assert vocab_resize.resize_to_vocab(alone, copy).weights is files.weights
    longer = extended_vocab(google_vocab_path, tmp_path / "long.txt", append=["covid"])
    with pytest.raises(UserError, match=r"has 30523 tokens but the word embeddings of nowhere "
                                        r"have 30522 rows, and there is no vocab.txt beside"):
        vocab_resize.resize_to_vocab(alone, longer)


# ------------------------------------------------------------------ every format, exactly


def _write_checkpoint(fmt: str, directory, google_vocab_path) -> str:
    if fmt == "hf":
        return minilm_dir()  # vocab.txt beside
    config = BertConfig.from_dict(TINY)
    files = ModelFiles(config, random_weights(config, 2), google_vocab_path, "test")
    if fmt == "google":
        google_checkpoint.write(files, os.fspath(directory))
    else:
        write_native(files, os.fspath(directory))
    return os.fspath(directory)


@pytest.mark.parametrize("fmt", ["bert_tf", "google", "hf"])
def test_base_token_text_gives_exactly_the_original_encoder_outputs(fmt, google_vocab_path,
                                                                    tmp_path):
    """Through fine-tuning's warm start (`warm_start.resolve`), in both vocabulary modes."""
    path = _write_checkpoint(fmt, tmp_path / "ckpt", google_vocab_path)
    original = warm_start.resolve(path, "", "")
    ids = base_token_ids(google_vocab_path)
    expected = encoder_outputs(original.config, original.files.weights, ids)
    for mode, words in (("unused", dict(unused=NEW_WORDS)), ("append", dict(append=NEW_WORDS))):
        vocab = extended_vocab(google_vocab_path, tmp_path / f"{mode}.txt", **words)
        init = warm_start.resolve(path, "", vocab)
        size = 30522 + (3 if mode == "append" else 0)
        assert (init.config.vocab_size, init.vocab_file, init.fmt) == (size, vocab, fmt)
        assert init.files.weights["embeddings/word_embeddings"].shape[0] == size
        model = types.SimpleNamespace(encoder=BertEncoder(init.config))
        warm_start.load_encoder_weights(model, init.files)  # what fine-tuning runs
        out = model.encoder({"input_ids": ids, "input_mask": (ids > 0).astype(np.int32),
                             "segment_ids": np.zeros_like(ids)})
        np.testing.assert_array_equal(np.asarray(out["sequence_output"]), expected[0],
                                      err_msg=mode)
        np.testing.assert_array_equal(np.asarray(out["pooled_output"]), expected[1],
                                      err_msg=mode)


def test_fine_tuning_takes_the_base_config_or_the_extended_one(google_vocab_path, tmp_path):
    path = _write_checkpoint("google", tmp_path / "g", google_vocab_path)
    vocab = extended_vocab(google_vocab_path, tmp_path / "v.txt", append=["covid"])
    base_config = os.path.join(path, "bert_config.json")
    assert warm_start.resolve(path, base_config, vocab).config.vocab_size == 30523
    for size in (30523, 30000):
        BertConfig.from_dict({**TINY, "vocab_size": size}).to_json_file(
            os.fspath(tmp_path / f"{size}.json"))
    extended = warm_start.resolve(path, os.fspath(tmp_path / "30523.json"), vocab)
    assert extended.files.weights["embeddings/word_embeddings"].shape == (30523, 16)
    with pytest.raises(UserError, match="vocab_size is 30523 in the checkpoint, 30000 in"):
        warm_start.resolve(path, os.fspath(tmp_path / "30000.json"), vocab)
    os.remove(os.path.join(path, "vocab.txt"))
    with pytest.raises(UserError, match="no vocab.txt beside .* put the checkpoint's own "
                                        "vocabulary there"):
        warm_start.resolve(path, "", vocab)


@pytest.mark.parametrize("fmt", ["google", "hf"])
def test_continued_pretraining_starts_from_a_resized_checkpoint(fmt, google_vocab_path,
                                                                tmp_path, caplog):
    """A Google release, and a Hugging Face directory with both heads (a tiny one written
    here; the real MiniLM, which has no heads: test_base_token_text_gives_exactly_...)."""
    path = _write_checkpoint("google", tmp_path / "g", google_vocab_path)
    if fmt == "hf":
        from bert_tf.interop import hf_checkpoint

        path = hf_checkpoint.write(formats.read_model("google", path), os.fspath(tmp_path / "h"))
    vocab = extended_vocab(google_vocab_path, tmp_path / "v.txt", unused=["covid"],
                           append=["##vidly"])
    base = BertConfig.from_dict(TINY)
    config, start = continued_pretraining.plan(path, vocab, base, "unused.json", 5)
    assert config.vocab_size == 30523 and start.fmt == fmt
    assert start.new_rows == NewRowsOnly(5, (1, 30522))
    assert set(start.trainer_args()) == {"warm_start_fn", "new_rows"}
    model = BertPretrainingModel(config, use_nsp=False)
    with caplog.at_level(logging.INFO, logger="absl"):
        start.warm_start(model)
    resized = formats.read_model(fmt, path, None, vocab)
    loaded = get_weights(pretraining_weight_map(model))
    assert sorted(loaded) == sorted(n for n in resized.weights if not n.startswith("nsp/"))
    for name, value in loaded.items():
        np.testing.assert_array_equal(value, resized.weights[name], err_msg=name)
    assert any("2 checkpoint weights UNUSED by this model: nsp/bias, nsp/kernel"
               in r.getMessage() for r in caplog.records)
    start.write_vocab(os.fspath(tmp_path))
    assert (tmp_path / "vocab.txt").read_text() == open(vocab).read()
    # A vocab_size that is neither the checkpoint's nor the vocabulary's; no new rows.
    with pytest.raises(UserError, match="vocab_size=30000 in --bert_config_file is neither"):
        continued_pretraining.plan(path, vocab, BertConfig.from_dict({**TINY,
                                                                      "vocab_size": 30000}), "")
    with pytest.raises(UserError, match="--train_only_new_embeddings_steps needs new "
                                        "vocabulary rows"):
        continued_pretraining.plan(path, google_vocab_path, base, "", 5)


# ------------------------------------------------------------------ new rows only


def _new_rows_trainer(output_dir, num_steps, steps_per_loop, new_rows):
    bert = tiny_bert_config()
    opt = optimization.OptimizerConfig(learning_rate=1e-2, num_train_steps=6,
                                       num_warmup_steps=0, weight_decay_rate=0.1)
    return trainer.Trainer(
        trainer.TrainerConfig(output_dir=os.fspath(output_dir), train_batch_size=8,
                              num_train_steps=num_steps, save_checkpoints_steps=100,
                              log_every_n_steps=100, steps_per_loop=steps_per_loop,
                              # XLA, as for the models users extend (train_loop's size rule)
                              use_xla=False, xla_optimizer=True),
        tf.distribute.OneDeviceStrategy("/cpu:0"),
        model_fn=lambda: BertPretrainingModel(bert),
        optimizer_fn=lambda: optimization.create_optimizer(opt), new_rows=new_rows)


def test_only_the_new_rows_move_for_n_steps_then_everything_trains(tmp_path):
    new = NewRowsOnly(3, (5, 77, 127))
    examples = synthetic_examples(64, seed=3)
    # The phase's 3 steps, in calls of 2 and 1 steps...
    first = _new_rows_trainer(tmp_path, 3, 2, new)
    start = get_weights(pretraining_weight_map(first.model))
    first.train(blocks_dataset_fn(examples))
    after = get_weights(pretraining_weight_map(first.model))
    for name, value in start.items():
        if name in vocab_resize.VOCAB_ROWS:
            rows = list(new.new_ids)
            held = np.delete(np.arange(value.shape[0]), rows)
            np.testing.assert_array_equal(after[name][held], value[held], err_msg=name)
            changed = after[name][rows] != value[rows]
            assert np.all(changed.any(axis=-1) if changed.ndim > 1 else changed), name
        else:  # bit for bit: no Adam step, no weight decay
            np.testing.assert_array_equal(after[name], value, err_msg=name)
    # ... the moments of frozen weights did follow their gradients (see new_rows_only).
    kernel = pretraining_weight_map(first.model)["layer_0/intermediate/kernel"].variable
    moments = [v for v in first.optimizer.variables  # its m and v slots
               if kernel.path.replace("/", "_") in v.path]
    assert len(moments) == 2 and all(np.any(v.numpy() != 0) for v in moments)
    # ... then a resumed run trains every weight from step 3.
    resumed = _new_rows_trainer(tmp_path, 5, 2, new)
    assert resumed.train(blocks_dataset_fn(examples)).start_step == 3
    moved = get_weights(pretraining_weight_map(resumed.model))
    assert [n for n in moved if np.array_equal(moved[n], after[n])] == []


def test_a_call_across_the_end_of_the_phase_runs_in_both_graphs(tmp_path):
    """`train_loop` splits a call at the phase's end (no tracing: the graphs are faked)."""
    steps = _new_rows_trainer(tmp_path, 6, 4, NewRowsOnly(3, (5,))).steps
    calls = []

    def fake_loop(iterator, num_steps, new_rows_only=False):
        n = int(num_steps)
        calls.append((n, new_rows_only))
        # "nan": the phase's graph stops before its first step ends (a non-finite loss).
        losses = [] if iterator == "nan" and new_rows_only else [1.0] * n
        steps.step.assign_add(len(losses))
        return tf.constant(losses), {k: tf.constant(float(n)) for k in steps.keys}

    steps._loop = fake_loop
    losses, sums = steps.train_loop("data", tf.constant(2))  # steps 0-1: the phase
    assert calls == [(2, True)] and len(losses) == 2
    losses, sums = steps.train_loop("data", tf.constant(4))  # step 2, then 3-5
    assert calls[1:] == [(1, True), (3, False)] and len(losses) == 4
    assert all(float(v) == 4.0 for v in sums.values())
    losses, _ = steps.train_loop("data", tf.constant(2))  # after the phase
    assert calls[3:] == [(2, False)]
    steps.step.assign(2)  # a loss that is not finite ends the call in the phase
    losses, _ = steps.train_loop("nan", tf.constant(4))
    assert calls[4:] == [(1, True)] and len(losses) == 0


def test_new_rows_only_is_refused_without_new_rows():
    with pytest.raises(UserError, match="--train_only_new_embeddings_steps needs new "
                                        "vocabulary rows"):
        NewRowsOnly(2, ())
    assert NewRowsOnly(0, ()).steps_left(0) == 0
    assert NewRowsOnly(4, (1,)).steps_left(1) == 3


# ------------------------------------------------------------------ exports


@pytest.mark.slow  # exports a SavedModel with a 30,522-token in-graph tokenizer (~30 s)
def test_exports_carry_the_extended_vocabulary(google_vocab_path, tmp_path):
    import tensorflow_text  # noqa: F401 (registers the SavedModel's tokenizer ops)

    from bert_tf.export.saved_model import export_saved_model

    keras.utils.set_random_seed(5)
    path = _write_checkpoint("bert_tf", tmp_path / "base", google_vocab_path)
    vocab = extended_vocab(google_vocab_path, tmp_path / "v.txt", unused=["covid"],
                           append=["##umab", "genomics"])
    resized = tmp_path / "resized"
    formats.convert("bert_tf", "bert_tf", path, os.fspath(resized), vocab_file=vocab)
    files = read_native(os.fspath(resized))
    model = BertPretrainingModel(files.config)
    for name, weight in pretraining_weight_map(model).items():
        weight.assign(files.weights[name], name)
    export_dir = os.fspath(tmp_path / "saved")
    export_saved_model(model, vocab, True, export_dir, max_seq_length=32, with_fill_mask=False)
    text = "Covid patients got Adalimumab; genomics labs too."
    served = tf.saved_model.load(export_dir).signatures["serving_default"](
        text_a=tf.constant([text]))
    tokenizer = FullTokenizer(vocab)
    expected = [101] + tokenizer.encode(text) + [102]
    # The three new tokens are used: ids 1 ([unused0]), 30522 and 30523.
    assert [tokenizer.inv_vocab[i] for i in expected[1:11]] == [
        "covid", "patients", "got", "ada", "##lim", "##umab", ";", "genomics", "labs", "too"]
    assert {1, 30522, 30523} <= set(expected)
    assert served["input_ids"].numpy()[0, :len(expected)].tolist() == expected
    # A keras-hub preset: its tokenizer's vocabulary and the backbone's vocabulary_size.
    from bert_tf.export.keras_hub_preset import export_keras_hub_preset

    preset = os.fspath(tmp_path / "preset")
    export_keras_hub_preset(model.encoder, vocab, True, preset, 32, preset_tokenizer="exact")
    with open(os.path.join(preset, "assets", "tokenizer", "vocabulary.txt"),
              encoding="utf-8") as f:
        assert f.read().split("\n")[:30524] == open(vocab, encoding="utf-8").read().split(
            "\n")[:30524]
    with open(os.path.join(preset, "config.json")) as f:
        assert json.load(f)["config"]["vocabulary_size"] == 30524
    import keras_hub

    import bert_tf.export.preset_tokenizer  # noqa: F401 (an exact preset's documented import)

    preset_ids = keras_hub.models.BertTokenizer.from_preset(preset)([text])
    assert [int(i) for i in np.asarray(preset_ids)[0]] == expected[1:-1]
    # ... and continued pretraining from the preset finds its vocabulary there.
    more = extended_vocab(vocab, tmp_path / "more.txt", append=["sars"])
    config, start = continued_pretraining.plan(preset, more, files.config, "")
    assert (start.fmt, start.change.new_ids, config.vocab_size) == ("keras_hub", (30524,), 30525)
    # Google and Hugging Face exports: the new vocab.txt, the resized matrices, the ids (an
    # HF directory's tokenizer.json, as transformers' AutoTokenizer loads it).
    from tokenizers import Tokenizer

    for fmt in ("google", "hf"):
        out = os.fspath(tmp_path / fmt)
        formats.convert("bert_tf", fmt, os.fspath(resized), out)
        assert open(os.path.join(out, "vocab.txt")).read() == open(vocab).read()
        if fmt == "hf":
            fast = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
            assert fast.encode(text).ids == expected
        else:  # Google's format is the vocabulary alone (the casing is a flag)
            assert [101] + FullTokenizer(os.path.join(out, "vocab.txt")).encode(text) + [
                102] == expected
        back = formats.read_model(fmt, out)
        for name in vocab_resize.VOCAB_ROWS:
            assert back.weights[name].shape[0] == 30524
            np.testing.assert_array_equal(back.weights[name], files.weights[name])
