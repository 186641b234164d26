"""The engines: one module per algorithm, all behind :class:`Engine`."""

from ivm.engines.base import Engine, EngineRefused
from ivm.engines.first_order import FirstOrderIVM

ENGINES: dict[str, type[Engine]] = {
    FirstOrderIVM.name: FirstOrderIVM,
}

__all__ = ["ENGINES", "Engine", "EngineRefused", "FirstOrderIVM"]
