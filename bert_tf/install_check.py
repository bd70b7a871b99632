"""Refuses a TensorFlow install whose parts do not fit together, before TensorFlow loads.

A mismatched install otherwise fails deep inside TensorFlow, far from its cause:
- tensorflow-text is built against one TensorFlow minor version; loading it into another
  fails on an undefined C++ symbol when its ops load;
- Keras 2 (or no Keras) where bert_tf needs Keras 3, or a keras-hub older than 0.32, whose
  tokenizer helpers the keras-hub preset export needs;
- on a TPU VM, `pip install bert_tf` puts a CPU `tensorflow` beside `tensorflow-tpu` (both
  provide the `tensorflow` package, so the last one installed wins, file by file), and
  `pip install tensorflow-tpu` picks the newest libtpu, with which `import tensorflow`
  aborts.

`problems()` reads the installed distributions' metadata only (no import, a few
milliseconds), so every bert_tf entry point runs it first (`errors.run_app`) and stops with
one line; `python -m bert_tf.install_check` prints the versions found and the verdict.
data_tools' entry points do not run it: the data jobs never load TensorFlow.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from typing import Callable, Dict, List, Optional, Tuple

# The distributions that provide the `tensorflow` package (tensorflow-intel is what
# `tensorflow` installs on Windows, at the same version).
TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tensorflow-intel",
                    "tensorflow-macos")
TPU_HINT = "on a TPU VM use constraints/tpu-vm.txt (README: TPU VMs)"
# The first keras-hub with the tokenizer helpers (`canonicalize_python_string_inputs`,
# `restore_outer_shape`) that bert_tf.export.preset_tokenizer builds on; 0.20 to 0.31.1
# lack both.
MIN_KERAS_HUB = (0, 32)
# tensorflow-tpu minor -> the newest libtpu seen to load with it. tensorflow-tpu 2.20.0 asks
# for libtpu~=0.0.14, but from libtpu 0.0.32 on `import tensorflow` aborts ("... not
# available in this library"), checked release by release from 0.0.20 to 0.0.36.
MAX_LIBTPU = {"2.20": (0, 0, 31)}


def installed_version(name: str) -> Optional[str]:
    """The installed version of distribution `name`, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _minor(version: str) -> str:
    """'2.20.1' -> '2.20'."""
    return ".".join(version.split(".")[:2])


def _major(version: str) -> int:
    return _release(version)[0]


def _release(version: str) -> Tuple[int, ...]:
    """'0.32.0' -> (0, 32, 0); a part that is not a number ends it ('3.0rc1' -> (3,))."""
    parts = []
    for part in version.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts) or (0,)


def problems(version_of: Callable[[str], Optional[str]] = installed_version) -> List[str]:
    """What is wrong with the installed TensorFlow, tensorflow-text, Keras and keras-hub.

    Args:
        version_of: distribution name -> installed version or None (tests fake it).

    Returns:
        One line per problem, each naming the versions found and the fix; empty if the
        install fits together.
    """
    tf: Dict[str, str] = {n: v for n in TF_DISTRIBUTIONS if (v := version_of(n)) is not None}
    if not tf:
        return ["TensorFlow is not installed (bert-tf-data, the light install, runs only the "
                "data jobs): pip install bert_tf; " + TPU_HINT]
    if len(set(tf.values())) > 1:
        found = " and ".join(f"{name} {version}" for name, version in tf.items())
        fix = ("pip uninstall -y tensorflow, then reinstall with constraints/tpu-vm.txt "
               "(README: TPU VMs)" if "tensorflow-tpu" in tf else
               "uninstall all but one and reinstall it")
        return [f"{found} are installed together and overwrite each other's files: {fix}"]
    tf_version = next(iter(tf.values()))
    found_problems = []
    libtpu, newest = version_of("libtpu"), MAX_LIBTPU.get(_minor(tf_version))
    if "tensorflow-tpu" in tf and libtpu is not None and newest is not None \
            and _release(libtpu) > newest:
        found_problems.append(
            f"libtpu {libtpu} is too new for tensorflow-tpu {tf_version}: import tensorflow "
            f"aborts with libtpu newer than {'.'.join(map(str, newest))}: pip install "
            f"'libtpu==0.0.20'; {TPU_HINT}")
    text = version_of("tensorflow-text")
    want_text = f"pip install 'tensorflow-text=={_minor(tf_version)}.*'"
    if text is None:
        found_problems.append(f"tensorflow-text is not installed: {want_text}")
    elif _minor(text) != _minor(tf_version):
        found_problems.append(
            f"tensorflow-text {text} is built for TensorFlow {_minor(text)}, but TensorFlow "
            f"{tf_version} is installed: {want_text}; {TPU_HINT}")
    keras = version_of("keras")
    if keras is None or _major(keras) < 3:
        have = "Keras is not installed" if keras is None else f"keras {keras} is installed"
        found_problems.append(f"{have}, but bert_tf needs Keras 3: pip install "
                              "'keras>=3.3,<3.16'")
    keras_hub = version_of("keras-hub")
    if keras_hub is None or _release(keras_hub) < MIN_KERAS_HUB:
        have = ("keras-hub is not installed" if keras_hub is None
                else f"keras-hub {keras_hub} is installed")
        found_problems.append(f"{have}, but bert_tf needs keras-hub 0.32 or newer (Python "
                              "3.11+): pip install 'keras-hub>=0.32,<0.33'")
    return found_problems


def describe_cpu() -> str:
    """CPU model, cores and vector ISA (and an `ONEDNN_MAX_CPU_ISA` cap): speed and even
    accuracy figures from different CPUs differ, so reports and benchmarks print this."""
    model, flags = platform.processor() or "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    isa = [name for name, flag in (("AVX2", "avx2"), ("AVX512F", "avx512f"),
                                   ("AVX512-BF16", "avx512_bf16"), ("AMX", "amx_tile"))
           if flag in flags]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA")
    return (f"{model}, {cores} core(s), ISA {'/'.join(isa) or 'unknown'}"
            + (f", ONEDNN_MAX_CPU_ISA={cap}" if cap else ""))


def main() -> int:
    """`python -m bert_tf.install_check`: the CPU, the versions found, then OK or the
    problems."""
    print(f"cpu: {describe_cpu()}")
    names = TF_DISTRIBUTIONS + ("tensorflow-text", "keras", "keras-hub", "libtpu")
    for name in names:
        version = installed_version(name)
        if version is not None:
            print(f"{name} {version}")
    found = problems()
    for line in found:
        print(f"error: {line}", file=sys.stderr)
    if not found:
        print("ok: TensorFlow, tensorflow-text, Keras and keras-hub fit together")
    return 2 if found else 0


if __name__ == "__main__":
    sys.exit(main())
