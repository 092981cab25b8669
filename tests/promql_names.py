"""The metric names a PromQL expression reads, by a small tokenizer: strings, label
matchers (`{...}`), ranges and subqueries (`[...]`) and grouping label lists (`by (...)`,
`without`, `on`, `ignoring`, `group_left`, `group_right`) are removed; what remains that
looks like an identifier and is neither a function call, a keyword nor an aggregation is a
metric name. Enough for the expressions we ship; not a PromQL parser."""

from __future__ import annotations

import re

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_BRACES = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_NUMBER_OR_DURATION = re.compile(r"\b\d[\w.]*")
KEYWORDS = {
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
    "group_left", "group_right", "inf", "nan", "atan2",
}  # fmt: skip


def metric_names(expression: str) -> set[str]:
    text = _STRING.sub('""', expression)
    text = _BRACES.sub("", text)
    text = _BRACKETS.sub("", text)
    text = _GROUPING.sub("", text)
    text = _NUMBER_OR_DURATION.sub("", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in KEYWORDS:
            continue
        names.add(name)
    return names
