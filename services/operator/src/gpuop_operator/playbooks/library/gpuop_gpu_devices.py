"""Ansible module: check that every GPU of a vendor has its device nodes (gpuop_operator.devicecheck)."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from gpuop_operator.devicecheck import check_devices

DOCUMENTATION = r"""
module: gpuop_gpu_devices
short_description: Fail unless each PCI GPU of the vendor has its device nodes
options:
  host_root: {description: where the host's / is mounted, type: path, required: true}
  vendor: {description: GPU vendor, type: str, choices: [amd, nvidia], required: true}
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "host_root": {"type": "path", "required": True},
            "vendor": {"type": "str", "choices": ["amd", "nvidia"], "required": True},
        },
        supports_check_mode=True,
    )
    check = check_devices(module.params["host_root"], module.params["vendor"])
    result = {"changed": False, "gpus": check.gpus, "device_nodes": check.device_nodes, "msg": check.message}
    if not check.ok:
        module.fail_json(missing=check.missing, **result)
        return
    module.exit_json(**result)


if __name__ == "__main__":
    main()
