"""Turns TensorFlow's graph optimizer (Grappler) off in every Python process the tests start
(the `cli` fork server, whose forks inherit it, a `python -m` entry point, a script run by
bash, a serving process), as conftest.py does in the tests' own processes (DEVELOPERS.md:
it rewrites every function graph at its first call, which for the tests' tiny models costs
seconds a process and changes no value). BERT_TF_TEST_GRAPPLER=1 leaves it on.

It also lets a test see what autograph converts in such a process: with
BERT_TF_TEST_AUTOGRAPH_LOG=<file> in a run's environment (read at each conversion, so a run
forked from the `cli` server can set it), every function autograph converts is appended to
the file as "module.qualname", and a process that has the variable when it imports
TensorFlow creates the file at once (empty), which shows the hook is in place. The library
converts none of its own functions (DEVELOPERS.md: conversion is redone in every process).

conftest.py puts this folder first on PYTHONPATH; Python imports `sitecustomize` at start-up.
Nothing is imported here: a hook runs right after the process itself imports tensorflow, so
a process that never imports TensorFlow stays without it.
"""

import importlib.abc
import importlib.machinery
import os
import sys

AUTOGRAPH_LOG = "BERT_TF_TEST_AUTOGRAPH_LOG"


def _log_autograph_conversions() -> None:
    from tensorflow.python.autograph.impl import api

    convert = api._convert_actual

    def logged(entity, program_ctx):
        path = os.environ.get(AUTOGRAPH_LOG)
        if path:
            name = (f"{getattr(entity, '__module__', '?')}."
                    f"{getattr(entity, '__qualname__', repr(entity))}")
            with open(path, "a", encoding="utf-8") as log:
                log.write(name + "\n")
        return convert(entity, program_ctx)

    api._convert_actual = logged
    if os.environ.get(AUTOGRAPH_LOG):
        open(os.environ[AUTOGRAPH_LOG], "a", encoding="utf-8").close()


class _AfterTensorFlowImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)  # once: the real finders do the rest
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_set_up(module):
            exec_module(module)
            if os.environ.get("BERT_TF_TEST_GRAPPLER") != "1":
                module.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
            _log_autograph_conversions()

        spec.loader.exec_module = exec_then_set_up
        return spec


sys.meta_path.insert(0, _AfterTensorFlowImport())
