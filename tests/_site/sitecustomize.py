"""Turns TensorFlow's graph optimizer (Grappler) off in every Python process the tests start
(the `cli` fork server, whose forks inherit it, a `python -m` entry point, a script run by
bash, a serving process), as conftest.py does in the tests' own processes (DEVELOPERS.md:
it rewrites every function graph at its first call, which for the tests' tiny models costs
seconds a process and changes no value). BERT_TF_TEST_GRAPPLER=1 leaves it on.

conftest.py puts this folder first on PYTHONPATH; Python imports `sitecustomize` at start-up.
Nothing is imported here: a hook runs the setting right after the process itself imports
tensorflow, so a process that never imports TensorFlow stays without it.
"""

import importlib.abc
import importlib.machinery
import os
import sys


class _GrapplerOffAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)  # once: the real finders do the rest
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_turn_off(module):
            exec_module(module)
            module.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})

        spec.loader.exec_module = exec_then_turn_off
        return spec


if os.environ.get("BERT_TF_TEST_GRAPPLER") != "1":
    sys.meta_path.insert(0, _GrapplerOffAfterImport())
