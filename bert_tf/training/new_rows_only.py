"""`--train_only_new_embeddings_steps`: the first steps train only the new vocabulary rows.

After a vocabulary is extended (`bert_tf.interop.vocab_resize`), exBERT-style recipes first
train the new WordPieces' rows alone, on a frozen model, so that the poorly initialised rows
do not push the pretrained weights around; then full continued pretraining follows. Here the
rows trained in that phase are the new rows of the word embeddings and of the MLM output bias
(the bias is the new tokens' prior in the output softmax: the pieces' mean is only a guess of
it, and it touches no base token's weight).

The mechanism is the smallest that keeps the trainer's guarantees. The optimizer runs exactly
as in full training (one optimizer, one step counter, every moment updated from the real
gradients), and right after its update every weight except the new rows is put back to the
value it had before the step, bit for bit: the Adam step, the decoupled weight decay and
LAMB's trust ratio all move nothing else. Assigning back goes through the strategy's
per-variable update, as the optimizer's own update does, so it holds under every
tf.distribute strategy; the phase is a function of the checkpointed step, so a resumed run
continues it exactly.

Why the moments are still updated for frozen weights: Keras counts Adam's bias correction
with one global step. Moments held at zero for N steps and then started would be corrected as
if they had N steps of history, giving updates several times too large for hundreds of steps
after the phase ends. Updated moments make the first full step the step it would have been.

Cost: the phase's steps hold one copy of the trainable weights (the values to put back) and
run the same forward and backward pass as full training; the steps after it run a separate
graph without any of this (`StepFunctions` traces both).
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple

import keras
import numpy as np
import tensorflow as tf

from bert_tf.core.errors import UserError


@dataclasses.dataclass(frozen=True)
class NewRowsOnly:
    """The first `num_steps` optimizer steps update only the rows `new_ids`.

    Attributes:
        num_steps: steps 0..num_steps-1 (counted by the trainer's global step) train only
            the new rows; full training follows.
        new_ids: ids of the new vocabulary rows (`vocab_resize.VocabChange.new_ids`).
    """

    num_steps: int
    new_ids: Tuple[int, ...]

    def __post_init__(self) -> None:
        if self.num_steps < 0:
            raise UserError(f"--train_only_new_embeddings_steps must be >= 0, got "
                            f"{self.num_steps}")
        if self.num_steps and not self.new_ids:
            raise UserError("--train_only_new_embeddings_steps needs new vocabulary rows: give "
                            "--init_checkpoint and an extended --vocab_file")

    def steps_left(self, step: int) -> int:
        """Steps of the phase still to run from global step `step` (0 once it is over)."""
        return max(self.num_steps - step, 0)

    def bind(self, model) -> "FrozenWeights":
        """The weights of `model` (a `BertPretrainingModel`) to hold during the phase."""
        from bert_tf.modeling import weight_map

        mapped = weight_map.pretraining_weight_map(model)
        rows = {}
        for name in ("embeddings/word_embeddings", "mlm/output_bias"):
            variable = mapped[name].variable
            keep = np.ones(variable.shape[0], bool)
            if max(self.new_ids) >= keep.size:
                raise UserError(f"new row id {max(self.new_ids)} is beyond the {keep.size} "
                                f"rows of {name}")
            keep[list(self.new_ids)] = False
            rows[id(variable)] = keep
        return FrozenWeights(model.trainable_variables, rows)


class FrozenWeights:
    """Puts the frozen weights back after an optimizer update (see the module docstring).

    Args:
        variables: the model's trainable variables, in the order `snapshot` and `restore`
            receive their values.
        rows: {id(variable): bool [rows], True where the row is held} for the variables of
            which only some rows train; every other variable is held whole.
    """

    def __init__(self, variables: Sequence, rows: dict):
        self.variables = list(variables)
        self.keep = [rows.get(id(v)) for v in self.variables]

    def snapshot(self) -> List[tf.Tensor]:
        """This replica's values of the variables before the update (reads, in order)."""
        return [tf.identity(_tf_variable(v)) for v in self.variables]

    def restore(self, values: List[tf.Tensor]) -> None:
        """Assigns the held weights (and rows) back from `snapshot`'s values.

        Called in the replica context (or without a strategy); the assignments go through
        `strategy.extended.update` in a merge call, the way Keras' TF optimizer applies its
        own updates.
        """

        def put_back(strategy, values):
            for variable, keep, value in zip(self.variables, self.keep, values):
                strategy.extended.update(_tf_variable(variable), _assign_back,
                                         args=(value, keep), group=False)

        tf.__internal__.distribute.interim.maybe_merge_call(
            put_back, tf.distribute.get_strategy(), values)


def _tf_variable(variable):
    """The tf.Variable under a Keras variable (what tf.distribute updates)."""
    return variable.value if isinstance(variable, keras.Variable) else variable


def _assign_back(variable, old, keep: Optional[np.ndarray]):
    if keep is None:
        return variable.assign(old)
    # Rows along the first axis; broadcast over the hidden axis of the embeddings.
    mask = tf.reshape(tf.constant(keep), [-1] + [1] * (len(variable.shape) - 1))
    return variable.assign(tf.where(mask, old, variable))
