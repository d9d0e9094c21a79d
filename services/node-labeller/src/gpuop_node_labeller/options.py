"""What `labels_for` is asked to produce: the label sets and their variants (pure data)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from gpuop_common.config.node_labeller import ALL_LABEL_SETS, LabelSet, NodeLabellerConfig
from gpuop_common.config.sharing import Sharing

MigStrategy = Literal["none", "single", "mixed"]


@dataclass(frozen=True, slots=True)
class LabelOptions:
    """`label_sets`: which families to write; `counter_labels`/`beta_labels`: the AMD labeller's
    per-value counters and `beta.amd.com/` copies; `mig_strategy`: how GFD labels describe MIG;
    `sharing`: the device plugin's sharing, for the replica and sharing-strategy labels."""

    label_sets: tuple[LabelSet, ...] = ALL_LABEL_SETS
    counter_labels: bool = True
    beta_labels: bool = True
    mig_strategy: MigStrategy = "none"
    sharing: Sharing = field(default_factory=Sharing)  # what the device plugin advertises per GPU

    @classmethod
    def from_config(
        cls,
        config: NodeLabellerConfig,
        *,
        mig_strategy: MigStrategy = "none",
        label_sets: Sequence[LabelSet] | None = None,
    ) -> LabelOptions:
        """Options from the hot-reloaded config; explicit `label_sets` (a CLI flag) win over it."""
        chosen = label_sets if label_sets is not None else config.label_sets
        return cls(
            label_sets=tuple(dict.fromkeys(chosen)),
            counter_labels=config.counter_labels,
            beta_labels=config.beta_labels,
            mig_strategy=mig_strategy,
            sharing=config.sharing,
        )
