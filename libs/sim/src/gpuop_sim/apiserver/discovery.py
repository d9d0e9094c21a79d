"""Discovery documents: /version, /api, /apis, group and group-version resource lists, and the
aggregated (apidiscovery.k8s.io/v2) form kubectl 1.30+ asks for."""

from __future__ import annotations

from typing import Any

from gpuop_sim.apiserver.resources import ResourceRegistry, ResourceType

JsonObj = dict[str, Any]

VERSION_INFO: JsonObj = {
    "major": "1",
    "minor": "36",
    "emulationMajor": "1",
    "emulationMinor": "36",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "35",
    "gitVersion": "v1.36.2",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.27.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def api_versions(address: str) -> JsonObj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def _gv(group: str, version: str) -> JsonObj:
    return {"groupVersion": f"{group}/{version}", "version": version}


def api_group(group: str, versions: list[str]) -> JsonObj:
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": [_gv(group, v) for v in versions],
        "preferredVersion": _gv(group, versions[0]),
    }


def api_group_list(registry: ResourceRegistry) -> JsonObj:
    groups = []
    for group, versions in registry.groups():
        g = api_group(group, versions)
        del g["kind"], g["apiVersion"]
        groups.append(g)
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def _resource_entry(rt: ResourceType) -> JsonObj:
    entry: JsonObj = {
        "name": rt.plural,
        "singularName": rt.singular_name,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    entry["storageVersionHash"] = rt.storage_version_hash()
    return entry


def resource_list(registry: ResourceRegistry, group: str, version: str) -> JsonObj | None:
    rts = registry.resources_in(group, version)
    if not rts:
        return None
    resources: list[JsonObj] = []
    for rt in rts:
        resources.append(_resource_entry(rt))
        for sub in sorted(rt.subresources, key=lambda s: s.name):
            entry: JsonObj = {
                "name": f"{rt.plural}/{sub.name}",
                "singularName": "",
                "namespaced": rt.namespaced,
            }
            if sub.group is not None:
                entry["group"] = sub.group
                entry["version"] = sub.version
            entry["kind"] = sub.kind
            entry["verbs"] = list(sub.verbs)
            resources.append(entry)
    body: JsonObj = {"kind": "APIResourceList", "groupVersion": f"{group}/{version}" if group else version}
    if group:
        body["apiVersion"] = "v1"
    body["resources"] = resources
    return body


def _aggregated_resource(rt: ResourceType) -> JsonObj:
    entry: JsonObj = {
        "resource": rt.plural,
        "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "scope": "Namespaced" if rt.namespaced else "Cluster",
        "singularResource": rt.singular_name,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    if rt.subresources:
        entry["subresources"] = [
            {
                "subresource": s.name,
                "responseKind": {
                    "group": s.group if s.group is not None else rt.group,
                    "version": s.version or rt.version,
                    "kind": s.kind,
                },
                "verbs": list(s.verbs),
            }
            for s in sorted(rt.subresources, key=lambda s: s.name)
        ]
    return entry


def aggregated(registry: ResourceRegistry, *, core: bool) -> JsonObj:
    """APIGroupDiscoveryList for /api (core) or /apis (every named group)."""
    items: list[JsonObj] = []
    groups = [("", ["v1"])] if core else registry.groups()
    for group, versions in groups:
        item: JsonObj = {"metadata": {"name": group} if group else {}, "versions": []}
        for version in versions:
            rts = registry.resources_in(group, version)
            item["versions"].append(
                {
                    "version": version,
                    "resources": [_aggregated_resource(rt) for rt in rts],
                    "freshness": "Current",
                }
            )
        items.append(item)
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }
