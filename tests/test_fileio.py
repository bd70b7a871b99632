"""Tests of bert_tf.core.fileio: pattern expansion errors are one line naming the flag."""

import pytest

from bert_tf.core import fileio
from bert_tf.core.errors import UserError


def test_a_pattern_matching_nothing_names_the_flag(tmp_path):
    with pytest.raises(UserError, match=r"^--input_file: no file matches .*nothing-\*\.txt'$"):
        fileio.expand_patterns(str(tmp_path / "nothing-*.txt"), "input_file")


def test_an_unlistable_remote_pattern_is_one_user_error():
    # No network here (or no such bucket elsewhere): a UserError naming the flag, never a
    # TensorFlow traceback.
    with pytest.raises(UserError, match=r"^--eval_input_file: (cannot list|no file matches) "
                                        r"'gs://bert-tf-no-such-bucket-x/a\*\.tfrecord'"):
        fileio.expand_patterns("gs://bert-tf-no-such-bucket-x/a*.tfrecord", "eval_input_file")
