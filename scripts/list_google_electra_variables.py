"""Lists the variables google-research/electra's pretraining model creates: names and shapes.

Builds `run_pretraining.PretrainingModel` of google-research/electra (its own code, in graph
mode) for ELECTRA-Small with 2 layers (`model_hparam_overrides`), the defaults otherwise
(embedding_size 128, a generator a quarter as wide, the embeddings shared), and writes every
variable it creates, one "name<TAB>shape" per line, to
tests/data/google_electra/variables.tsv: the reference of `tests/test_google_electra.py`.
No optimizer is built, so the list has no adam_m/adam_v slots nor global_step.

Two shims let the TF1 code run on TensorFlow 2 with Keras 3:

* `tf.compat.v1.layers.dense` needs the legacy Keras (`tf_keras`, with
  TF_USE_LEGACY_KERAS=1);
* `tf.estimator` is gone (util/training_utils.py subclasses its `SessionRunHook` at
  import; nothing here runs a session): a namespace with `SessionRunHook = object`;
* `tensorflow.contrib` is gone: `contrib_layers.layer_norm` is replaced by a function that
  creates what it created, `beta` and `gamma` in a variable scope named by its `scope`
  argument or else "LayerNorm".

    git clone https://github.com/google-research/electra /tmp/electra   # 8a46635f, 2021-03-31
    pip install --no-deps --target /tmp/tfk tf_keras==2.21.0
    PYTHONPATH=/tmp/tfk TF_USE_LEGACY_KERAS=1 .venv/bin/python \\
        scripts/list_google_electra_variables.py --electra_dir=/tmp/electra
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import types

ROOT = pathlib.Path(__file__).resolve().parent.parent
VOCAB_SIZE = 30522
LAYERS = 2


def _contrib_shim(tf) -> None:
    def layer_norm(inputs, begin_norm_axis=-1, begin_params_axis=-1, scope=None):
        with tf.variable_scope(scope, "LayerNorm", [inputs]):
            width = inputs.shape[-1]
            beta = tf.get_variable("beta", [width], initializer=tf.zeros_initializer())
            gamma = tf.get_variable("gamma", [width], initializer=tf.ones_initializer())
            mean, variance = tf.nn.moments(inputs, [-1], keepdims=True)
            return tf.nn.batch_normalization(inputs, mean, variance, beta, gamma, 1e-12)

    contrib = types.ModuleType("tensorflow.contrib")
    contrib.layers = types.ModuleType("tensorflow.contrib.layers")
    contrib.layers.layer_norm = layer_norm
    sys.modules["tensorflow.contrib"] = contrib
    sys.modules["tensorflow.contrib.layers"] = contrib.layers
    tf.estimator = types.SimpleNamespace(SessionRunHook=object)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--electra_dir", required=True)
    parser.add_argument("--output", default=str(ROOT / "tests" / "data" / "google_electra"
                                               / "variables.tsv"))
    args = parser.parse_args()
    import tensorflow.compat.v1 as tf

    tf.disable_eager_execution()
    _contrib_shim(tf)
    sys.path.insert(0, args.electra_dir)
    import configure_pretraining
    import run_pretraining

    data_dir = tempfile.mkdtemp()
    with open(os.path.join(data_dir, "vocab.txt"), "w") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                          + [f"w{i}" for i in range(VOCAB_SIZE - 5)]) + "\n")
    config = configure_pretraining.PretrainingConfig(
        "list_variables", data_dir, model_size="small",
        model_hparam_overrides={"num_hidden_layers": LAYERS})
    batch, seq = 2, 16
    features = {name: tf.placeholder(tf.int32, [batch, seq])
                for name in ("input_ids", "input_mask", "segment_ids")}
    run_pretraining.PretrainingModel(config, features, is_training=True)
    lines = [f"{v.op.name}\t{v.shape.as_list()}" for v in tf.global_variables()]
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} variables to {args.output}")


if __name__ == "__main__":
    main()
