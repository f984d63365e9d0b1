"""Options of every `outboard` command may also come from ``--json FILE``.

Keys are the long option names (as in DOCA argp); command-line values
override the file; an unknown key or a value of the wrong type is an error
naming the key and the expected type.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

from .errors import BadConfig

LOG_LEVELS = "10 disable, 20 critical, 30 error, 40 warning, 50 info, 60 debug, 70 trace"


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default="warning", help=LOG_LEVELS)
    parser.add_argument("--json", metavar="FILE", help="read options from a JSON file (keys = long option names)")


def _expected(action: argparse.Action) -> tuple[tuple[type, ...], str]:
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return (bool,), "boolean"
    if action.type is int:
        return (int,), "integer"
    if action.type is float:
        return (int, float), "number"
    if action.dest == "log_level":
        return (str, int), "string or integer"
    return (str,), "string"


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses ``argv`` applying defaults, then the --json file, then the command line."""
    args = parser.parse_args(argv)
    sub = getattr(args, "_parser", parser)
    path = getattr(args, "json", None)
    if not path:
        return args
    try:
        doc = json.loads(Path(path).read_bytes().decode())
    except UnicodeDecodeError as e:
        raise BadConfig(f"--json file '{path}' is not UTF-8 text (byte {e.start})") from None
    except (OSError, json.JSONDecodeError) as e:
        raise BadConfig(f"cannot read --json file '{path}': {e}") from None
    if not isinstance(doc, dict):
        raise BadConfig(f"'{path}' is not a JSON object")
    by_name = {
        opt[2:]: a for a in sub._actions for opt in a.option_strings if opt.startswith("--")
    }
    defaults: dict[str, Any] = {}
    for key, value in doc.items():
        action = by_name.get(key)
        if action is None or key in ("json", "help"):
            raise BadConfig(f"unknown key '{key}' in '{path}'")
        types, name = _expected(action)
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            raise BadConfig(f"key '{key}' in '{path}': expected {name}, got {type(value).__name__}")
        defaults[action.dest] = str(value) if action.dest == "log_level" else value
    sub.set_defaults(**defaults)
    return parser.parse_args(argv)
