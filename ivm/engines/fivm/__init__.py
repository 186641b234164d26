"""F-IVM (Kara, Nikolic, Olteanu, Zhang): higher-order IVM over view trees with ring payloads."""

from ivm.engines.fivm.engine import FIVM, RING_NAMES
from ivm.engines.fivm.view_tree import ViewNode, ViewTree, build_view_tree, compile_plans, mu

__all__ = ["FIVM", "RING_NAMES", "ViewNode", "ViewTree", "build_view_tree", "compile_plans", "mu"]
