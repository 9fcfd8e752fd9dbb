#!/usr/bin/env python3
"""One error vocabulary (issue 25.2): no decision reads an error's message.

An error's kind (common/result.h) says what went wrong; its message is for people. This
test greps hvdrun's sources (not the tests, which assert on messages) for the ways code
has classified errors by their text, each pattern with the offender it was written for:

  message-search   `.message.find(` / `.rfind(` / `.starts_with(` ... on an Error's message
                   (rendezvous/client.cc decided an authentication failure by finding
                   ": authentication failed" in it; the engine's fail_all looked for its
                   own "rank N: " prefix).
  message-compare  `.message ==` / `!=`: the same decision by equality.
  message-helper   starts_with / ends_with / contains / strstr / regex_search applied to
                   a `.message`.
  text-search      a search (not for a single character: splitting lines is no decision)
                   in a variable named as message text (message, msg, report, reason, why,
                   what, text, err, error): launcher/job.cc's with_hosts parsed the
                   engine's "rank N has not submitted:" out of a report to add host names.
  c-text-search    strstr / strcasestr on any text: C-string classification.

Run by ctest (source_rules); exits 1 naming each line it finds.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ["common", "rendezvous", "transport", "collectives", "launcher", "cli"]
NAMES = r"(?:message|msg|report|reason|why|what|text|err|error)"
SEARCH = r"(?:r?find|find_(?:first|last)_(?:not_)?of|starts_with|ends_with|compare|contains)"
RULES = {
    "message-search": re.compile(r"\.message\s*\.\s*" + SEARCH + r"\s*\("),
    "message-compare": re.compile(r"\.message\s*[!=]=|[!=]=\s*[\w.()>-]*\.message\b"),
    "message-helper": re.compile(r"\b(?:starts_with|ends_with|contains|strstr|strcasestr|regex_search|regex_match)\s*\([^;]*\.message\b"),
    "text-search": re.compile(r"\b" + NAMES + r"\s*\.\s*" + SEARCH + r"\s*\(\s*(?!'(?:[^'\\]|\\.)'\s*[,)])"),
    "c-text-search": re.compile(r"\b(?:strstr|strcasestr)\s*\("),
}


def violations(root: Path = REPO) -> list[str]:
    found = []
    for d in SOURCE_DIRS:
        for path in sorted((root / d).rglob("*")):
            if path.suffix not in (".cc", ".h", ".c"):
                continue
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                code = line.split("//", 1)[0]
                for name, rule in RULES.items():
                    if rule.search(code):
                        found.append(f"{path.relative_to(root)}:{n}: {name}: {line.strip()}")
    return found


def self_test() -> None:
    """Each rule catches the offender it was written for, and leaves line splitting alone."""
    caught = {
        "message-search": 'if (!f && f.error().message.find(": authentication failed") != std::string::npos)',
        "message-compare": 'if (e.message == "closed") return;',
        "message-helper": 'if (starts_with(s.error().message, "rank ")) return;',
        "text-search": 'size_t k = text.find(tail, at);',
        "c-text-search": 'if (strstr(msg, "timed out")) retry();',
    }
    for name, line in caught.items():
        assert RULES[name].search(line), f"{name} misses: {line}"
    for fine in ["if (auto nl = err.rfind('\\n'); nl != std::string::npos) err = err.substr(nl + 1);",
                 "size_t nl = text.find('\\n');", "e.message = context + \": \" + e.message;"]:
        hits = [n for n, r in RULES.items() if r.search(fine)]
        assert not hits, f"{hits} flag a line that decides nothing: {fine}"


if __name__ == "__main__":
    self_test()
    bad = violations()
    for v in bad:
        print(v)
    if bad:
        print(f"{len(bad)} decision(s) on an error's text: give the error a kind instead (common/result.h)")
    sys.exit(1 if bad else 0)
