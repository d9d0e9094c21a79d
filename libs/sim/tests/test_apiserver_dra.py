"""resource.k8s.io/v1 in the simulator: the validation rules with inputs other than the recorded ones.

The recorded cases (`resource.jsonl`) replay in test_apiserver_replay.py; these tests check the same
rules on other bad inputs (each named in its parameter id), both as pure functions and through
HTTP, plus the generic semantics (resourceVersion conflicts, generation, watch with field selectors).
"""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from gpuop_sim.apiserver import SimApiServer, dracel, drarules, godump
from gpuop_sim.apiserver.quantity import QuantityError, canonical_quantity
from gpuop_sim.apiserver.selectors import SelectorError, parse_field_selector
from kubernetes import client
from kubernetes.client.rest import ApiException

JsonObj = dict[str, Any]
BASE = "/apis/resource.k8s.io/v1"


# ---------------------------------------------------------------- pure rules
@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("1000", "1k"),
        ("1500", "1500"),
        ("0.1", "100m"),
        ("1.5", "1500m"),
        ("1.5Gi", "1536Mi"),
        ("2048Mi", "2Gi"),
        ("0.5Ki", "512"),
        ("1023Ki", "1023Ki"),
        ("1e3", "1e3"),
        ("12e2", "1200"),
        ("-2000", "-2k"),
        ("0.0000000001", "1n"),
        ("0Gi", "0"),
        (64, "64"),
    ],
)
def test_quantities_come_back_canonical(given: Any, canonical: str) -> None:
    assert canonical_quantity(given) == canonical


@pytest.mark.parametrize("bad", ["abc", "1Zi", "", "1.2.3", "Gi", "1 Gi", True, None])
def test_a_malformed_quantity_is_refused_with_the_regex(bad: Any) -> None:
    with pytest.raises(QuantityError, match=r"quantities must match the regular expression"):
        canonical_quantity(bad)


@pytest.mark.parametrize(
    ("expression", "result_type"),
    [
        ("size(device.driver)", "int"),
        ('device.driver + "-x"', "string"),
        ("[device.driver]", "list(string)"),
        ("1.5", "double"),
        ('device.capacity["gpu.gpuop.dev"].memory', "kubernetes.Quantity"),
        ('device.driver == "a" ? "yes" : "no"', "string"),
        ('{"k": true}', "map(string, bool)"),
        ('device.attributes["gpu.gpuop.dev"]', "map(string, google.protobuf.Any)"),
        ("cel.bind(d, device.driver, d)", "string"),
    ],
)
def test_a_selector_that_is_not_bool_names_its_type(expression: str, result_type: str) -> None:
    assert dracel.selector_problem(expression) == (
        f"must evaluate to bool or the unknown type, not {result_type}"
    )


@pytest.mark.parametrize(
    "expression",
    [
        "device.allowMultipleAllocations",
        'device.attributes["gpu.gpuop.dev"].numa',  # the attribute type: accepted, checked when allocating
        'cel.bind(dra, device.attributes["gpu.gpuop.dev"], dra.type == "gpu" && dra.numa == 0)',
        'device.attributes["gpu.gpuop.dev"].exists(k, k == "type")',
        'device.capacity["gpu.gpuop.dev"].memory.isGreaterThan(quantity("1Gi"))',
        '!(device.driver in ["a", "b"]) || device.driver.startsWith("gpu")',
    ],
)
def test_bool_or_attribute_typed_selectors_compile(expression: str) -> None:
    assert dracel.selector_problem(expression) is None


def test_an_undeclared_identifier_and_an_unknown_device_field_are_compile_errors() -> None:
    assert dracel.selector_problem('gpu.type == "x"') == (
        "compilation failed: ERROR: <input>:1:1: undeclared reference to 'gpu' (in container '')\n"
        ' | gpu.type == "x"\n | ^'
    )
    assert dracel.selector_problem('device.name == "x"') == (
        "compilation failed: ERROR: <input>:1:7: undefined field 'name'\n | device.name == \"x\"\n | ......^"
    )
    # A comprehension variable is declared inside its body only.
    assert "undeclared reference to 'k'" in (
        dracel.selector_problem('device.attributes.exists(k, true) && k == "x"') or ""
    )


@pytest.mark.parametrize(
    ("expression", "operator", "args", "column"),
    [
        ("device.driver == 1", "_==_", "string, int", 15),
        ('device.driver == "x" && 1', "_&&_", "bool, int", 22),
        ("!device.driver", "!_", "string", 1),
        ('"a" < 1', "_<_", "string, int", 5),
        (
            'device.capacity["d"].memory < quantity("1Gi")',
            "_<_",
            "kubernetes.Quantity, kubernetes.Quantity",
            29,
        ),
        ("size(device.driver) + 1.5 > 0", "_+_", "int, double", 21),
    ],
)
def test_an_operator_without_an_overload_is_a_compile_error(
    expression: str, operator: str, args: str, column: int
) -> None:
    problem = dracel.selector_problem(expression) or ""
    assert problem.splitlines()[0] == (
        f"compilation failed: ERROR: <input>:1:{column}: found no matching overload for '{operator}' "
        f"applied to '({args})'"
    )
    assert problem.splitlines()[2] == " | " + "." * (column - 1) + "^"


def test_numbers_compare_across_types_and_attributes_compare_with_anything() -> None:
    for expression in ("1 < 2.5", "size(device.driver) >= 1u", 'device.attributes["d"].numa == 1'):
        assert dracel.selector_problem(expression) is None, expression


def test_a_syntax_error_keeps_cel_gos_wording() -> None:
    problem = dracel.selector_problem('device.driver == "x" &&') or ""
    assert problem.startswith(
        "compilation failed: ERROR: <input>:1:24: Syntax error: mismatched input '<EOF>'"
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gpu.gpuop.dev/productName", []),
        ("numa_node", []),
        ("9lives", ['Invalid value: "9lives": a valid C identifier must start with alphabetic']),
        ("x" * 33, ["Too long: may not be more than 32 bytes"]),
        ("/type", ['Invalid value: "": the domain must not be empty']),
        ("gpu.gpuop.dev/", ['Invalid value: "": the name must not be empty']),
        ("Bad_Domain/type", ['Invalid value: "Bad_Domain": a lowercase RFC 1123 subdomain']),
        ("a/b/c", []),  # not checked further by the real server either
        ("", ['Invalid value: "": a valid C identifier must start with alphabetic']),
    ],
    ids=[
        "qualified",
        "bare",
        "digit-first",
        "33-chars",
        "empty-domain",
        "empty-id",
        "bad-domain",
        "two-slashes",
        "empty",
    ],
)
def test_attribute_and_capacity_names(name: str, expected: list[str]) -> None:
    causes = drarules.qualified_name("spec.devices[0].attributes", name)
    assert len(causes) == len(expected)
    for found, want in zip(causes, expected, strict=True):
        assert want in found["message"] and found["field"] == "spec.devices[0].attributes"


def test_go_dump_lists_every_internal_field_in_declaration_order() -> None:
    dumped = godump.go_dump({"devices": {"results": [{"request": "r", "device": "d"}]}}, "AllocationResult")
    assert json.loads(dumped) == {
        "Devices": {
            "Results": [
                {
                    "Request": "r",
                    "Driver": "",
                    "Pool": "",
                    "Device": "d",
                    "AdminAccess": None,
                    "Tolerations": None,
                    "BindingConditions": None,
                    "BindingFailureConditions": None,
                    "ShareID": None,
                    "ConsumedCapacity": None,
                }
            ],
            "Config": None,
        },
        "NodeSelector": None,
        "AllocationTimestamp": None,
    }
    assert list(json.loads(dumped)) == ["Devices", "NodeSelector", "AllocationTimestamp"]
    # Go's encoder escapes <, > and &.
    assert "\\u003c" in godump.go_dump({"expression": "a < b"}, "CELDeviceSelector")


def test_slice_field_selectors_use_the_conversion_functions_message() -> None:
    conversion = "resource.k8s.io/v1, Kind=ResourceSlice"
    with pytest.raises(
        SelectorError, match=rf"field label not supported for {conversion}: metadata\.namespace"
    ):
        parse_field_selector("metadata.namespace=x", ("spec.nodeName",), conversion=conversion)
    (req,) = parse_field_selector("spec.driver!=a", ("spec.driver",), conversion=conversion)
    assert req.matches({"spec": {"driver": "b"}})


# ---------------------------------------------------------------- through HTTP
def call(
    server: SimApiServer, method: str, path: str, body: Any = None, query: str = ""
) -> tuple[int, JsonObj]:
    data = json.dumps(body).encode() if body is not None else None
    url = server.url + path + (f"?{query}" if query else "")
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture(scope="module")
def server() -> Iterator[SimApiServer]:
    with SimApiServer(controllers=False) as srv:
        yield srv


def a_slice(name: str, **spec: Any) -> JsonObj:
    body: JsonObj = {
        "driver": "gpu.gpuop.dev",
        "pool": {"name": f"pool-{name}", "generation": 1, "resourceSliceCount": 1},
        "nodeName": f"node-{name}",
        "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}}],
    }
    body.update(spec)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": body,
    }


def a_claim(name: str, **devices: Any) -> JsonObj:
    body: JsonObj = {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.gpuop.dev"}}]}
    body.update(devices)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": body},
    }


def causes_of(body: JsonObj) -> list[tuple[str, str, str]]:
    return [(c["reason"], c["field"], c["message"]) for c in body["details"]["causes"]]


def taint() -> JsonObj:
    return {"key": "gpuop.dev/unhealthy", "effect": "NoSchedule"}


SLICE_CASES: list[tuple[str, JsonObj, list[tuple[str, str, str]]]] = [
    (
        "no-node-selection",
        {"nodeName": None},
        [
            (
                "FieldValueRequired",
                "spec",
                "Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
                "`perDeviceNodeSelection` is required",
            )
        ],
    ),
    (
        "nodeselector-and-allnodes",
        {"nodeName": None, "nodeSelector": {"nodeSelectorTerms": [{}]}, "allNodes": True},
        [
            (
                "FieldValueInvalid",
                "spec",
                'Invalid value: "{`nodeSelector`, `allNodes`}": exactly one of `nodeName`, '
                "`nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple "
                "fields are set",
            )
        ],
    ),
    (
        "per-device-selection-but-a-device-without",
        {
            "nodeName": None,
            "perDeviceNodeSelection": True,
            "devices": [{"name": "a", "nodeName": "n"}, {"name": "b"}],
        },
        [
            (
                "FieldValueRequired",
                "spec.devices[1]",
                "Required value: exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when "
                "`perDeviceNodeSelection` is set to true in the ResourceSlice spec",
            )
        ],
    ),
    (
        "two-node-selector-terms",
        {"nodeName": None, "nodeSelector": {"nodeSelectorTerms": [{}, {}]}},
        [
            (
                "FieldValueInvalid",
                "spec.nodeSelector.nodeSelectorTerms",
                'Invalid value: [{"MatchExpressions":null,"MatchFields":null},{"MatchExpressions":null,'
                '"MatchFields":null}]: must have exactly one node selector term',
            )
        ],
    ),
    (
        "65-devices-one-tainted",
        {"devices": [{"name": f"d-{i}", **({"taints": [taint()]} if i == 0 else {})} for i in range(65)]},
        [("FieldValueTooMany", "spec.devices", "Too many: 65: must have at most 64 items")],
    ),
    (
        "duplicate-third-device",
        {"devices": [{"name": "a"}, {"name": "b"}, {"name": "a"}]},
        [("FieldValueDuplicate", "spec.devices[2]", 'Duplicate value: "a"')],
    ),
    (
        "device-name-not-dns-label",
        {"devices": [{"name": "GPU_0"}]},
        [
            (
                "FieldValueInvalid",
                "spec.devices[0].name",
                'Invalid value: "GPU_0": a lowercase RFC 1123 label must consist of lower case alphanumeric '
                "characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  "
                "or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            )
        ],
    ),
    (
        "driver-too-long",
        {"driver": "a" * 64 + ".dev"},
        [("FieldValueTooLong", "spec.driver", "Too long: may not be more than 63 bytes")],
    ),
    (
        "pool-count-zero-generation-negative",
        {"pool": {"name": "p", "generation": -1, "resourceSliceCount": 0}},
        [
            (
                "FieldValueInvalid",
                "spec.pool.resourceSliceCount",
                "Invalid value: 0: must be greater than zero",
            ),
            (
                "FieldValueInvalid",
                "spec.pool.generation",
                "Invalid value: -1: must be greater than or equal to zero",
            ),
        ],
    ),
    (
        "pool-name-bad-segment",
        {"pool": {"name": "ok/Not_OK", "generation": 0, "resourceSliceCount": 1}},
        [("FieldValueInvalid", "spec.pool.name", 'Invalid value: "Not_OK": a lowercase RFC 1123 subdomain')],
    ),
    (
        "attribute-two-values",
        {"devices": [{"name": "d", "attributes": {"numa": {"int": 1, "string": "1"}}}]},
        [
            (
                "FieldValueInvalid",
                "spec.devices[0].attributes[numa]",
                'Invalid value: {"IntValue":1,"BoolValue":null,"StringValue":"1","VersionValue":null,'
                '"IntValues":null,"BoolValues":null,"StringValues":null,"VersionValues":null}: '
                "exactly one value must be specified",
            )
        ],
    ),
    (
        "attribute-no-value",
        {"devices": [{"name": "d", "attributes": {"numa": {}}}]},
        [
            (
                "FieldValueInvalid",
                "spec.devices[0].attributes[numa]",
                'Invalid value: "": exactly one value must be specified',
            )
        ],
    ),
    (
        "version-not-semver-and-string-too-long",
        {"devices": [{"name": "d", "attributes": {"v": {"version": "1.2"}, "s": {"string": "x" * 65}}}]},
        [  # map keys in sorted order, as the server stores them
            (
                "FieldValueTooLong",
                "spec.devices[0].attributes[s].string",
                "Too long: may not be more than 64 bytes",
            ),
            (
                "FieldValueInvalid",
                "spec.devices[0].attributes[v].version",
                'Invalid value: "1.2": must be a string compatible with semver.org spec 2.0.0',
            ),
        ],
    ),
    (
        "33-attributes-and-capacities",
        {
            "devices": [
                {
                    "name": "d",
                    "attributes": {f"a{i}": {"int": i} for i in range(20)},
                    "capacity": {f"c{i}": {"value": "1"} for i in range(13)},
                }
            ]
        },
        [
            (
                "FieldValueInvalid",
                "spec.devices[0]",
                "Invalid value: 33: the total number of attributes and capacities must not exceed 32",
            )
        ],
    ),
    (
        "per-device-field-without-per-device-selection",
        {"devices": [{"name": "d", "allNodes": True}]},
        [
            (
                "FieldValueInvalid",
                "spec.devices[0]",
                "Invalid value: null: `nodeName`, `nodeSelector` and `allNodes` can only be set if "
                "`perDeviceNodeSelection` is set to true in the ResourceSlice spec",
            )
        ],
    ),
    (
        "empty-node-name-and-false-all-nodes",
        {"nodeName": "", "allNodes": False},
        [
            (
                "FieldValueInvalid",
                "spec.nodeName",
                'Invalid value: "": must be either unset or set to a non-empty string',
            ),
            (
                "FieldValueInvalid",
                "spec.allNodes",
                "Invalid value: false: must be either unset or set to true",
            ),
            (
                "FieldValueRequired",
                "spec",
                "Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
                "`perDeviceNodeSelection` is required",
            ),
        ],
    ),
    (
        "devices-and-shared-counters",
        {"sharedCounters": [{"name": "mem", "counters": {"memory": {"value": "1Gi"}}}]},
        [
            (
                "FieldValueInvalid",
                "spec",
                'Invalid value: "": only one of `sharedCounters` or `devices` is allowed',
            )
        ],
    ),
    (
        "request-policy-without-multiple-allocations",
        {
            "devices": [
                {"name": "d", "capacity": {"memory": {"value": "1Gi", "requestPolicy": {"default": "1Mi"}}}}
            ]
        },
        [
            (
                "FieldValueForbidden",
                "spec.devices[0].capacity[memory].requestPolicy",
                "Forbidden: allowMultipleAllocations must be true",
            )
        ],
    ),
    (
        "request-policy-default-not-a-valid-value",
        {
            "devices": [
                {
                    "name": "d",
                    "allowMultipleAllocations": True,
                    "capacity": {
                        "memory": {
                            "value": "1Gi",
                            "requestPolicy": {"default": "3Mi", "validValues": ["1Mi", "2Mi"]},
                        }
                    },
                }
            ]
        },
        [
            (
                "FieldValueInvalid",
                "spec.devices[0].capacity[memory].requestPolicy.validValues",
                'Invalid value: "3Mi": default value is not valid according to the requestPolicy',
            )
        ],
    ),
    (
        "taint-with-unknown-effect",
        {"devices": [{"name": "d", "taints": [{"key": "gpuop.dev/hot", "effect": "Evict"}]}]},
        [
            (
                "FieldValueNotSupported",
                "spec.devices[0].taints[0].effect",
                'Unsupported value: "Evict": supported values: "NoExecute", "NoSchedule", "None"',
            )
        ],
    ),
    (
        "binding-conditions-without-failure-conditions",
        {"devices": [{"name": "d", "bindingConditions": ["Ready"]}]},
        [
            (
                "FieldValueInvalid",
                "spec.devices[0].bindingFailureConditions",
                "Invalid value: null: bindingFailureConditions are required to use bindingConditions",
            )
        ],
    ),
    (
        "node-selector-in-without-values",
        {
            "nodeName": None,
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In"}]}]
            },
        },
        [
            (
                "FieldValueRequired",
                "spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].values",
                "Required value: must be specified when `operator` is 'In' or 'NotIn'",
            )
        ],
    ),
]


@pytest.mark.parametrize(("spec", "expected"), [c[1:] for c in SLICE_CASES], ids=[c[0] for c in SLICE_CASES])
def test_bad_resourceslices_are_refused(
    server: SimApiServer, spec: JsonObj, expected: list[tuple[str, str, str]]
) -> None:
    body = a_slice("bad-slice", **spec)
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
    status, answer = call(server, "POST", f"{BASE}/resourceslices", body)
    assert status == 422, answer
    assert answer["reason"] == "Invalid" and answer["details"]["kind"] == "ResourceSlice"
    found = causes_of(answer)
    assert len(found) == len(expected), found
    for (reason, field, message), (want_reason, want_field, want_message) in zip(
        found, expected, strict=True
    ):
        assert (reason, field) == (want_reason, want_field)
        assert message.startswith(want_message), message


def test_a_bad_capacity_quantity_is_a_decode_error(server: SimApiServer) -> None:
    body = a_slice("bad-qty", devices=[{"name": "d", "capacity": {"memory": {"value": "12XB"}}}])
    status, answer = call(server, "POST", f"{BASE}/resourceslices", body)
    assert status == 400 and answer["reason"] == "BadRequest"
    assert answer["message"] == (
        'ResourceSlice in version "v1" cannot be handled as a ResourceSlice: quantities must match the '
        "regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )


def test_slice_updates_keep_identity_fields_and_bump_generation(server: SimApiServer) -> None:
    status, created = call(server, "POST", f"{BASE}/resourceslices", a_slice("upd"))
    assert status == 201 and created["metadata"]["generation"] == 1
    changed = copy.deepcopy(created)
    changed["spec"]["devices"].append({"name": "gpu-1", "capacity": {"memory": {"value": "2048Mi"}}})
    status, updated = call(server, "PUT", f"{BASE}/resourceslices/upd", changed)
    assert status == 200, updated
    assert updated["metadata"]["generation"] == 2
    assert updated["spec"]["devices"][1]["capacity"]["memory"]["value"] == "2Gi"
    # A stale resourceVersion is a conflict, as for every kind.
    status, stale = call(server, "PUT", f"{BASE}/resourceslices/upd", changed)
    assert status == 409 and stale["reason"] == "Conflict"
    moved = copy.deepcopy(updated)
    moved["spec"].update(nodeName="other-node", driver="other.gpuop.dev")
    moved["spec"]["pool"]["name"] = "other-pool"
    status, answer = call(server, "PUT", f"{BASE}/resourceslices/upd", moved)
    assert status == 422
    assert causes_of(answer) == [
        ("FieldValueInvalid", "spec.pool.name", 'Invalid value: "other-pool": field is immutable'),
        ("FieldValueInvalid", "spec.driver", 'Invalid value: "other.gpuop.dev": field is immutable'),
        ("FieldValueInvalid", "spec.nodeName", 'Invalid value: "other-node": field is immutable'),
    ]


def test_watch_with_a_driver_field_selector_sees_only_that_driver(server: SimApiServer) -> None:
    status, listed = call(server, "GET", f"{BASE}/resourceslices")
    assert status == 200
    for name, driver in (("w-a", "w.gpuop.dev"), ("w-b", "other.gpuop.dev")):
        assert call(server, "POST", f"{BASE}/resourceslices", a_slice(name, driver=driver))[0] == 201
    # A watch from the list's resourceVersion replays what happened since, filtered.
    rv = listed["metadata"]["resourceVersion"]
    query = f"watch=true&timeoutSeconds=1&resourceVersion={rv}&fieldSelector=spec.driver%3Dw.gpuop.dev"
    with urllib.request.urlopen(f"{server.url}{BASE}/resourceslices?{query}", timeout=10) as resp:
        events = [json.loads(line) for line in resp if line.strip()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "w-a")]


CLAIM_CASES: list[tuple[str, JsonObj, list[tuple[str, str, str]]]] = [
    (
        "all-with-count",
        {
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "c", "allocationMode": "All", "count": 2}}
            ]
        },
        [
            (
                "FieldValueInvalid",
                "spec.devices.requests[0].exactly.count",
                "Invalid value: 2: must not be specified when allocationMode is 'All'",
            )
        ],
    ),
    (
        "unknown-allocation-mode",
        {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "c", "allocationMode": "Some"}}]},
        [
            (
                "FieldValueNotSupported",
                "spec.devices.requests[0].exactly.allocationMode",
                'Unsupported value: "Some": supported values: "All", "ExactCount"',
            )
        ],
    ),
    (
        "negative-count",
        {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "c", "count": -1}}]},
        [
            (
                "FieldValueInvalid",
                "spec.devices.requests[0].exactly.count",
                "Invalid value: -1: must be greater than zero",
            )
        ],
    ),
    (
        "neither-exactly-nor-first-available",
        {"requests": [{"name": "gpu"}]},
        [
            (
                "FieldValueRequired",
                "spec.devices.requests[0]",
                "Required value: exactly one of `exactly` or `firstAvailable` is required",
            )
        ],
    ),
    (
        "exactly-and-first-available",
        {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {"deviceClassName": "c"},
                    "firstAvailable": [{"name": "big", "deviceClassName": "c"}],
                }
            ]
        },
        [
            (
                "FieldValueInvalid",
                "spec.devices.requests[0]",
                "Invalid value: null: exactly one of `exactly` or `firstAvailable` is required, but multiple "
                "fields are set",
            )
        ],
    ),
    (
        "missing-class-name",
        {"requests": [{"name": "gpu", "exactly": {}}]},
        [("FieldValueRequired", "spec.devices.requests[0].exactly.deviceClassName", "Required value")],
    ),
    (
        "bad-cel-in-a-request",
        {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {"deviceClassName": "c", "selectors": [{"cel": {"expression": "1"}}]},
                }
            ]
        },
        [
            (
                "FieldValueInvalid",
                "spec.devices.requests[0].exactly.selectors[0].cel.expression",
                'Invalid value: "1": must evaluate to bool or the unknown type, not int',
            )
        ],
    ),
    (
        "constraint-names-a-missing-request",
        {"constraints": [{"requests": ["nic"], "matchAttribute": "gpu.gpuop.dev/numa"}]},
        [
            (
                "FieldValueInvalid",
                "spec.devices.constraints[0].requests[0]",
                'Invalid value: "nic": must be the name of a request in the claim or the name of a '
                "request and a "
                "subrequest separated by '/'",
            )
        ],
    ),
    (
        "match-attribute-without-domain",
        {"constraints": [{"matchAttribute": "numa"}]},
        [
            (
                "FieldValueInvalid",
                "spec.devices.constraints[0].matchAttribute",
                'Invalid value: "numa": a fully qualified name must be a domain and a name separated '
                "by a slash",
            )
        ],
    ),
    (
        "duplicate-request-name",
        {
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "c"}},
                {"name": "gpu", "exactly": {"deviceClassName": "c"}},
            ]
        },
        [("FieldValueDuplicate", "spec.devices.requests[1]", 'Duplicate value: "gpu"')],
    ),
    (
        "nine-subrequests",
        {
            "requests": [
                {
                    "name": "gpu",
                    "firstAvailable": [{"name": f"s{i}", "deviceClassName": "c"} for i in range(9)],
                }
            ]
        },
        [
            (
                "FieldValueTooMany",
                "spec.devices.requests[0].firstAvailable",
                "Too many: 9: must have at most 8 items",
            )
        ],
    ),
    (
        "constraint-without-an-attribute",
        {"constraints": [{"requests": ["gpu"]}]},
        [
            (
                "FieldValueRequired",
                "spec.devices.constraints[0]",
                'Required value: exactly one of "matchAttribute" or "distinctAttribute" is required, but '
                "multiple fields are set",
            )
        ],
    ),
    (
        "config-reference-with-two-slashes-and-no-opaque",
        {"config": [{"requests": ["gpu/a/b"]}]},
        [
            (
                "FieldValueInvalid",
                "spec.devices.config[0].requests[0]",
                'Invalid value: "gpu/a/b": must be the name of a request in the claim or the name of '
                "a request "
                "and a subrequest separated by '/'",
            ),
            ("FieldValueRequired", "spec.devices.config[0].opaque", "Required value"),
        ],
    ),
    (
        "opaque-parameters-not-an-object",
        {"config": [{"opaque": {"driver": "gpu.gpuop.dev", "parameters": [1, 2]}}]},
        [
            (
                "FieldValueInvalid",
                "spec.devices.config[0].opaque.parameters",
                'Invalid value: "<value omitted>": must be a valid JSON object',
            )
        ],
    ),
    (
        "exists-toleration-with-a-value",
        {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "c",
                        "tolerations": [{"key": "gpuop.dev/hot", "operator": "Exists", "value": "yes"}],
                    },
                }
            ]
        },
        [
            (
                "FieldValueInvalid",
                "spec.devices.requests[0].exactly.tolerations[0].value",
                'Invalid value: "yes": must be empty for operator `Exists`',
            )
        ],
    ),
]


@pytest.mark.parametrize(
    ("devices", "expected"), [c[1:] for c in CLAIM_CASES], ids=[c[0] for c in CLAIM_CASES]
)
def test_bad_resourceclaims_are_refused(
    server: SimApiServer, devices: JsonObj, expected: list[tuple[str, str, str]]
) -> None:
    status, answer = call(
        server, "POST", f"{BASE}/namespaces/default/resourceclaims", a_claim("bad-claim", **devices)
    )
    assert status == 422, answer
    assert answer["details"]["kind"] == "ResourceClaim"
    assert causes_of(answer) == expected


def test_subrequests_and_templates_get_the_request_defaults(server: SimApiServer) -> None:
    claim = a_claim(
        "first-available",
        requests=[
            {
                "name": "gpu",
                "firstAvailable": [
                    {"name": "big", "deviceClassName": "big.gpuop.dev"},
                    {"name": "all", "deviceClassName": "small.gpuop.dev", "allocationMode": "All"},
                ],
            }
        ],
    )
    status, created = call(server, "POST", f"{BASE}/namespaces/default/resourceclaims", claim)
    assert status == 201, created
    first = created["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert first[0] == {
        "name": "big",
        "deviceClassName": "big.gpuop.dev",
        "allocationMode": "ExactCount",
        "count": 1,
    }
    assert first[1] == {"name": "all", "deviceClassName": "small.gpuop.dev", "allocationMode": "All"}
    assert created["status"] == {} and "generation" not in created["metadata"]
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "bad-template"},
        "spec": {"spec": {"devices": {"requests": [{"name": "Bad", "exactly": {"deviceClassName": "c"}}]}}},
    }
    status, answer = call(server, "POST", f"{BASE}/namespaces/default/resourceclaimtemplates", template)
    assert status == 422
    assert [c[1] for c in causes_of(answer)] == ["spec.spec.devices.requests[0].name"]


def test_claim_spec_is_immutable_and_allocation_is_set_once(server: SimApiServer) -> None:
    path = f"{BASE}/namespaces/default/resourceclaims/alloc-once"
    status, created = call(server, "POST", f"{BASE}/namespaces/default/resourceclaims", a_claim("alloc-once"))
    assert status == 201
    changed = copy.deepcopy(created)
    changed["spec"]["devices"]["requests"][0]["exactly"]["count"] = 3
    status, answer = call(server, "PUT", path, changed)
    assert status == 422
    ((reason, field, message),) = causes_of(answer)
    assert (reason, field) == ("FieldValueInvalid", "spec")
    assert message.startswith(
        'Invalid value: {"Devices":{"Requests":[{"Name":"gpu","Exactly":{"DeviceClassName":'
    )
    assert message.endswith("field is immutable") and '"Count":3' in message

    # reservedFor needs an allocation; a result must name a request of the claim.
    reserved = copy.deepcopy(created)
    reserved["status"] = {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u-1"}]}
    status, answer = call(server, "PUT", path + "/status", reserved)
    assert status == 422
    assert causes_of(answer) == [
        (
            "FieldValueForbidden",
            "status.reservedFor",
            "Forbidden: may not be specified when `allocated` is not set",
        )
    ]
    result = {"request": "nic", "driver": "gpu.gpuop.dev", "pool": "p", "device": "gpu-0"}
    wrong = copy.deepcopy(created)
    wrong["status"] = {"allocation": {"devices": {"results": [result]}}}
    status, answer = call(server, "PUT", path + "/status", wrong)
    assert status == 422
    assert [c[1] for c in causes_of(answer)] == ["status.allocation.devices.results[0].request"]

    bad_selector = copy.deepcopy(created)
    fields = [{"key": "metadata.labels", "operator": "In", "values": ["n"]}]
    bad_selector["status"] = {
        "allocation": {
            "devices": {"results": [dict(result, request="gpu")]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": fields}]},
        }
    }
    status, answer = call(server, "PUT", path + "/status", bad_selector)
    assert status == 422
    assert causes_of(answer) == [
        (
            "FieldValueInvalid",
            "status.allocation.nodeSelector.nodeSelectorTerms[0].matchFields[0].key",
            'Invalid value: "metadata.labels": not a valid field selector key',
        )
    ]

    allocated = copy.deepcopy(created)
    allocated["status"] = {
        "allocation": {"devices": {"results": [dict(result, request="gpu")], "config": []}}
    }
    status, stored = call(server, "PUT", path + "/status", allocated)
    assert status == 200, stored
    # The same allocation again (an empty list is the same as none) changes nothing.
    again = copy.deepcopy(stored)
    again["status"]["allocation"]["devices"]["config"] = []
    status, same = call(server, "PUT", path + "/status", again)
    assert status == 200 and same["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    moved = copy.deepcopy(stored)
    moved["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-7"
    status, answer = call(server, "PUT", path + "/status", moved)
    assert status == 422
    assert [c[1] for c in causes_of(answer)] == ["status.allocation"]
    assert '"Device":"gpu-7"' in answer["message"]
    # Deallocation (clearing the allocation) is allowed.
    cleared = copy.deepcopy(stored)
    cleared["status"] = {}
    status, answer = call(server, "PUT", path + "/status", cleared)
    assert status == 200 and answer["status"] == {}


@pytest.mark.parametrize(
    ("selectors", "field", "message"),
    [
        (
            [{"cel": {"expression": "true"}}, {"cel": {"expression": "device.vendor == 'x'"}}],
            "spec.selectors[1].cel.expression",
            "Invalid value: \"device.vendor == 'x'\": compilation failed: ERROR: <input>:1:7: "
            "undefined field 'vendor'",
        ),
        ([{}], "spec.selectors[0].cel", "Required value"),
        (
            [{"cel": {"expression": "true"}}] * 33,
            "spec.selectors",
            "Too many: 33: must have at most 32 items",
        ),
        (
            [{"cel": {"expression": "true || " * 1300 + "true"}}],
            "spec.selectors[0].cel.expression",
            "Too long: may not be more than 10240 bytes",
        ),
    ],
    ids=["unknown-device-field-in-second", "no-cel", "33-selectors", "over-10KiB"],
)
def test_bad_deviceclass_selectors(
    server: SimApiServer, selectors: list[JsonObj], field: str, message: str
) -> None:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "bad-class"},
        "spec": {"selectors": selectors},
    }
    status, answer = call(server, "POST", f"{BASE}/deviceclasses", body)
    assert status == 422, answer
    ((_reason, found_field, found_message),) = causes_of(answer)
    assert found_field == field and found_message.startswith(message)


def test_the_official_client_publishes_slices_and_allocates_claims(server: SimApiServer) -> None:
    """What the DRA driver does, through `kubernetes.client.ResourceV1Api`."""
    api = client.ResourceV1Api(client.ApiClient(client.Configuration(host=server.url)))
    device = client.V1Device(
        name="gpu-0",
        attributes={"gpu.gpuop.dev/type": client.V1DeviceAttribute(string="gpu")},
        capacity={"memory": client.V1DeviceCapacity(value="196608Mi")},
    )
    spec = client.V1ResourceSliceSpec(
        driver="client.gpuop.dev",
        node_name="client-node",
        pool=client.V1ResourcePool(name="client-node", generation=1, resource_slice_count=1),
        devices=[device],
    )
    created = api.create_resource_slice(
        client.V1ResourceSlice(metadata=client.V1ObjectMeta(name="client-s"), spec=spec)
    )
    assert created.spec.devices[0].capacity["memory"].value == "192Gi"
    listed = api.list_resource_slice(field_selector="spec.driver=client.gpuop.dev,spec.nodeName=client-node")
    assert [s.metadata.name for s in listed.items] == ["client-s"]
    created.spec.devices.append(client.V1Device(name="gpu-1"))
    created.spec.pool.generation = 2
    replaced = api.replace_resource_slice("client-s", created)
    assert replaced.metadata.generation == 2 and len(replaced.spec.devices) == 2
    with pytest.raises(ApiException) as refused:
        api.list_resource_slice(field_selector="spec.pool.name=client-node")
    assert refused.value.status == 400

    request = client.V1DeviceRequest(
        name="g", exactly=client.V1ExactDeviceRequest(device_class_name="gpu.gpuop.dev")
    )
    claim = api.create_namespaced_resource_claim(
        "default",
        client.ResourceV1ResourceClaim(
            metadata=client.V1ObjectMeta(name="client-claim"),
            spec=client.V1ResourceClaimSpec(devices=client.V1DeviceClaim(requests=[request])),
        ),
    )
    assert (
        claim.spec.devices.requests[0].exactly.allocation_mode,
        claim.spec.devices.requests[0].exactly.count,
    ) == (
        "ExactCount",
        1,
    )
    result = client.V1DeviceRequestAllocationResult(
        request="g", driver="client.gpuop.dev", pool="client-node", device="gpu-0"
    )
    claim.status = client.V1ResourceClaimStatus(
        allocation=client.V1AllocationResult(devices=client.V1DeviceAllocationResult(results=[result]))
    )
    allocated = api.replace_namespaced_resource_claim_status("client-claim", "default", claim)
    assert allocated.status.allocation.devices.results[0].device == "gpu-0"
    allocated.status.allocation.devices.results[0].device = "gpu-1"
    with pytest.raises(ApiException) as immutable:
        api.replace_namespaced_resource_claim_status("client-claim", "default", allocated)
    assert (
        immutable.value.status == 422 and "field is immutable" in json.loads(immutable.value.body)["message"]
    )


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (
            {"extendedResourceName": "memory"},
            "spec.extendedResourceName",
            'Invalid value: "memory": must be a valid extended resource name',
        ),
        (
            {"extendedResourceName": "example.kubernetes.io/gpu"},
            "spec.extendedResourceName",
            'Invalid value: "example.kubernetes.io/gpu": must be a valid extended resource name',
        ),
        ({"config": [{}]}, "spec.config[0].opaque", "Required value"),
        (
            {"config": [{"opaque": {"driver": "Bad_Driver", "parameters": {}}}]},
            "spec.config[0].opaque.driver",
            'Invalid value: "Bad_Driver": a lowercase RFC 1123 subdomain',
        ),
    ],
    ids=["native-resource-name", "kubernetes-io-domain", "config-without-opaque", "bad-opaque-driver"],
)
def test_bad_deviceclass_specs(server: SimApiServer, spec: JsonObj, field: str, message: str) -> None:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "bad-spec"},
        "spec": spec,
    }
    status, answer = call(server, "POST", f"{BASE}/deviceclasses", body)
    assert status == 422, answer
    ((_reason, found_field, found_message),) = causes_of(answer)
    assert found_field == field and found_message.startswith(message)


def test_a_deviceclass_with_an_extended_resource_name_is_stored(server: SimApiServer) -> None:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "ext-class"},
        "spec": {"extendedResourceName": "gpuop.dev/gpu", "selectors": [{"cel": {"expression": "true"}}]},
    }
    status, created = call(server, "POST", f"{BASE}/deviceclasses", body)
    assert status == 201 and created["spec"]["extendedResourceName"] == "gpuop.dev/gpu"


def test_reserved_for_merges_by_uid_in_strategic_merge_and_apply(server: SimApiServer) -> None:
    """Two schedulers reserving one claim: each adds its consumer, neither drops the other's."""
    path = f"{BASE}/namespaces/default/resourceclaims/shared-claim/status"
    assert (
        call(server, "POST", f"{BASE}/namespaces/default/resourceclaims", a_claim("shared-claim"))[0] == 201
    )
    result = {"request": "gpu", "driver": "gpu.gpuop.dev", "pool": "p", "device": "gpu-0"}
    first = {
        "status": {
            "allocation": {"devices": {"results": [result]}},
            "reservedFor": [{"resource": "pods", "name": "a", "uid": "uid-a"}],
        }
    }

    def patch(body: JsonObj, content_type: str, query: str = "") -> JsonObj:
        url = f"{server.url}{path}" + (f"?{query}" if query else "")
        req = urllib.request.Request(
            url, data=json.dumps(body).encode(), method="PATCH", headers={"Content-Type": content_type}
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            answer: JsonObj = json.loads(resp.read())
            return answer

    patch(first, "application/merge-patch+json")
    second = {"status": {"reservedFor": [{"resource": "pods", "name": "b", "uid": "uid-b"}]}}
    merged = patch(second, "application/strategic-merge-patch+json")
    assert [c["uid"] for c in merged["status"]["reservedFor"]] == ["uid-a", "uid-b"]
    applied = patch(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "shared-claim"},
            "status": {"reservedFor": [{"resource": "pods", "name": "c", "uid": "uid-c"}]},
        },
        "application/apply-patch+yaml",
        "fieldManager=other-scheduler&force=true",
    )
    assert [c["uid"] for c in applied["status"]["reservedFor"]] == ["uid-a", "uid-b", "uid-c"]


def test_kubelet_style_cleanup_deletes_one_nodes_slices_by_field_selector(server: SimApiServer) -> None:
    """The kubelet removes a node's slices with DELETE collection + spec.nodeName; `spec.nodeName=`
    selects the slices that have no node (allNodes / nodeSelector pools)."""
    for name, spec in (
        ("gone-1", {"nodeName": "cleanup-node", "driver": "cleanup.gpuop.dev"}),
        ("gone-2", {"nodeName": "cleanup-node", "driver": "cleanup.gpuop.dev"}),
        ("stays", {"nodeName": "other-cleanup-node", "driver": "cleanup.gpuop.dev"}),
        ("cluster", {"nodeName": None, "allNodes": True, "driver": "cleanup.gpuop.dev"}),
    ):
        assert call(server, "POST", f"{BASE}/resourceslices", a_slice(name, **spec))[0] == 201
    status, deleted = call(
        server, "DELETE", f"{BASE}/resourceslices", query="fieldSelector=spec.nodeName%3Dcleanup-node"
    )
    assert status == 200 and sorted(i["metadata"]["name"] for i in deleted["items"]) == ["gone-1", "gone-2"]
    status, left = call(
        server, "GET", f"{BASE}/resourceslices", query="fieldSelector=spec.driver%3Dcleanup.gpuop.dev"
    )
    assert sorted(i["metadata"]["name"] for i in left["items"]) == ["cluster", "stays"]
    status, unbound = call(
        server,
        "GET",
        f"{BASE}/resourceslices",
        query="fieldSelector=spec.driver%3Dcleanup.gpuop.dev,spec.nodeName%3D",
    )
    assert [i["metadata"]["name"] for i in unbound["items"]] == ["cluster"]
    # A null sent for an optional field is not stored (Go decodes it as unset).
    assert "nodeName" not in unbound["items"][0]["spec"]


def test_admin_access_needs_the_admin_namespace_label(server: SimApiServer) -> None:
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "dra-admins", "labels": {"resource.kubernetes.io/admin-access": "true"}},
    }
    assert call(server, "POST", "/api/v1/namespaces", namespace)[0] == 201
    admin = a_claim(
        "admin-claim",
        requests=[{"name": "gpu", "exactly": {"deviceClassName": "gpu.gpuop.dev", "adminAccess": True}}],
    )
    status, answer = call(server, "POST", f"{BASE}/namespaces/default/resourceclaims", admin)
    assert status == 422
    assert causes_of(answer) == [
        (
            "FieldValueForbidden",
            "spec.devices.requests[0].adminAccess",
            "Forbidden: admin access to devices requires the `resource.kubernetes.io/admin-access: true` "
            "label on the containing namespace",
        )
    ]
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "admin-template"},
        "spec": {"spec": admin["spec"]},
    }
    status, answer = call(server, "POST", f"{BASE}/namespaces/default/resourceclaimtemplates", template)
    assert status == 422 and [c[1] for c in causes_of(answer)] == ["spec.devices.requests[0].adminAccess"]
    assert call(server, "POST", f"{BASE}/namespaces/dra-admins/resourceclaims", admin)[0] == 201
    assert call(server, "POST", f"{BASE}/namespaces/dra-admins/resourceclaimtemplates", template)[0] == 201
