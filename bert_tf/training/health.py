"""Run health: stop a run whose training loss diverges, and say what to do.

The trainer hands every host loop's per-step losses to a `DivergenceDetector` before it
saves anything. Three things stop the run:

- a NaN or Inf loss, at any step (the warmup included): nothing sensible follows it;
- a loss far above what a uniform guess costs (`Objective.uniform_loss`: ln of the
  vocabulary size for the MLM head, + ln 2 for NSP, ln of the number of labels when
  fine-tuning, ...), whatever the recent level, from step 2 on (the warmup included): above
  `absolute_bound(uniform)` = ABSOLUTE_FACTOR x uniform + ABSOLUTE_MARGIN. A run that blows
  up in its first steps has no healthy recent level to be compared with; this bound needs
  none, and it judges the first loss of a resumed run too;
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
good checkpoint is the newest one saved at step b - 2 or before whose next loss was seen
healthy (`bert_tf.training.checkpoint_health` records which, beside the checkpoints).
The run stops without saving the state of the loop that holds the step that confirms the
spike (b itself, or up to `spike_steps - 1` steps later for short loops): a state already
judged diverged is never written. What happens to the checkpoints on disk (retention until
the detector vouches for the newest, the index a rerun resumes from, the condemned files)
is `bert_tf.training.checkpoint_health`'s concern.
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
# The absolute bound: a healthy run starts at about the uniform-guess loss (its heads are
# initialized to near-uniform outputs; a warm-started fine-tune's head is fresh) and falls
# from there; the overshoot of a high but workable learning rate stays within tens of
# percent of it. Three times that cost is no noise level, and the margin keeps heads whose
# uniform cost is small (ln 2 = 0.69 for a binary classifier, where a small batch with two
# confident mistakes reads 2-3 nats) from stopping on a hard batch: above 0.69 x 3 + 5 = 7.1
# nats every example of the batch is confidently wrong. A blown-up run is orders of
# magnitude above: 17,651 at step 5 against 3 x 11.03 + 5 = 38.1 for BERT with NSP.
ABSOLUTE_FACTOR = 3.0
ABSOLUTE_MARGIN = 5.0
# The absolute rule judges the losses after this many steps. Step 1's loss is that of the
# weights the run starts from (random, or --init_checkpoint with a fresh head), which no
# update of the run produced and no checkpoint of it holds; from step 2 on every loss is of
# a state the run made, and it is judged, warmup or not.
ABSOLUTE_GRACE_STEPS = 1
ADVICE = ("try a lower --learning_rate or a longer warmup (--num_warmup_steps; "
          "--warmup_proportion when fine-tuning)")


def check_threshold(threshold: float) -> None:
    """Raises UserError unless `threshold` is 0 (spike rule off) or a factor above 1."""
    if not (threshold == 0 or threshold > 1):
        raise UserError(f"--divergence_threshold must be 0 (off) or above 1, got {threshold}")


def absolute_bound(uniform_loss: float) -> float:
    """The loss above which a run has diverged whatever its recent level (module doc)."""
    return ABSOLUTE_FACTOR * uniform_loss + ABSOLUTE_MARGIN


def step_of(checkpoint_path: str) -> int:
    """The step of a `.../ckpt-<step>` prefix (-1 if it does not follow the pattern)."""
    match = re.search(r"-(\d+)$", checkpoint_path)
    return int(match.group(1)) if match else -1


def format_loss(loss: float) -> str:
    """17651.2 -> "17,651"; 30.0 -> "30"; 3.14159 -> "3.142"."""
    return f"{loss:,.0f}" if abs(loss) >= 1000 else f"{loss:.4g}"


@dataclasses.dataclass(frozen=True)
class Divergence:
    """Why a run stops.

    Attributes:
        step: the first bad step: non-finite, above the absolute bound, or (a spike) above
            the bar by itself.
        loss: that step's loss.
        level: the recent level a spike was compared with (NaN otherwise).
        uniform: the uniform-guess loss whose bound the loss is above (NaN otherwise).
    """

    step: int
    loss: float
    level: float = math.nan
    uniform: float = math.nan

    @property
    def non_finite(self) -> bool:
        return not math.isfinite(self.loss)

    def last_good_checkpoint(self, checkpoints: Sequence[str],
                             vouched_step: float = math.inf) -> Optional[str]:
        """The newest of `checkpoints` (prefixes `.../ckpt-<step>`) whose next loss was
        healthy: saved at step - 2 or before, and at `vouched_step` or before (the newest
        step whose next loss was seen healthy, `checkpoint_health`); None if there is none."""
        good = [path for path in checkpoints
                if 0 <= step_of(path) <= min(self.step - 2, vouched_step)]
        return max(good, key=step_of) if good else None

    def condemned(self, checkpoints: Sequence[str]) -> list:
        """The checkpoints of states at step - 1 or later: their losses were not healthy."""
        return [path for path in checkpoints if step_of(path) >= self.step - 1]

    def message(self, checkpoints: Sequence[str], vouched_step: float = math.inf) -> str:
        """The one line of the run's `error:` (no newline).

        Args:
            checkpoints: the run's checkpoint prefixes on disk (its index).
            vouched_step: see `last_good_checkpoint`.
        """
        if self.non_finite:
            what = f"non-finite loss ({self.loss}) at step {self.step}"
        elif math.isfinite(self.uniform):
            what = (f"loss diverged at step {self.step}: {format_loss(self.loss)}, above "
                    f"{absolute_bound(self.uniform):.3g} ({ABSOLUTE_FACTOR:g} x "
                    f"{self.uniform:.4g}, the loss of a uniform guess, + {ABSOLUTE_MARGIN:g})")
        else:
            what = (f"loss diverged at step {self.step}: {format_loss(self.loss)}, "
                    f"{self.loss / self.level:.1f}x its recent level {self.level:.4g}")
        good = self.last_good_checkpoint(checkpoints, vouched_step)
        condemned = sorted(self.condemned(checkpoints), key=step_of)
        if good:
            where = f"last good checkpoint: {good}, kept; a rerun resumes from it"
        elif condemned:
            names = ", ".join(path.rsplit("/", 1)[-1] for path in condemned)
            where = (f"no good checkpoint: {names} held diverged states, deleted; a rerun "
                     "starts from the initial weights")
        else:
            where = ("no good checkpoint: it diverged before any checkpoint; a rerun starts "
                     "from the initial weights")
        return f"{what}; stopped without saving it ({where}); {ADVICE}"


class Diverged(UserError):
    """The run stopped on a diverged loss; the message is the one line (`Divergence`)."""

    def __init__(self, message: str, divergence: Divergence):
        super().__init__(message)
        self.divergence = divergence


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
        uniform_loss: the objective's uniform-guess loss (`Objective.uniform_loss`); a loss
            above `absolute_bound` of it stops the run after grace_steps, warmup or not,
            with or without history. None: no absolute bound.
        grace_steps: the global steps the absolute rule leaves alone (ABSOLUTE_GRACE_STEPS).
    """

    def __init__(self, threshold: float = DEFAULT_THRESHOLD, warmup_steps: int = 0,
                 window: int = DEFAULT_WINDOW, min_history: int = DEFAULT_MIN_HISTORY,
                 min_increase: float = DEFAULT_MIN_INCREASE,
                 spike_steps: int = DEFAULT_SPIKE_STEPS, uniform_loss: Optional[float] = None,
                 grace_steps: int = ABSOLUTE_GRACE_STEPS):
        check_threshold(threshold)
        if uniform_loss is not None and not uniform_loss > 0:
            raise ValueError(f"need uniform_loss > 0, got {uniform_loss}")
        if not 1 <= min_history <= window:
            raise ValueError(f"need 1 <= min_history <= window, got {min_history}, {window}")
        if spike_steps < 1:
            raise ValueError(f"need spike_steps >= 1, got {spike_steps}")
        self.threshold = threshold
        self.warmup_steps = warmup_steps
        self.min_history = min_history
        self.min_increase = min_increase
        self.spike_steps = spike_steps
        self.uniform_loss = uniform_loss
        self.bound = None if uniform_loss is None else absolute_bound(uniform_loss)
        self.grace_steps = grace_steps
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
        """Takes one loop's losses; says whether the run must stop (the NaN and absolute
        rules look at every step, in order; then the spike rule).

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
        for i, value in enumerate(values):  # the first bad step, whichever rule
            if not math.isfinite(value):
                return Divergence(first_step + i, value)
            if (self.bound is not None and value > self.bound
                    and first_step + i > self.grace_steps):
                return Divergence(first_step + i, value, uniform=self.uniform_loss)
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
