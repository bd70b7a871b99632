"""The pretraining-budget benchmark's disk cache: completion markers, provenance, the clock.

Pure Python (no TensorFlow, no torch), so that bench_pretraining_budget.py and the arms that
run in other processes and venvs (budget_keras_hub.py, budget_hf.py) share it.

Every stage writes its outputs first and its marker (`<stage>.done.json`) last, atomically;
a stage whose marker exists is skipped, so a run killed at any point resumes with the first
unfinished stage. A marker records what the stage produced and where it came from: date,
git commit of the benchmark, machine line (benchmarks/common/machine.py).

The cache lives on one machine, and a session may start on another with an empty home. So
a finished arm's figures (markers and scores, no checkpoint, no text) are also kept in the
repository, in the ledger (`benchmarks/ledger/<benchmark>/`): a later run on any machine
reports that arm from there, with the date, commit and machine it ran on, instead of
running it again. Commit the ledger's new files with the results they support.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.dirname(HERE)
REPO = os.path.dirname(BENCHMARKS)
# Every script of the long benchmarks imports this module first, including the arm scripts
# run in benchmarks/.hf-venv (budget_hf.py, ../domain_adaptation/domain_hf.py) whose own
# sys.path lines are left as they are: their text is part of their arms' cache and ledger
# keys. So the shared helpers (machine, measure, minilm, hf_finetune) and the repo root
# (bert_tf) are put on the path here.
sys.path[1:1] = [p for p in (os.path.join(BENCHMARKS, "common"), REPO) if p not in sys.path]


def write_json(path: str, value: Any) -> None:
    """Writes `value` as JSON under a temporary name, then renames it (never half-written)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def read_json(path: str) -> Optional[Any]:
    """The JSON in `path`, or None if there is no such file."""
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def git_commit() -> str:
    """The repository's HEAD commit (12 hex digits), "+dirty" if tracked files changed."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance() -> Dict[str, str]:
    """Where a result comes from: UTC date, git commit, host and machine line."""
    import machine  # benchmarks/common/machine.py (on sys.path: above)

    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": git_commit(), "host": socket.gethostname(), "machine": machine.describe()}


def digest(value: Any) -> str:
    """8 hex digits identifying a JSON-able value (cache keys of settings)."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:8]


_CONTENT_DIGESTS: Dict[Tuple[str, int, int], str] = {}


def content_digest(path: Optional[str]) -> str:
    """16 hex digits of a file's bytes ("" when there is no such file): cache keys name what
    a stage read, not where it was (the same path in two caches can hold two vocabularies;
    two paths can hold one). Remembered per (path, size, mtime) within a process."""
    if not path or not os.path.isfile(path):
        return ""
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    if key not in _CONTENT_DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _CONTENT_DIGESTS[key] = h.hexdigest()[:16]
    return _CONTENT_DIGESTS[key]


def this_machine() -> str:
    """The machine line without "machine: " (CPU model, cores, ISA, any ONEDNN cap): part
    of the key of every timed stage, whose minutes buy different training on each CPU."""
    import machine  # benchmarks/common/machine.py (on sys.path: above)

    line = machine.describe()
    return line[len("machine: "):] if line.startswith("machine: ") else line


def marker_path(directory: str, stage: str) -> str:
    return os.path.join(directory, f"{stage}.done.json")


def done(directory: str, stage: str) -> Optional[Dict[str, Any]]:
    """The stage's marker (its results and provenance) if the stage finished, else None."""
    return read_json(marker_path(directory, stage))


def finish(directory: str, stage: str, results: Dict[str, Any]) -> Dict[str, Any]:
    """Writes the stage's marker, last: `results` plus provenance."""
    marker = dict(results, provenance=provenance())
    write_json(marker_path(directory, stage), marker)
    return marker


LEDGER_DIR = os.path.join(BENCHMARKS, "ledger")


def ledger_file(bench: str, arm_dir: str, downstream: str) -> str:
    """The ledger entry of one finished arm: its cache folder's name (which carries the
    digest of its settings) and the folder of its downstream stage (fine-tuning settings
    and seeds), so that an entry stands only for the exact settings it ran with."""
    return os.path.join(LEDGER_DIR, bench, f"{os.path.basename(arm_dir)}.{downstream}.json")


def from_ledger(bench: str, arm_dir: str, downstream: str) -> Optional[Dict[str, Any]]:
    """The arm's finished result from the ledger, or None."""
    path = ledger_file(bench, arm_dir, downstream)
    result = read_json(path)
    if result is not None:
        result["ledger"] = os.path.relpath(path, REPO)
    return result


def from_legacy_ledger(bench: str, legacy_dir: str, downstream: str,
                       machine: Optional[str]) -> Optional[Dict[str, Any]]:
    """An arm kept under the key of an earlier benchmark version (which left out the
    machine and hashed paths), or None. Such a key stood for the arm on any machine, so an
    entry counts only where its timed stage ran on `machine` (None: an arm with no timed
    stage, any machine). Entries migrated from a results.json carry a machine suffix
    (`<key>.<downstream>.m<digest>.json`), as two machines' runs shared one key."""
    pattern = os.path.join(LEDGER_DIR, bench, f"{os.path.basename(legacy_dir)}.{downstream}")
    paths = [pattern + ".json"] if os.path.exists(pattern + ".json") else []
    for path in paths + sorted(glob.glob(glob.escape(pattern) + ".m*.json")):
        result = read_json(path)
        if machine is None or machine_name(result.get("pretrain")) == machine:
            result["ledger"] = os.path.relpath(path, REPO)
            return result
    return None


def kept_arm(bench: str, arm_dir: str, out: str, stage: str, smoke: bool,
             legacy_dir: str = "", machine: Optional[str] = None
             ) -> Tuple[str, Optional[Dict[str, Any]]]:
    """(the ledger key of the arm's downstream stage `out`/`stage`, the arm's ledger result
    or None). None also when the local cache has the stage (its own markers are reported)
    and for smoke runs, which never stand on the ledger. `legacy_dir`: the arm's folder
    under an earlier key, looked up with `from_legacy_ledger` (`machine` as there) when the
    ledger has no entry under the current key. Prints where a kept arm ran."""
    downstream = f"{os.path.basename(out)}.{stage}"
    if smoke or done(out, stage):
        return downstream, None
    kept = from_ledger(bench, arm_dir, downstream)
    if kept is None and legacy_dir:
        kept = from_legacy_ledger(bench, legacy_dir, downstream, machine)
    if kept:
        where = kept.get("pretrain") or kept.get("scorecard") or kept.get("finetune") or {}
        print(f"  finished on {where.get('provenance', {}).get('date', '?')} "
              f"({machine_name(where)}): {kept['ledger']}", flush=True)
    return downstream, kept


def to_ledger(bench: str, arm_dir: str, downstream: str, result: Dict[str, Any]) -> None:
    """Keeps a finished arm's result in the ledger (written once, never overwritten). An
    entry that exists with other scores means two runs shared a key: said, not hidden."""
    path = ledger_file(bench, arm_dir, downstream)
    value = {k: v for k, v in result.items() if k != "ledger"}
    if not os.path.exists(path):
        write_json(path, value)
    elif (read_json(path) or {}).get("row") != json.loads(json.dumps(value)).get("row"):
        print(f"  WARNING: {os.path.relpath(path, REPO)} holds other scores under this arm's "
              "key; it is kept as it is", flush=True)


def machine_name(marker: Optional[Dict[str, Any]]) -> str:
    """The CPU a stage ran on, from its marker ("" if unknown)."""
    line = (marker or {}).get("provenance", {}).get("machine", "")
    return line[len("machine: "):] if line.startswith("machine: ") else line


def machines(arms: List[Dict[str, Any]]) -> List[str]:
    """The distinct machine lines the arms' timed stages (pretraining) ran on, in order."""
    seen: List[str] = []
    for arm in arms:
        line = machine_name(arm.get("pretrain"))
        if line and line not in seen:
            seen.append(line)
    return seen


def mixed_machines_note(arms: List[Dict[str, Any]]) -> str:
    """One line when the arms' budgets were spent on different machines ("" otherwise): a
    budget of minutes buys different amounts of training on each."""
    seen = machines(arms)
    if len(seen) < 2:
        return ""
    return ("NOTE: the pretraining arms ran on " + " and ".join(f"'{m}'" for m in seen)
            + ": their budgets are minutes on different machines, so differences between "
            "them mix the recipes with the machines' speeds.")


class TrainingClock:
    """Training seconds of a run that may be split over several processes (resumes).

    The caller adds the time of each training step (`add`); the seconds trained are kept in
    `state_file` (JSON) with the step they were written at, and read back by a run that
    restores the checkpoint of that step.

    Args:
        state_file: where the clock is saved (None: never saved, e.g. a probe).
        budget_seconds: the training-time budget.
    """

    def __init__(self, state_file: Optional[str], budget_seconds: float):
        self.state_file = state_file
        self.budget_seconds = budget_seconds
        state = (read_json(state_file) if state_file else None) or {}
        self.seconds = float(state.get("trained_seconds", 0.0))
        self.step = int(state.get("step", 0))

    def add(self, seconds: float) -> None:
        self.seconds += seconds

    @property
    def time_up(self) -> bool:
        return self.seconds >= self.budget_seconds

    def save(self, step: int) -> None:
        """Records the seconds trained up to `step` (call once that step's checkpoint is
        complete)."""
        self.step = step
        if self.state_file:
            write_json(self.state_file, {"step": step, "trained_seconds": self.seconds})


class StepTimer:
    """Times training steps for a `TrainingClock` as bert_tf's clock counts its calls: the
    first step of a process (graph tracing, compilation, first-touch allocation) is counted
    at the pace of the second one, not at its own."""

    def __init__(self, clock: TrainingClock):
        self.clock = clock
        self.steps = 0
        self._t0 = 0.0
        self._pending: Optional[float] = None

    def begin(self) -> None:
        self._t0 = time.monotonic()

    def end(self) -> None:
        dt = time.monotonic() - self._t0
        self.steps += 1
        if self.steps == 1:
            self._pending = dt
        else:
            self.clock.add(dt * (2 if self._pending is not None else 1))
            self._pending = None

    def close(self) -> None:
        """Counts a lone first step as it was (a process that trained one step only)."""
        if self._pending is not None:
            self.clock.add(self._pending)
            self._pending = None


def calibrated_steps(steps_per_second: float, budget_seconds: float) -> int:
    """Optimizer steps a linear decay is sized to, so that it ends when the budget does at
    the throughput measured by a probe (at least 10)."""
    return max(10, int(steps_per_second * budget_seconds))


def apply_preset(args: Any, smoke: Dict[str, Any], full: Dict[str, Any]) -> None:
    """Fills the flags left unset from the smoke or the full preset; a smoke run gets its
    own cache folder, so its tiny stages never stand in for the real ones."""
    for key, value in (smoke if args.smoke else full).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    if args.smoke:
        args.cache_dir = os.path.join(args.cache_dir, "smoke")


def add_pretrain_only(parser: argparse.ArgumentParser, what: str) -> None:
    """--pretrain_only: `what` (the arms' wall-clock stage) and their held-out MLM accuracy,
    without the downstream stage or the report."""
    parser.add_argument("--pretrain_only", action="store_true",
                        help=f"{what} and measure their held-out MLM accuracy, but fine-tune "
                        "nothing and write no report: the wall-clock stages can then run back "
                        "to back on a quiet machine, and the fine-tuning (whose figures do "
                        "not depend on time) later, alongside other work")


def print_pretrained(results: List[Dict[str, Any]]) -> None:
    """One line per arm of a --pretrain_only run: its held-out MLM accuracy, if it has one."""
    for r in results:
        mlm = r.get("mlm", {}).get("masked_lm_accuracy")
        print(f"arm {r['name']}: " + (f"pretrained, held-out MLM accuracy {mlm:.4f}"
                                      if mlm is not None else "nothing to pretrain"), flush=True)


def arm_parser(description: str) -> argparse.ArgumentParser:
    """The flags every peer arm's script takes (keras-hub's and transformers', each run in
    its own process and venv): its text, vocabulary, architecture, output and budget."""
    parser = argparse.ArgumentParser(description=description)
    for name in ("train_text", "vocab_file", "bert_config_file", "output_dir"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--probe_seconds", type=float, default=60.0)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=12345)
    # A "tuned peer" arm sets these to bert_tf's recipe (configs/budget.flags), so that the
    # table separates the recipe from the framework; unset, the arm keeps its own defaults.
    parser.add_argument("--learning_rate", type=float, help="peak rate (default: the arm's)")
    parser.add_argument("--batch_size", type=int, help="sequences a step (default: the arm's)")
    parser.add_argument("--warmup_steps", type=int,
                        help="linear warmup steps before the decay (default: the arm's)")
    return parser
