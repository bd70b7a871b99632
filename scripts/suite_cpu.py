"""The test suite's CPU seconds by file, from a BERT_TF_TEST_CPU_LOG run (tests/conftest.py).

    BERT_TF_TEST_CPU_LOG=/tmp/cpu.jsonl bash scripts/run_tests.sh
    python scripts/suite_cpu.py /tmp/cpu.jsonl [--tests=10]

Prints the files by CPU seconds, largest first, with their share of the whole, then the
most expensive tests. CPU time, unlike wall time, hardly changes with what else the machine
runs, so runs on a busy machine still rank the files.
"""

from __future__ import annotations

import argparse
import collections
import json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--files", type=int, default=25, help="files to list")
    parser.add_argument("--tests", type=int, default=10, help="single tests to list")
    args = parser.parse_args()
    tests = {}
    with open(args.log, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                tests[row["test"]] = row["cpu_s"]  # a rerun's line replaces the earlier one
    by_file = collections.Counter()
    for test, cpu in tests.items():
        by_file[test.split("::")[0]] += cpu
    total = sum(by_file.values())
    print(f"{len(tests)} tests in {len(by_file)} files: {total:,.0f} CPU s")
    for name, cpu in by_file.most_common(args.files):
        print(f"{cpu:8.1f} s {100 * cpu / total:5.1f} %  {name}")
    print("most expensive tests:")
    for test, cpu in sorted(tests.items(), key=lambda kv: -kv[1])[:args.tests]:
        print(f"{cpu:8.1f} s  {test}")


if __name__ == "__main__":
    main()
