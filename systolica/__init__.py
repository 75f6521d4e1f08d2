"""systolica: an FPGA/ASIC accelerator co-design framework for transformer inference."""

from systolica.config import AccelConfig, ConfigError, load_config, preset

__version__ = "0.1.0"
__all__ = ["AccelConfig", "ConfigError", "load_config", "preset", "__version__"]
