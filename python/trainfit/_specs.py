"""`PKG.MODULE:NAME` arguments of the command-line tools (`--model`, `--dataset`, `--collate`):
the object they name, or a UsageError naming the flag."""
import importlib
import json
from typing import Any, Callable, Dict


class UsageError(Exception):
    """A command-line argument that cannot be used; the message names it."""


def load_callable(spec: str, flag: str, example: str) -> Callable[..., Any]:
    """The callable `spec` (PKG.MODULE:NAME, NAME may be dotted) names, or a UsageError."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"{flag} '{spec}' is not PKG.MODULE:NAME (for example {example})")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(f"{flag}: cannot import {module_name} ({e}); is it on PYTHONPATH?")
    found: Any = module
    for part in attr.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise UsageError(f"{flag}: {module_name} has no '{attr}'")
    if not callable(found):
        raise UsageError(f"{flag}: {spec} is not callable")
    function: Callable[..., Any] = found
    return function


def parse_kwargs(text: str, example: str) -> Dict[str, Any]:
    """--kwargs: keyword arguments for a factory, as a JSON object ({} when not given)."""
    try:
        kwargs = json.loads(text) if text else {}
    except json.JSONDecodeError as e:
        raise UsageError(f"--kwargs is not JSON ({e}); for example '{example}'")
    if not isinstance(kwargs, dict):
        raise UsageError(f"--kwargs must be a JSON object, for example '{example}'")
    return kwargs
