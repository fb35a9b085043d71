"""Built-in kernels. Each module exports ``BUILTINS: list[verify.registry.Builtin]``."""
