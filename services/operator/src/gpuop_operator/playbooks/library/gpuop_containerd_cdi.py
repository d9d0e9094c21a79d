"""Ansible module: enable CDI in a containerd config (logic in gpuop_operator.runtimecfg)."""

from __future__ import annotations

import os
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from gpuop_operator.runtimecfg import RuntimeConfigError, containerd_cdi_config

DOCUMENTATION = r"""
module: gpuop_containerd_cdi
short_description: Set enable_cdi and cdi_spec_dirs in a containerd config
options:
  path:
    description: containerd config file (absent or empty means a new version 2 file)
    type: path
    required: true
  spec_dirs:
    description: directories containerd must search for CDI specs
    type: list
    elements: str
    required: true
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "spec_dirs": {"type": "list", "elements": "str", "required": True},
        },
        supports_check_mode=True,
    )
    path = Path(module.params["path"])
    before = path.read_text() if path.is_file() else ""
    try:
        after = containerd_cdi_config(before, list(module.params["spec_dirs"]))
    except RuntimeConfigError as exc:
        module.fail_json(msg=f"{path}: {exc}")
        return
    if after is None:
        module.exit_json(changed=False, path=str(path))
        return
    if not module.check_mode:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.gpuop")
        temp.write_text(after)
        os.chmod(temp, 0o644)
        module.atomic_move(str(temp), str(path))
    module.exit_json(changed=True, path=str(path), diff={"before": before, "after": after})


if __name__ == "__main__":
    main()
