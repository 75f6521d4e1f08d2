"""The exact integer semantics of every systolica operation (the numerics contract).

The golden simulator and the quantized reference model call these functions;
the RTL implements the same arithmetic bit for bit.  ``docs/quantization.md``
describes the formats; each function's docstring gives its integer algorithm in
scalar form, and the measured maximum errors against float are listed at the
end of ``docs/quantization.md`` and asserted by ``tests/core/test_numerics.py``.

The code lives in three modules, re-exported here:

- :mod:`systolica.numerics_fixed`: formats, rounding, saturation, GEMM, requantization;
- :mod:`systolica.numerics_nonlinear`: reciprocal, rsqrt, exp, sigmoid, SiLU, GELU,
  RMSNorm, LayerNorm, softmax, RoPE;
- :mod:`systolica.numerics_attn`: streaming attention (ATTN / ATTN_OUT).
"""

from __future__ import annotations

from systolica.numerics_attn import *  # noqa: F401,F403
from systolica.numerics_attn import __all__ as _attn_all
from systolica.numerics_fixed import *  # noqa: F401,F403
from systolica.numerics_fixed import __all__ as _fixed_all
from systolica.numerics_nonlinear import *  # noqa: F401,F403
from systolica.numerics_nonlinear import __all__ as _nonlinear_all

__all__ = [*_fixed_all, *_nonlinear_all, *_attn_all]
