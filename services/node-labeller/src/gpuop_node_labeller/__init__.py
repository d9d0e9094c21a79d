"""gpuop node labeller: keeps a GPU node's labels exact (AMD labeller, NVIDIA GFD and gpuop.dev/ sets).

from gpuop_node_labeller import LabelOptions, labels_for
labels = labels_for(backend.enumerate(), LabelOptions())
"""

from gpuop_node_labeller.labels import LabelOptions, labels_for

__all__ = ["LabelOptions", "labels_for"]
