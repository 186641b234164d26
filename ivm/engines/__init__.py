"""The engines: one module per algorithm, all behind :class:`Engine`."""

from ivm.engines.base import Engine, EngineRefused
from ivm.engines.first_order import FirstOrderIVM
from ivm.engines.first_order_general import FirstOrderDelta
from ivm.engines.fivm import FIVM
from ivm.engines.ivm_eps import IVMEps
from ivm.engines.ivm_eps.adaptive import IVMEpsAdaptive
from ivm.engines.propagation import PropagationEngine
from ivm.engines.qhier import QHierEngine

ENGINES: dict[str, type[Engine]] = {
    FirstOrderIVM.name: FirstOrderIVM,
    FIVM.name: FIVM,
    FirstOrderDelta.name: FirstOrderDelta,
    IVMEps.name: IVMEps,
    IVMEpsAdaptive.name: IVMEpsAdaptive,
    QHierEngine.name: QHierEngine,
    PropagationEngine.name: PropagationEngine,
}

__all__ = ["ENGINES", "Engine", "EngineRefused", "FirstOrderIVM"]
