"""Hugging Face transformers' norm modules as built-ins: hf-llama-rmsnorm, hf-gemma-rmsnorm, hf-t5-layernorm.

Only the modeling modules are imported (no hub access). Each class runs through the generic
module path (:mod:`core.adapters.modules`) with the test's weight:

    LlamaRMSNorm   y = w * (x_f32 * rsqrt(mean(x_f32^2) + eps)).to(x.dtype)
    GemmaRMSNorm   y = (x_f32 * rsqrt(mean(x_f32^2) + eps) * (1 + w_f32)).to(x.dtype)   weight_offset 1
    T5LayerNorm    y = w * (x * rsqrt(mean(x_f32^2) + eps)) cast to w's dtype when w is half;
                   despite its name an RMSNorm: no mean subtraction, no bias

With weights in another dtype than x their outputs follow their own rules (measured, docs/findings.md [M]):
Llama's ``w * x_hat.to(x.dtype)`` has the promoted dtype (float32 for float32 weights with 16-bit x), T5's the
weight's (16-bit for 16-bit weights with float32 x); Gemma casts back to x's dtype (torch's rule). Each declares it
(``Kernel.output_dtype``).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util

from core.kernel import Builtin, Kernel

# builtin name -> (module, class, weight_offset, what it computes, declared conventions: proofs.mechanisms)
HF_NORMS = {
    "hf-llama-rmsnorm": ("transformers.models.llama.modeling_llama", "LlamaRMSNorm", 0.0,
                         "Llama: statistics in fp32, output cast to the input dtype before the weight",
                         ("double_rounding",)),
    "hf-gemma-rmsnorm": ("transformers.models.gemma.modeling_gemma", "GemmaRMSNorm", 1.0,
                         "Gemma: all in fp32, scale (1 + w), cast back at the end", ()),
    # T5's autograd adds the two paths to x (the fp16 product and the fp32 variance) in fp16 (docs/findings.md [E])
    "hf-t5-layernorm": ("transformers.models.t5.modeling_t5", "T5LayerNorm", 0.0,
                        "T5: an RMSNorm (no centring, no bias), variance in fp32",
                        ("double_rounding", "storage_statistics_backward")),
}
# builtin name -> its output dtype with parameters in another dtype than x (core.kernel.OUTPUT_DTYPE_RULES)
OUTPUT_DTYPES = {"hf-llama-rmsnorm": "promoted", "hf-t5-layernorm": "weight"}


def _unavailable() -> str | None:
    if importlib.util.find_spec("transformers") is None:
        return "the transformers package is not installed (pip install 'normverify[thirdparty]')"
    return None


def _loader(name: str):
    module_name, class_name, weight_offset, description, conventions = HF_NORMS[name]

    def load() -> list[Kernel]:
        from core.adapters.modules import kernel_from_module_class

        cls = getattr(importlib.import_module(module_name), class_name)
        kernel = kernel_from_module_class(cls, name, "rmsnorm", name=name, weight_offset=weight_offset,
                                          description=f"transformers {class_name}: {description}")
        return [dataclasses.replace(kernel, conventions=conventions, output_dtype=OUTPUT_DTYPES.get(name, "input"))]

    return load


BUILTINS = [Builtin(name, f"transformers {spec[1]}", _loader(name), _unavailable) for name, spec in HF_NORMS.items()]
