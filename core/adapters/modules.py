"""An ``nn.Module`` normalization class as a kernel under test (SPEC ``PATH.py:Class`` / ``MODULE:Class``).

The class is constructed the way ``torch.nn.LayerNorm`` is, ``cls(d, eps=eps)``: its first
constructor parameter is the normalized size d, and eps goes to the parameter named ``eps``
(or ``epsilon``, ``variance_epsilon``, ...), else is set on the attribute of that name after
construction. One module is built per (d, eps) and reused.

Its parameters are found by name: the scale is the parameter called ``weight``, ``gamma``,
``scale``, ``g`` or ``w``; the shift is ``bias``, ``beta``, ``shift`` or ``b``. Each call runs
the module through :func:`torch.func.functional_call` with the test's own ``weight``/``bias``
tensors in place of those parameters, so gradients flow back to the test's tensors and the
module's stored values play no part. The module is in training mode when grad mode is on and in eval mode when it is
off (under no_grad or inference_mode, as a serving stack or an evaluation calls it): a norm's output depends on
neither, and a module with a path of its own for eval is checked on it. The kind is ``layernorm`` when the module has
a shift parameter, ``rmsnorm`` otherwise, unless ``--kind`` says.

A test's ``weight=None`` means "scale 1": the module's scale parameter gets ``1 - weight_offset``
(so a Gemma-style ``(1 + w)`` module gets ``w = 0``); ``bias=None`` means shift 0; either made in the dtype
of the other one given (x's without either).
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable

import torch
from torch.func import functional_call

from core import kinds
from core.errors import UsageError, one_line
from core.kernel import Kernel

WEIGHT_NAMES = ("weight", "gamma", "scale", "g", "w")
BIAS_NAMES = ("bias", "beta", "shift", "b")
EPS_NAMES = ("eps", "epsilon", "variance_epsilon", "norm_eps", "layer_norm_eps")
_PROBE_SIZE = 8
_PROBE_EPS = 1e-5


class ModuleKernel:
    """Calls ``cls`` built for (d, eps), optionally under ``torch.compile``, with the test's parameters.

    ``weight_param`` / ``bias_param`` are the names of the module's scale / shift parameters
    (``bias_param`` is None for a module without a shift).
    """

    def __init__(self, cls: type[torch.nn.Module], label: str, weight_param: str, bias_param: str | None,
                 eps_in_constructor: str | None, eps_attribute: str | None, weight_offset: float,
                 compile: bool = False) -> None:
        self.cls = cls
        self.label = label
        self.weight_param = weight_param
        self.bias_param = bias_param
        self.eps_in_constructor = eps_in_constructor
        self.eps_attribute = eps_attribute
        self.weight_offset = weight_offset
        self.compile = compile
        self._modules: dict[tuple[int, float], Callable] = {}

    def build(self, d: int, eps: float) -> torch.nn.Module:
        """A fresh module of normalized size d and epsilon eps."""
        kwargs = {self.eps_in_constructor: eps} if self.eps_in_constructor else {}
        module = self.cls(d, **kwargs)
        if self.eps_attribute:
            setattr(module, self.eps_attribute, eps)
        return module

    def _runner(self, d: int, eps: float) -> Callable:
        key = (d, float(eps))
        if key not in self._modules:
            module = self.build(d, eps)

            def run(x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
                module.train(torch.is_grad_enabled())  # eval mode where no gradient is taken, as a serving stack
                return functional_call(module, params, (x,))

            if self.compile:  # a code object of its own: Dynamo keeps its compiled graphs, and its recompile limit,
                # per code object, so each (d, eps) counts only its own dtypes, ranks and grad modes
                run = types.FunctionType(run.__code__.replace(), run.__globals__, run.__name__, run.__defaults__,
                                         run.__closure__)
            self._modules[key] = torch.compile(run, dynamic=True) if self.compile else run
        return self._modules[key]

    def __call__(self, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                 eps: float) -> torch.Tensor:
        d = x.shape[-1]
        # a missing parameter is made in the given one's dtype (x's without either): a module takes one parameter
        # dtype, possibly other than x's (torch's mixed-dtype LayerNorm), never two
        given = weight if weight is not None else bias
        dtype = x.dtype if given is None else given.dtype
        if weight is None:
            weight = torch.full((d,), 1.0 - self.weight_offset, dtype=dtype, device=x.device)
        params = {self.weight_param: weight}
        if self.bias_param is not None:
            params[self.bias_param] = torch.zeros(d, dtype=dtype, device=x.device) if bias is None else bias
        elif bias is not None:
            raise ValueError(f"{self.label} has no shift parameter ({', '.join(BIAS_NAMES)}) to take a bias")
        runner = self._runner(d, eps)
        if not self.compile:
            return runner(x, params)
        # Every (d, eps, dtype, affine) is a recompilation of the same code; never fall back to eager silently.
        with torch._dynamo.config.patch(recompile_limit=256, fail_on_recompile_limit_hit=True):
            return runner(x, params)


def _eps_parameter(cls: type, label: str) -> str | None:
    """The name of the eps parameter of ``cls.__init__`` (None if it has none); UsageError when it takes no size."""
    try:
        parameters = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        raise UsageError(f"kernel {label!r}: cannot read the constructor signature of {cls.__name__}") from None
    if not any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters):
        raise UsageError(f"kernel {label!r}: {cls.__name__}() takes no positional argument for the normalized size "
                         "(expected e.g. __init__(self, normalized_shape, eps=1e-5))")
    return next((p.name for p in parameters if p.name in EPS_NAMES), None)


def _find_parameter(module: torch.nn.Module, names: tuple[str, ...]) -> str | None:
    own = dict(module.named_parameters(recurse=False))
    return next((name for name in names if name in own), None)


def kernel_from_module_class(cls: type[torch.nn.Module], spec: str, kind: str | None, *, name: str | None = None,
                             weight_offset: float = 0.0, compile: bool = False, description: str = "") -> Kernel:
    """A :class:`Kernel` running ``cls(d, eps)`` with the test's weight and bias.

    Raises UsageError with one line when the class cannot be constructed that way, has no scale
    parameter of a known name, or its parameters do not fit ``kind``.
    """
    label = name or spec
    eps_arg = _eps_parameter(cls, label)
    try:
        probe = cls(_PROBE_SIZE, **({eps_arg: _PROBE_EPS} if eps_arg else {}))
    except Exception as error:
        raise UsageError(f"kernel {label!r}: {cls.__name__}({_PROBE_SIZE}) failed: {one_line(error)}") from None
    eps_attribute = None
    if eps_arg is None:
        eps_attribute = next((n for n in EPS_NAMES if isinstance(getattr(probe, n, None), float)), None)
        if eps_attribute is None:
            raise UsageError(f"kernel {label!r}: {cls.__name__} takes no eps argument and has no eps attribute "
                             f"({', '.join(EPS_NAMES)}); the suite needs to choose eps")
    found = {n: tuple(p.shape) for n, p in probe.named_parameters(recurse=False)}
    weight_param = _find_parameter(probe, WEIGHT_NAMES)
    if weight_param is None or found[weight_param] != (_PROBE_SIZE,):
        raise UsageError(f"kernel {label!r}: {cls.__name__} has no scale parameter of shape [d] named "
                         f"{'/'.join(WEIGHT_NAMES)} (it has {found or 'no parameters'})")
    bias_param = _find_parameter(probe, BIAS_NAMES)
    if bias_param is not None and found[bias_param] != (_PROBE_SIZE,):
        raise UsageError(f"kernel {label!r}: {cls.__name__}.{bias_param} has shape {list(found[bias_param])}, not [d]")
    kind = kind or ("layernorm" if bias_param else "rmsnorm")
    record = kinds.kind(kind)
    if not record.plain:
        raise UsageError(f"kernel {label!r}: an nn.Module class is run as a layernorm or rmsnorm, not {kind}")
    if not record.has_bias and bias_param is not None:
        raise UsageError(f"kernel {label!r}: {cls.__name__} has a shift parameter {bias_param!r}; "
                         f"an {kind} takes none (use --kind layernorm)")
    module_kernel = ModuleKernel(cls, label, weight_param, bias_param, eps_arg, eps_attribute, weight_offset, compile)
    fn = module_kernel if record.has_bias else _rmsnorm_call(module_kernel)
    return Kernel(name=label, kind=kind, fn=fn, spec=spec, weight_offset=weight_offset,
                  description=description or f"nn.Module {cls.__module__}.{cls.__qualname__}"
                  + (" under torch.compile" if compile else ""))


def _rmsnorm_call(module_kernel: ModuleKernel) -> Callable:
    def rmsnorm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
        return module_kernel(x, weight, None, eps)

    rmsnorm.module_kernel = module_kernel
    return rmsnorm
