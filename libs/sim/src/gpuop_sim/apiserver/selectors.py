"""Label and field selectors with kube-apiserver's grammar and error messages.

Both parse into a list of pure predicates over a stored object; parse errors raise `SelectorError`
whose text is what the real server answers in its 400 BadRequest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuop_sim.apiserver.validation import validate_label_key

JsonObj = dict[str, Any]

_SPECIAL = set("!=(),<> \t\n")
_LABEL_OPS = ("==", "!=", "=", "in", "notin")


class SelectorError(ValueError):
    """A selector string that does not parse; the message is the server's."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        if self.op in ("=", "in"):
            return has and labels[self.key] in self.values
        # "!=" and "notin" also match objects that lack the key.
        return not has or labels[self.key] not in self.values


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif text.startswith(("==", "!="), i):
            out.append(text[i : i + 2])
            i += 2
        elif ch in "!=(),<>":
            out.append(ch)
            i += 1
        else:
            j = i
            while j < len(text) and text[j] not in _SPECIAL:
                j += 1
            out.append(text[i:j])
            i = j
    return out


def _is_ident(tok: str | None) -> bool:
    return tok is not None and tok not in ("==", "!=", "!", "=", "(", ")", ",", "<", ">")


def parse_label_selector(text: str) -> list[Requirement]:
    """Parse `a=b,c!=d,e in (f,g),h notin (i),j,!k` into requirements."""
    toks = _tokens(text)
    reqs: list[Requirement] = []
    pos = 0

    def peek() -> str | None:
        return toks[pos] if pos < len(toks) else None

    while pos < len(toks):
        tok = peek()
        if tok == "!":
            pos += 1
            key = peek()
            if not _is_ident(key) or key is None:
                raise SelectorError(f"unable to parse requirement: found '{key or ''}', expected: identifier")
            pos += 1
            reqs.append(Requirement(key, "!"))
        elif _is_ident(tok) and tok is not None:
            key = tok
            pos += 1
            op = peek()
            if op is None or op == ",":
                reqs.append(Requirement(key, "exists"))
            elif op in ("=", "==", "!="):
                pos += 1
                val = peek()
                if val is None or val == ",":
                    value = ""
                elif _is_ident(val):
                    value = val
                    pos += 1
                else:
                    raise SelectorError(f"unable to parse requirement: found '{val}', expected: identifier")
                reqs.append(Requirement(key, "!=" if op == "!=" else "=", (value,)))
            elif op in ("in", "notin"):
                pos += 1
                if peek() != "(":
                    raise SelectorError(f"unable to parse requirement: found '{peek() or ''}' expected: '('")
                pos += 1
                values: list[str] = []
                while True:
                    v = peek()
                    if v == ")":
                        pos += 1
                        break
                    if v == ",":
                        pos += 1
                        continue
                    if not _is_ident(v) or v is None:
                        raise SelectorError(
                            f"unable to parse requirement: found '{v or ''}', "
                            "expected: ',', ')' or identifier"
                        )
                    values.append(v)
                    pos += 1
                reqs.append(Requirement(key, op, tuple(values)))
            else:
                raise SelectorError(
                    f"unable to parse requirement: found '{op}', expected: in, notin, =, ==, !=, gt, lt"
                )
        else:
            raise SelectorError(f"unable to parse requirement: found '{tok}', expected: !, identifier")
        nxt = peek()
        if nxt is not None:
            if nxt != ",":
                raise SelectorError(f"found '{nxt}', expected: ',' or 'end of string'")
            pos += 1
    for r in reqs:
        _check_key(r.key)
    return reqs


def _check_key(key: str) -> None:
    problems = validate_label_key(key, "key")
    if problems:
        raise SelectorError(f"unable to parse requirement: key: {problems[0]['message']}")


def labels_match(reqs: list[Requirement], obj: JsonObj) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(r.matches(labels) for r in reqs)


# Field selectors each built-in supports beyond metadata.name / metadata.namespace.
FIELD_SELECTORS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "pods"): (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    ("", "nodes"): ("spec.unschedulable",),
    ("", "namespaces"): ("status.phase",),
    ("", "secrets"): ("type",),
    ("", "events"): (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    ("events.k8s.io", "events"): (
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "reason",
        "reportingController",
        "type",
    ),
    ("batch", "jobs"): ("status.successful",),
    ("resource.k8s.io", "resourceslices"): ("spec.nodeName", "spec.driver"),
    ("apps", "replicasets"): ("status.replicas",),
}


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    value: str
    negate: bool

    def matches(self, obj: JsonObj) -> bool:
        return (field_value(obj, self.path) == self.value) != self.negate


def field_value(obj: JsonObj, path: str) -> str:
    """The string form of a dotted path (missing -> "", booleans lowercase)."""
    if path == "source":  # core Event `source` selects on source.component
        path = "source.component"
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


# Kinds whose API registers its own field-label conversion: only metadata.name plus the listed
# fields, and the conversion's own error naming the group-version-kind.
FIELD_LABEL_CONVERSIONS: dict[tuple[str, str], str] = {
    ("resource.k8s.io", "resourceslices"): "resource.k8s.io/v1, Kind=ResourceSlice",
}


def parse_field_selector(
    text: str, supported: tuple[str, ...], *, custom: bool = False, conversion: str | None = None
) -> list[FieldRequirement]:
    reqs: list[FieldRequirement] = []
    allowed = (
        ("metadata.name", *supported) if conversion else ("metadata.name", "metadata.namespace", *supported)
    )
    for term in (t.strip() for t in text.split(",")):
        if not term:
            continue
        for op in ("!=", "==", "="):
            if op in term:
                path, _, value = term.partition(op)
                break
        else:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        path = path.strip()
        if path not in allowed:
            if conversion:
                raise SelectorError(f"field label not supported for {conversion}: {path}")
            if custom:
                raise SelectorError(f"field label not supported: {path}")
            known = ", ".join(f'"{f}"' for f in allowed)
            raise SelectorError(f'"{path}" is not a known field selector: only {known}')
        reqs.append(FieldRequirement(path, value.strip(), op == "!="))
    return reqs


def fields_match(reqs: list[FieldRequirement], obj: JsonObj) -> bool:
    return all(r.matches(obj) for r in reqs)


Predicate = Callable[[JsonObj], bool]


def make_predicate(labels: list[Requirement], fields: list[FieldRequirement]) -> Predicate | None:
    """One predicate for both selector kinds; None when nothing filters."""
    if not labels and not fields:
        return None
    return lambda obj: labels_match(labels, obj) and fields_match(fields, obj)
