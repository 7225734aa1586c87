"""The strict YAML loader of :func:`simcore.parsing.parse_yaml` and
:func:`simcore.parsing.yaml_value`, apart so that reading JSON (a trace, a model file) does
not import PyYAML (about 15 ms of a calibrate's start-up)."""
from __future__ import annotations

import re

import yaml

from stepsim.simcore.parsing import MAX_NESTING

__all__ = ["StrictLoader"]


class _TooDeep(yaml.YAMLError):
    def __init__(self, mark):
        self.problem, self.problem_mark = f"nested deeper than {MAX_NESTING} levels", mark


class _Alias(yaml.YAMLError):
    def __init__(self, mark):
        self.problem, self.problem_mark = ("an alias (*name) is not read: a few nested ones "
                                           "expand to billions of values"), mark


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses duplicate keys, deep nesting and aliases (a 200-byte
    ``--set`` value of nested aliases held 9^8 values: 2 GB and no end in 30 s)."""

    _depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise _Alias(self.peek_event().start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                raise _TooDeep(self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                dup = key in seen
            except TypeError:   # an unhashable key: the constructor says so
                break
            if dup:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


# YAML 1.1 (PyYAML) reads an exponent without a dot or sign (``dur_us: 1e3``, ``1.5e3``) as
# text, refused as "must be a number, not str '1e3'" in a hand-written model or scenario,
# where JSON, YAML 1.2 and ``--set`` read 1000.0: read it as a number too
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float",
                                    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)"
                                               r"[eE][-+]?[0-9]+$"), list("-+.0123456789"))

StrictLoader = _StrictLoader
