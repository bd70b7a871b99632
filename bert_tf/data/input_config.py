"""The settings of the pretraining input pipeline, shared by the pipeline and its checks.

`bert_tf.data.input_validation` checks files against an `InputConfig` and
`bert_tf.data.input_pipeline` builds the tf.data pipeline from one; keeping the config in its
own module lets both import it without importing each other.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple, Union

from bert_tf.core import masking_rules
from bert_tf.core.errors import UserError
from bert_tf.data.corrupt_records import CorruptRecords


@dataclasses.dataclass(frozen=True)
class InputFiles:
    """The resolved input: files, the compression of each, the feature naming and set."""

    files: Tuple[str, ...]
    compressions: Tuple[str, ...]
    use_v2_feature_names: bool
    # Per file, the bytes of TFRecord frames it holds (for gzip, the decompressed size mod
    # 2^32, from its trailer); the pipeline compares them with what it read to find a file
    # that ended early at a damaged record. Empty: not checked.
    frame_bytes: Tuple[int, ...] = ()
    # The records are packed rows (`doc_ids` and `position_ids` too: bert_tf.core.schema).
    packed: bool = False

    def frame_bytes_or_unchecked(self) -> Tuple[int, ...]:
        """frame_bytes per file, -1 for every file when they were not read (not checked)."""
        return self.frame_bytes or (-1,) * len(self.files)


_COMPRESSIONS = ("auto", "", "GZIP")

# Masked-LM evaluation of a run that masks dynamically: one rate and one seed for every run,
# whatever --masked_lm_prob and --seed it trains with, so that their held-out figures compare.
# The rate is BERT's (what create_pretraining_data writes by default); runs on static records
# are evaluated on the records' own masks.
EVAL_MASKED_LM_PROB = 0.15
EVAL_MASKING_SEED = 15


def eval_masking(masking: masking_rules.MaskingConfig) -> masking_rules.MaskingConfig:
    """The eval input's masking for a run that trains with `masking`: the same vocabulary
    ids and whole-word setting, at EVAL_MASKED_LM_PROB."""
    return dataclasses.replace(masking, masked_lm_prob=EVAL_MASKED_LM_PROB)


@dataclasses.dataclass(frozen=True)
class InputConfig:
    """Settings of the pretraining input pipeline.

    Attributes:
        input_patterns: comma-separated globs of TFRecord files (`gs://` allowed).
        batch_size: examples per batch PER REPLICA (the global batch divided by replicas).
        max_seq_length: length of input_ids/input_mask/segment_ids in the files.
        max_predictions_per_seq: length of the masked_lm_* features in the files.
        vocab_size: every token id must be below it.
        is_training: shuffle + repeat (True) or one ordered pass (False).
        seed: drives file order, record shuffling and dynamic masks.
        shuffle_buffer_size: records in the shuffle buffer (training).
        cycle_length: files read in parallel.
        compression: "auto" (detect gzip from each file's magic bytes), "" or "GZIP".
        use_v2_feature_names: "auto" (detect from the first record), True or False.
        packed: whether the records are packed rows (`doc_ids` and `position_ids` too):
            "auto" (detect from the first record read; with validate_files False and a
            fixed use_v2_feature_names none is read, and "auto" means False), True or False.
        masking: draw new masks with these settings (dynamic masking); None keeps the
            stored masks. Training draws fresh masks every batch (every epoch differs); eval
            (is_training False) draws one mask per record from `seed` and the record's place,
            the same at every evaluation (give it `eval_masking(...)` and
            `EVAL_MASKING_SEED`, so that runs trained at any rate score the same masks).
        drop_remainder: drop the last partial batch, giving fully static shapes (use True for
            training; for eval False keeps every example).
        validate_files: read the first record of each file before building the pipeline.
        resolved_files: the result of `validate_input_files(config)` when the caller already
            has it, so that building the pipeline (once per input pipeline, for train and
            eval) does not expand the globs and read every file's first record again.
        skip_corrupt_records: go on past a damaged record (TensorFlow's reader then skips
            the rest of its file for that pass) instead of stopping; `corrupt_records` counts
            what was skipped.
        corrupt_records: the count of skipped records (set by the config when
            skip_corrupt_records; kept by `dataclasses.replace`).
        input_position: how training finds its place when resumed: "iterator" (a shuffle
            buffer; the trainer saves the tf.data iterator) or "arithmetic" (a seeded file
            order and window shuffle, reopened at a computed record: see
            `bert_tf.data.record_positions`).
        record_counts: per file of resolved_files, its records (arithmetic positions need
            them; `record_positions.with_counts` fills them in).
    """

    input_patterns: str
    batch_size: int
    max_seq_length: int
    max_predictions_per_seq: int
    vocab_size: int
    is_training: bool = True
    seed: int = 12345
    shuffle_buffer_size: int = 10000
    cycle_length: int = 8
    compression: str = "auto"
    use_v2_feature_names: Union[str, bool] = "auto"
    packed: Union[str, bool] = "auto"
    masking: Optional[masking_rules.MaskingConfig] = None
    drop_remainder: bool = True
    validate_files: bool = True
    resolved_files: Optional[InputFiles] = None
    skip_corrupt_records: bool = False
    corrupt_records: Optional[CorruptRecords] = dataclasses.field(default=None, compare=False)
    input_position: str = "iterator"
    record_counts: Optional[Tuple[int, ...]] = None

    @property
    def arithmetic_position(self) -> bool:
        """Training reads in the arithmetic order (input_position applies to training only)."""
        return self.is_training and self.input_position == "arithmetic"

    def __post_init__(self) -> None:
        if self.skip_corrupt_records and self.corrupt_records is None:
            object.__setattr__(self, "corrupt_records", CorruptRecords())
        for name in ("batch_size", "max_seq_length", "vocab_size", "shuffle_buffer_size",
                     "cycle_length"):
            if getattr(self, name) <= 0:
                raise UserError(f"--{name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.max_predictions_per_seq <= self.max_seq_length:
            raise UserError(
                f"--max_predictions_per_seq={self.max_predictions_per_seq} must be in "
                f"[0, --max_seq_length={self.max_seq_length}]"
            )
        if self.compression.lower() == "gzip":  # data_tools' --output_compression spelling
            object.__setattr__(self, "compression", "GZIP")
        if self.input_position not in ("iterator", "arithmetic"):
            raise UserError(f"--input_position must be iterator or arithmetic, got "
                            f"{self.input_position!r}")
        if self.compression not in _COMPRESSIONS:
            raise UserError(f"compression must be one of {_COMPRESSIONS}, got {self.compression!r}")
        if self.packed not in ("auto", True, False):
            raise UserError(f"packed must be 'auto', True or False, got {self.packed!r}")
        if self.use_v2_feature_names not in ("auto", True, False):
            raise UserError(
                f"use_v2_feature_names must be 'auto', True or False, got "
                f"{self.use_v2_feature_names!r}"
            )
        masking = self.masking
        if masking is not None:
            if masking.vocab_size > self.vocab_size:
                raise UserError(f"masking.vocab_size={masking.vocab_size} exceeds "
                                f"vocab_size={self.vocab_size}")
            if masking.max_predictions_per_seq != self.max_predictions_per_seq:
                raise UserError(
                    f"masking.max_predictions_per_seq={masking.max_predictions_per_seq} differs "
                    f"from max_predictions_per_seq={self.max_predictions_per_seq}")
