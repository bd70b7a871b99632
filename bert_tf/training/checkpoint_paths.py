"""What a checkpoint holds, by object path, compared with what a model has.

A variable's object path is the chain of attribute names from a root object of the
checkpoint to it ("model/encoder/token_embedding/_embeddings"), as `tf.train.Checkpoint`
matches them on restore. `compare_with_checkpoint` lists what is missing, unexpected or of
another shape; training's resume (`checkpointing.CheckpointSaver`), warm starts and eval-only
runs (`read_strictly`) use it to refuse a checkpoint that does not fit, in one line.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Sequence, Tuple

import keras
import tensorflow as tf

from bert_tf.core import errors
from bert_tf.core.errors import UserError


def model_variable_paths(root_name: str, root) -> dict:
    """Object paths of the variables reachable from `root`, as tf.train.Checkpoint walks them.

    Breadth-first from `root`, each object named by its first (shortest) path, which is how
    the checkpoint's object graph is matched on restore.

    Returns:
        {"root_name/child/.../variable": variable}.
    """
    paths = {}
    seen = {id(root)}
    queue = [(root_name, root)]
    while queue:
        path, obj = queue.pop(0)
        if isinstance(obj, (tf.Variable, keras.Variable)):
            paths[path] = obj
            continue
        for name, child in tf.train.TrackableView.children(obj).items():
            if id(child) not in seen:
                seen.add(id(child))
                queue.append((f"{path}/{name}", child))
    return paths


class SavedObjectGraph:
    """A checkpoint's object graph, read once: its root objects and the variables under each.

    Args:
        path: a checkpoint prefix. A checkpoint without an object graph (not TF2) reads as
            one with no roots.
    """

    def __init__(self, path: str):
        from tensorflow.core.protobuf import trackable_object_graph_pb2

        self.path = path
        reader = tf.train.load_checkpoint(path)
        self._graph = None
        self._shapes = {}
        if reader.has_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"):
            self._graph = trackable_object_graph_pb2.TrackableObjectGraph.FromString(
                reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
            self._shapes = reader.get_variable_to_shape_map()

    def root_names(self) -> set:
        """Names of the root objects saved ("model", "optimizer", ...)."""
        if self._graph is None:
            return set()
        return {child.local_name for child in self._graph.nodes[0].children}

    def variables(self, root_name: str) -> Dict[str, Tuple[str, list]]:
        """Variables saved under the root's child `root_name`: {object path: (key, shape)}.

        The one walk of a checkpoint's object graph (breadth-first, each object named by its
        first path, as a restore matches them). Read from the object graph rather than from
        the tensor keys: a tensor key is the variable's shortest path from the root, which
        for model weights is usually through the optimizer
        ("optimizer/_trainable_variables/3"), not through the model.

        Returns:
            {"root_name/child/.../variable": (checkpoint key, shape list)}; empty if there
            is no such child.
        """
        if self._graph is None:
            return {}
        nodes = self._graph.nodes
        start = [c.node_id for c in nodes[0].children if c.local_name == root_name]
        found = {}
        seen = set(start)
        queue = [(root_name, node_id) for node_id in start]
        while queue:
            obj_path, node_id = queue.pop(0)
            node = nodes[node_id]
            for attribute in node.attributes:
                if attribute.name == "VARIABLE_VALUE":
                    key = attribute.checkpoint_key
                    found[obj_path] = (key, list(self._shapes.get(key, [])))
            for child in node.children:
                if child.node_id not in seen:
                    seen.add(child.node_id)
                    queue.append((f"{obj_path}/{child.local_name}", child.node_id))
        return found

    def variable_shapes(self, root_name: str) -> Dict[str, list]:
        """{object path: shape list} of the variables saved under `root_name`."""
        return {p: shape for p, (_, shape) in self.variables(root_name).items()}


def checkpoint_variable_paths(path: str, root_name: str) -> dict:
    """{object path: shape list} of the variables saved under `root_name` in `path`."""
    return SavedObjectGraph(path).variable_shapes(root_name)


def checkpoint_keys(obj, path: str, root_name: str = "model") -> Dict[int, str]:
    """{id(variable): tensor key in checkpoint `path`} for the variables of the live `obj`
    (saved as `root_name`) that the checkpoint holds, matched by object path."""
    saved = SavedObjectGraph(path).variables(root_name)
    return {id(variable): saved[p][0]
            for p, variable in model_variable_paths(root_name, obj).items() if p in saved}


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """How a checkpoint's variables differ from ours (object paths, see model_variable_paths).

    Attributes:
        missing: our variables that the checkpoint does not have.
        unexpected: checkpoint variables we have no place for.
        shapes: "path [saved shape] vs [our shape]" for variables whose shapes differ.
    """

    missing: tuple = ()
    unexpected: tuple = ()
    shapes: tuple = ()

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected or self.shapes)

    def describe(self, limit: int = 3) -> str:
        """One line, e.g. "missing: model/a, model/b; shape mismatch: model/c [2] vs [3]",
        naming at most `limit` variables of each kind (and how many there are in all)."""
        parts = [f"{what}: {short_list(names, limit)}" for what, names in (
            ("missing", self.missing), ("unexpected", self.unexpected),
            ("shape mismatch", self.shapes)) if names]
        return "; ".join(parts)


def compare_with_checkpoint(saved: SavedObjectGraph, roots: dict) -> Mismatch:
    """Compares the variables reachable from `roots` ({name: object}) with those `saved`.

    Returns:
        What is missing, unexpected or of another shape (falsy when everything matches).
    """
    ours, theirs = {}, {}
    for name, root in roots.items():
        ours.update(model_variable_paths(name, root))
        theirs.update(saved.variable_shapes(name))
    shapes = tuple(f"{k} {theirs[k]} vs {list(ours[k].shape)}"
                   for k in sorted(set(ours) & set(theirs)) if theirs[k] != list(ours[k].shape))
    return Mismatch(tuple(sorted(set(ours) - set(theirs))),
                    tuple(sorted(set(theirs) - set(ours))), shapes)


def short_list(names: Sequence[str], limit: int = 10) -> str:
    """At most `limit` names, comma-separated, and how many there are in all if more."""
    return ", ".join(names[:limit]) + (
        f" ... ({len(names)} in all)" if len(names) > limit else "")


def read_strictly(path: str, roots: Dict[str, object], what: str = "evaluate") -> None:
    """Reads `roots` ({name: object}) from checkpoint `path`; every variable must be there.

    Checkpoint variables no root has a place for (e.g. an NSP head evaluated with --no_nsp)
    are only logged.

    Raises:
        UserError: "cannot <what> <path>: it does not match this model (missing: ...)".
    """
    mismatch = compare_with_checkpoint(SavedObjectGraph(path), roots)
    if mismatch.missing or mismatch.shapes:
        raise UserError(f"cannot {what} {path}: it does not match this model "
                        f"({mismatch.describe()}); was it trained with this --bert_config_file?")
    if mismatch.unexpected:
        from absl import logging

        logging.warning("%s: checkpoint variables unused by this model (%s)", path,
                        mismatch.describe())
    try:
        tf.train.Checkpoint(**roots).read(path).expect_partial()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        raise UserError(f"cannot {what} {path}: {errors.reason(e)}") from None


