"""Run health: stop a run whose training loss diverges, and say what to do.

The trainer hands every host loop's per-step losses to a `DivergenceDetector` before it
saves anything. Two things stop the run:

- a NaN or Inf loss, at any step (the warmup included): nothing sensible follows it;
- a spike: after warmup, the mean loss of a loop (the steps between two host boundaries,
  `--steps_per_loop` or fewer) above `threshold` times the run's recent level, and at least
  `min_increase` nats above it. A loop shorter than `spike_steps` (3) steps is judged by
  the median loss of the last `spike_steps` steps instead, so that one hard batch does not
  stop the run: with `--steps_per_loop=1` (fine-tuning's default) a loop is one batch, and
  one batch of 32 STS-B pairs can read twice its recent level while the run is healthy.
  With the median, two of the last three steps must be above the bar.

The recent level is the MEDIAN of the last `window` loop means. The median, not the mean, so
that one earlier spike that did not trip (during warmup, say) does not raise the bar for the
next; and not the minimum, so that one lucky batch does not lower it: with small batches a
single step's loss is noisy, and the minimum of ten noisy values sits well below their
typical value, which would turn ordinary noise into a "spike". A loss that falls (the
normal case) is below its recent median by construction. A slow climb moves the median with
it and does not trip: this is a rule for blow-ups, which take a few steps.

`min_increase` (1 nat) keeps the factor from acting on small losses: a fine-tuning loss at
0.05 may read 0.2 on a hard batch, four times its level and harmless; a pretraining MLM loss
stays above 1 nat, where the factor alone decides.

The rule sees the losses the train loop already all-reduced over the global batch, which are
bit-identical on every worker of a multi-worker run: every worker takes the same decision at
the same step, so none is left waiting in a collective while another stops.

Which checkpoint is good. The loss of step s is computed on the weights after s - 1 updates,
so the first bad loss, at step b, already condemns the state saved at step b - 1: the last
good checkpoint is the newest one saved at step b - 2 or before (its next loss was healthy).
The run stops without saving the state of the loop that holds the step that confirms the
spike (b itself, or up to `spike_steps - 1` steps later for short loops). Rotation must not
have deleted the good one either when the newest checkpoints turn out to be condemned
states: the trainer's checkpoint manager keeps `EXTRA_CHECKPOINTS` more than
`keep_checkpoint_max`, and `CheckpointRetention` deletes those only once the detector
vouches for the newest state (no step a later window could date a spike at is above the
bar), or when the run ends. `stop_message` makes the good checkpoint the latest of the
run's index (the condemned files stay on disk, out of it), so that a rerun with the same
output_dir, at a lower learning rate say, resumes from the good state.
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from collections import deque
from typing import Deque, Optional, Sequence, Tuple

from bert_tf.core.errors import UserError

# A diverged run's loss goes back to the unigram level or beyond (several times a trained
# model's); an ordinary loop mean stays within tens of percent of its recent median.
DEFAULT_THRESHOLD = 2.0
# Loop means whose median is the recent level.
DEFAULT_WINDOW = 10
# Loop means needed before the spike rule acts (a resumed run starts with none).
DEFAULT_MIN_HISTORY = 3
# The spike must also be this many nats above the level (see the module docstring).
DEFAULT_MIN_INCREASE = 1.0
# A loop shorter than this is judged by the median of the last this-many step losses.
DEFAULT_SPIKE_STEPS = 3
# Checkpoints kept beyond keep_checkpoint_max until the detector vouches for the newest.
EXTRA_CHECKPOINTS = DEFAULT_SPIKE_STEPS
ADVICE = ("try a lower --learning_rate or a longer warmup (--num_warmup_steps; "
          "--warmup_proportion when fine-tuning)")


def check_threshold(threshold: float) -> None:
    """Raises UserError unless `threshold` is 0 (spike rule off) or a factor above 1."""
    if not (threshold == 0 or threshold > 1):
        raise UserError(f"--divergence_threshold must be 0 (off) or above 1, got {threshold}")


def _step_of(checkpoint_path: str) -> int:
    match = re.search(r"-(\d+)$", checkpoint_path)
    return int(match.group(1)) if match else -1


@dataclasses.dataclass(frozen=True)
class Divergence:
    """Why a run stops.

    Attributes:
        step: the first bad step: non-finite, or (a spike) above the bar by itself.
        loss: that step's loss.
        level: the recent level it was compared with (NaN for a non-finite loss).
    """

    step: int
    loss: float
    level: float = math.nan

    @property
    def non_finite(self) -> bool:
        return not math.isfinite(self.loss)

    def last_good_checkpoint(self, checkpoints: Sequence[str]) -> Optional[str]:
        """The newest of `checkpoints` (prefixes `.../ckpt-<step>`) saved at step - 2 or
        before, whose next loss was healthy; None if there is none."""
        good = [path for path in checkpoints if 0 <= _step_of(path) <= self.step - 2]
        return max(good, key=_step_of) if good else None

    def message(self, checkpoints: Sequence[str]) -> str:
        """The one line of the run's `error:` (no newline).

        Args:
            checkpoints: the run's checkpoint prefixes on disk.
        """
        if self.non_finite:
            what = f"non-finite loss ({self.loss}) at step {self.step}"
        else:
            what = (f"loss diverged at step {self.step}: {self.loss:.4g}, "
                    f"{self.loss / self.level:.1f}x its recent level {self.level:.4g}")
        good = self.last_good_checkpoint(checkpoints)
        before = [path for path in checkpoints if 0 <= _step_of(path) < self.step]
        if good:
            where = f"last good checkpoint: {good}, kept; a rerun resumes from it"
        elif before:  # only the state that gave this loss
            where = (f"last checkpoint: {max(before, key=_step_of)}, the state that gave this "
                     "loss")
        else:
            where = "no checkpoint saved before it"
        return f"{what}; stopped without saving it ({where}); {ADVICE}"


def stop_message(divergence: Divergence, output_dir: str, write: bool) -> str:
    """Makes the last good checkpoint the latest of output_dir's index; returns the message.

    Args:
        divergence: why the run stops.
        output_dir: the run's checkpoints.
        write: rewrite the index (the chief worker only).
    """
    import tensorflow as tf  # here: the detector itself does not need TensorFlow

    state = tf.train.get_checkpoint_state(output_dir)
    checkpoints = list(state.all_model_checkpoint_paths) if state else []
    good = divergence.last_good_checkpoint(checkpoints)
    if write and good and good != state.model_checkpoint_path:
        tf.compat.v1.train.update_checkpoint_state(output_dir, good, [
            path for path in checkpoints if _step_of(path) <= _step_of(good)])
    return divergence.message(checkpoints)


class CheckpointRetention:
    """Deletes the checkpoints kept beyond `keep` once the newest one is vouched for.

    The trainer's checkpoint manager keeps keep + EXTRA_CHECKPOINTS checkpoints; call
    `saved` after each save and `vouched` after each loop that the detector vouches for
    (`DivergenceDetector.vouches`) and at the end of a run: the oldest checkpoints beyond
    `keep` are then deleted (the manager would delete them at a later save anyway, so its
    own list and the index stay consistent).

    Args:
        output_dir: the run's checkpoints.
        keep: keep_checkpoint_max.
        write: delete (the chief worker only; the others keep no checkpoint).
    """

    def __init__(self, output_dir: str, keep: int, write: bool):
        self.output_dir = output_dir
        self.keep = keep
        self._write = write
        self._pending = False

    def saved(self) -> None:
        self._pending = True

    def vouched(self) -> None:
        """The newest checkpoint's state gave a healthy loss (or the run ended)."""
        if not (self._pending and self._write):
            return
        self._pending = False
        import tensorflow as tf  # here: the detector itself does not need TensorFlow

        state = tf.train.get_checkpoint_state(self.output_dir)
        paths = list(state.all_model_checkpoint_paths) if state else []
        if len(paths) <= self.keep:
            return
        for old in paths[:-self.keep]:
            for path in tf.io.gfile.glob(old + ".index") + tf.io.gfile.glob(old + ".data-*"):
                tf.io.gfile.remove(path)
        tf.compat.v1.train.update_checkpoint_state(self.output_dir, paths[-1],
                                                   paths[-self.keep:])


class DivergenceDetector:
    """Watches the per-step losses of a run, loop by loop (pure Python; see the module doc).

    Args:
        threshold: a loop mean above threshold x the recent level stops the run; 0 turns the
            spike rule off (non-finite losses still stop it).
        warmup_steps: the spike rule acts only on loops that start after this step.
        window: loop means whose median is the recent level.
        min_history: loop means needed before the spike rule acts.
        min_increase: the spike must also exceed the level by this many nats.
        spike_steps: a loop of fewer steps is judged by the median of the last spike_steps
            step losses (1: every loop by its own mean).
    """

    def __init__(self, threshold: float = DEFAULT_THRESHOLD, warmup_steps: int = 0,
                 window: int = DEFAULT_WINDOW, min_history: int = DEFAULT_MIN_HISTORY,
                 min_increase: float = DEFAULT_MIN_INCREASE,
                 spike_steps: int = DEFAULT_SPIKE_STEPS):
        check_threshold(threshold)
        if not 1 <= min_history <= window:
            raise ValueError(f"need 1 <= min_history <= window, got {min_history}, {window}")
        if spike_steps < 1:
            raise ValueError(f"need spike_steps >= 1, got {spike_steps}")
        self.threshold = threshold
        self.warmup_steps = warmup_steps
        self.min_history = min_history
        self.min_increase = min_increase
        self.spike_steps = spike_steps
        self._means: Deque[float] = deque(maxlen=window)
        # The last spike_steps step losses, (step, loss), across loops.
        self._steps: Deque[Tuple[int, float]] = deque(maxlen=spike_steps)
        self._vouches = True

    def vouches(self) -> bool:
        """Whether the last loop observed (healthy) vouches for the newest checkpoint: no
        step that a later window could still date a divergence at is above the bar."""
        return self._vouches

    def level(self) -> Optional[float]:
        """The recent level (median of the last loop means), None before min_history."""
        if len(self._means) < self.min_history:
            return None
        return statistics.median(self._means)

    def _too_high(self, loss: float, level: float) -> bool:
        return loss > self.threshold * level and loss - level >= self.min_increase

    def observe(self, first_step: int, losses: Sequence[float]) -> Optional[Divergence]:
        """Takes one loop's losses; says whether the run must stop.

        Args:
            first_step: the global step of losses[0] (steps count from 1).
            losses: the loss of each step of the loop, in order.

        Returns:
            The divergence, or None when the loop is healthy (its mean then joins the
            history).
        """
        values = [float(x) for x in losses]
        if not values:
            return None
        for i, value in enumerate(values):
            if not math.isfinite(value):
                return Divergence(first_step + i, value)
        mean = math.fsum(values) / len(values)
        level = self.level()
        self._vouches = True
        # Only steps after warmup are judged (and can date a divergence).
        self._steps.extend((first_step + i, value) for i, value in enumerate(values)
                           if first_step + i > self.warmup_steps)
        if not self.threshold or level is None:
            self._means.append(mean)
            return None
        if len(values) >= self.spike_steps:
            window = list(self._steps)[-len(values):] if first_step > self.warmup_steps else []
            judged = mean
        else:
            window = list(self._steps)
            judged = (statistics.median(loss for _, loss in window)
                      if len(window) == self.spike_steps else None)
        if judged is not None and window and self._too_high(judged, level):
            # The judged value is above the bar, so at least one step of its window is:
            # the first of them.
            step, loss = next((step, loss) for step, loss in window
                              if self._too_high(loss, level))
            return Divergence(step, loss, level)
        # A short loop's steps above the bar may still be the start of a spike that a later
        # window confirms, dated at its first step: until they leave the window, the newest
        # checkpoint is not vouched for.
        if len(values) < self.spike_steps:
            pending = list(self._steps)[-(self.spike_steps - 1):]
            self._vouches = not any(self._too_high(loss, level) for _, loss in pending)
        self._means.append(mean)
        return None
