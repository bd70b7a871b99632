"""The frozen configuration of the create-pretraining-data job (built from flags).

The config checks itself when it is built, so every way in (flags, a notebook, a test) gets
the same one-line `UserError`, named after the command-line flag.
"""

from __future__ import annotations

import dataclasses
from typing import Tuple

from bert_tf.core.errors import UserError
from data_tools.pretraining_data import instances, masking
from data_tools.runtime import sharded_output


@dataclasses.dataclass(frozen=True)
class CreateConfig:
    """Everything the job needs (built from flags by the entry point).

    Attributes:
        input_files: expanded input paths, in order.
        output_files: one path per output shard.
        vocab_file, do_lower_case: the tokenizer.
        packing: how instances are packed (`instances.PackingConfig`).
        masked_lm_prob, max_predictions_per_seq, do_whole_word_mask, whole_word_mask_mode,
            max_ngram_size: masking (see `masking.MaskingConfig`).
        random_seed: seeds every chunk's generator and the shuffle.
        dupe_factor: passes over the data, each with different packing and masks.
        output_compression: "" or "gzip".
        use_v2_feature_names: input_word_ids / input_type_ids instead of v1 names.
        num_workers: processes (1 runs in this process).
        chunk_bytes: text per chunk; the output depends on it (not on num_workers).
        shuffle_memory_bytes: records the global shuffle holds in memory; beyond it they
            are spilled to temporary files (and read back in buckets of at most this size,
            one per worker).
        temp_dir: where the shuffle's temporary directory goes ("": beside local outputs, in
            the machine's temporary directory for remote ones).
        log_examples: decoded instances logged at the start.
        progress_seconds: interval of progress lines.
    """

    input_files: Tuple[str, ...]
    output_files: Tuple[str, ...]
    vocab_file: str
    do_lower_case: bool = True
    packing: instances.PackingConfig = instances.PackingConfig()
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    do_whole_word_mask: bool = False
    whole_word_mask_mode: str = masking.MODE_FIXED
    max_ngram_size: int = 1
    random_seed: int = 12345
    dupe_factor: int = 10
    output_compression: str = ""
    use_v2_feature_names: bool = False
    num_workers: int = 1
    chunk_bytes: int = 512 * 1024
    shuffle_memory_bytes: int = 16 * 2**20
    temp_dir: str = ""
    log_examples: int = 3
    progress_seconds: float = 5.0

    def __post_init__(self) -> None:
        packing = self.packing
        seq = packing.max_seq_length
        if seq < 5:
            raise UserError(f"--max_seq_length={seq}: must be >= 5")
        room = packing.max_num_tokens
        if not 1 <= self.max_predictions_per_seq <= room:
            raise UserError(f"--max_predictions_per_seq={self.max_predictions_per_seq}: must "
                            f"be in [1, {room}] (at most max_seq_length - {seq - room} tokens "
                            "can be masked)")
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise UserError(f"--masked_lm_prob={self.masked_lm_prob}: must be in (0, 1]")
        if packing.packed and packing.nsp:
            raise UserError("--feature_set=packed_mlm is masked LM only: packing.nsp must be "
                            "False")
        if not 0.0 <= packing.short_seq_prob <= 1.0:
            raise UserError(f"--short_seq_prob={packing.short_seq_prob}: must be in [0, 1]")
        if self.dupe_factor < 1:
            raise UserError(f"--dupe_factor={self.dupe_factor}: must be >= 1")
        if not 1 <= self.max_ngram_size <= 16:
            raise UserError(f"--max_ngram_size={self.max_ngram_size}: must be in [1, 16]")
        if self.whole_word_mask_mode not in masking.MODES:
            raise UserError(f"--whole_word_mask_mode={self.whole_word_mask_mode!r}: expected "
                            f"one of {', '.join(masking.MODES)}")
        if self.output_compression not in sharded_output.COMPRESSIONS:
            raise UserError(f"--output_compression={self.output_compression!r}: expected '' "
                            "or 'gzip'")
        if self.num_workers < 1:
            raise UserError(f"--num_workers={self.num_workers}: must be >= 1")
        if self.chunk_bytes < 1:
            raise UserError(f"--chunk_mb={self.chunk_bytes / 1e6}: must be > 0")
        if self.shuffle_memory_bytes < 1:
            raise UserError(f"--shuffle_memory_mb={self.shuffle_memory_bytes / 2**20:g}: must "
                            "be > 0")
