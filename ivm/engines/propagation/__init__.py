"""The semijoin/projection-view engine of Hu & Wang over pattern-compatible join trees (003 §3)."""

from ivm.engines.propagation.engine import PropagationEngine
from ivm.engines.propagation.planning import TreePlan, choose_tree, rooted_tree
from ivm.engines.propagation.views import SemijoinViews

__all__ = ["PropagationEngine", "SemijoinViews", "TreePlan", "choose_tree", "rooted_tree"]
