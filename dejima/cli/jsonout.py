"""The one JSON convention of every `--json`: JSON lines, one object per line, keys sorted.

A script reads line by line (``for line in out: json.loads(line)``, ``jq -c``), output can be
streamed, and an empty result is empty output."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping


def print_json_lines(objects: Iterable[Mapping[str, object]]) -> None:
    for obj in objects:
        print(json.dumps(obj, sort_keys=True, default=str))
