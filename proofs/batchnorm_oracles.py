"""Float64 references of BatchNorm, channel-wise LayerNorm and InstanceNorm over x [N, C, *] (numpy only).

Each is LayerNorm (proofs.oracles, compiled from the derived expressions) over the elements its statistics span
(claims bn.forward, cln.forward, in.forward):

    batchnorm(x, weight, bias, eps) -> y                          training mode: each channel's N x spatial elements
    batchnorm_vjp(x, weight, eps, dy) -> (dx, dweight, dbias)     the whole batch's VJP (claim bn.jacobian)
    batchnorm_eval(x, running_mean, running_var, weight, bias, eps)  the per-channel affine map (claim bn.eval)
    batchnorm_eval_vjp(x, running_mean, running_var, weight, eps, dy) -> (dx, dweight, dbias)   its VJP (bn.jacobian
                                                                   in eval mode: the running statistics constants)
    batch_statistics(x) -> (mean, population variance)           per channel, shape [C]
    running_update(running_mean, running_var, x, momentum, unbiased=True, num_batches_tracked=0,
                   convention="torch") -> (mean, var)             claim bn.running_statistics
    batchnorm_spectral_norm(x, weight, eps)                       ||J||_2 of the training-mode batch Jacobian
    channel_layernorm(x, weight, bias, eps, dims)                 LN over the trailing ``dims`` axes, per sample
    instance_norm(x, weight, bias, eps) -> y                      each (sample, channel)'s spatial elements
    instance_running_update(running_mean, running_var, x, momentum) -> (mean, var)   claim in.running_statistics

x, weight, bias, dy are float64 arrays of the values a kernel received; weight/bias are [C] (channel-wise
LayerNorm: the normalized shape) or None. ``momentum`` None is torch's cumulative moving average: the factor
1/(num_batches_tracked + 1), num_batches_tracked counting the training calls before this one. Channels (groups)
where sigma^2 + eps = 0 give NaN, as in proofs.oracles; the unbiased running variance needs n >= 2 elements per
channel (ValueError otherwise: the factor n/(n-1) is undefined).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from proofs import oracles

CONVENTIONS = ("torch", "keras")  # new = (1 - m) old + m batch, or new = m old + (1 - m) batch


def _batch(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < 2:
        raise ValueError(f"BatchNorm needs x of shape [N, C, *], got {x.shape}")
    return x


def _channels_as_rows(x) -> np.ndarray:
    """x [N, C, *] as [C, N S]: one row per channel, its elements in (sample, spatial) order."""
    x = _batch(x)
    return np.moveaxis(x, 1, 0).reshape(x.shape[1], -1)


def _from_rows(rows: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The inverse of :func:`_channels_as_rows`."""
    return np.moveaxis(rows.reshape((shape[1], shape[0], *shape[2:])), 0, 1)


def _spread(parameter, width: int) -> np.ndarray | None:
    """A per-channel parameter [C] as a per-element one [C, width] (None stays None)."""
    if parameter is None:
        return None
    return np.repeat(np.asarray(parameter, dtype=np.float64)[:, None], width, axis=1)


def batchnorm(x, weight, bias, eps) -> np.ndarray:
    """Training-mode BatchNorm: LayerNorm of each channel's N x spatial elements, per-channel weight and bias."""
    rows = _channels_as_rows(x)
    y = oracles.layernorm(rows, _spread(weight, rows.shape[1]), _spread(bias, rows.shape[1]), eps)
    return _from_rows(y, np.shape(x))


def batchnorm_vjp(x, weight, eps, dy) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(dx, dweight [C] or None, dbias [C]) of training-mode BatchNorm for the upstream gradient dy (shape of x):
    the LayerNorm VJP of each channel's row, so the batch mean and variance are differentiated through."""
    rows = _channels_as_rows(x)
    upstream = _channels_as_rows(dy)
    gamma = _spread(weight, rows.shape[1])
    dx = np.empty_like(rows)
    dweight, dbias = np.empty(rows.shape[0]), np.empty(rows.shape[0])
    # one channel at a time: proofs.oracles sums the parameter gradients over the leading axes, not per row
    for channel in range(rows.shape[0]):
        dx[channel], per_element_w, per_element_b = oracles.layernorm_vjp(
            rows[channel], None if gamma is None else gamma[channel], eps, upstream[channel])
        dbias[channel] = per_element_b.sum()
        if gamma is not None:
            dweight[channel] = per_element_w.sum()
    return _from_rows(dx, np.shape(x)), None if weight is None else dweight, dbias


@cache
def _eval_map():
    """LayerNorm's derived output y_i with the named statistics mu, sigma^2 left free (read from the environment)."""
    from proofs import algebra, expressions
    from proofs.index_compiler import compile_indexed

    return compile_indexed(expressions.output("ln"), (algebra.i,))


def batchnorm_eval(x, running_mean, running_var, weight, bias, eps) -> np.ndarray:
    """Eval-mode BatchNorm: the derived LayerNorm output with the running statistics in place of the batch's."""
    rows = _channels_as_rows(x)
    width = rows.shape[1]
    env = {"x": rows, "d": width, "epsilon": np.asarray(eps, dtype=np.float64),
           "mu": np.asarray(running_mean, dtype=np.float64), "sigma^2": np.asarray(running_var, dtype=np.float64),
           "gamma": np.ones_like(rows) if weight is None else _spread(weight, width),
           "beta": np.zeros_like(rows) if bias is None else _spread(bias, width)}
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.broadcast_to(_eval_map()(env), rows.shape)
    return _from_rows(np.array(y), np.shape(x))


def batchnorm_eval_vjp(x, running_mean, running_var, weight, eps, dy
                       ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(dx, dweight [C] or None, dbias [C]) of :func:`batchnorm_eval` for the upstream gradient dy (shape of x): the
    derivative of y = gamma (x - mu_R) / sqrt(var_R + eps) + beta with the running statistics constants,

        dx = dy gamma / sqrt(var_R + eps),   dweight_c = sum over (n, s) of dy xhat_R,   dbias_c = sum of dy,

    xhat_R = (x - mu_R) / sqrt(var_R + eps) (eval-mode InstanceNorm is the same map). No term through the batch's
    statistics: they do not enter the output."""
    rows, upstream = _channels_as_rows(x), _channels_as_rows(dy)
    mean = np.asarray(running_mean, dtype=np.float64)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        rstd = 1.0 / np.sqrt(np.asarray(running_var, dtype=np.float64)[:, None] + eps)
    gamma = 1.0 if weight is None else np.asarray(weight, dtype=np.float64)[:, None]
    dx = _from_rows(upstream * gamma * rstd, np.shape(x))
    dweight = None if weight is None else np.sum(upstream * (rows - mean) * rstd, axis=1)
    return dx, dweight, upstream.sum(axis=1)


def batch_statistics(x) -> tuple[np.ndarray, np.ndarray]:
    """(mean, population variance) of each channel's N x spatial elements, two passes."""
    rows = _channels_as_rows(x)
    mean = rows.mean(axis=1)
    return mean, np.mean((rows - mean[:, None]) ** 2, axis=1)


@cache
def _running_expressions():
    """(the update new(old, b, m), Bessel's factor n/(n - 1)) of claim bn.running_statistics, compiled."""
    import sympy as sp

    from proofs.algebra import d
    from proofs.claims.batchnorm import BESSEL, RUNNING_UPDATE, momentum, running_mean, statistic

    return (sp.lambdify((running_mean, statistic, momentum), RUNNING_UPDATE, modules="numpy"),
            sp.lambdify((d,), BESSEL, modules="numpy"))


def _factor(momentum, num_batches_tracked: int, convention: str) -> float:
    """The weight m of the batch statistic in torch's form new = (1 - m) old + m batch."""
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, not {convention!r}")
    if momentum is None:
        return 1.0 / (num_batches_tracked + 1)
    return float(momentum) if convention == "torch" else 1.0 - float(momentum)


def _bessel(count: int) -> float:
    if count < 2:
        raise ValueError(f"the unbiased running variance needs at least 2 elements per channel, got {count}")
    return float(_running_expressions()[1](count))


def running_update(running_mean, running_var, x, momentum, unbiased: bool = True, num_batches_tracked: int = 0,
                   convention: str = "torch") -> tuple[np.ndarray, np.ndarray]:
    """The running statistics after one training call on x: new = (1 - m) old + m batch statistic, the variance
    unbiased (n/(n-1) times the population variance, n = N x spatial; torch) or not; momentum None: m =
    1/(num_batches_tracked + 1); convention "keras": momentum is Keras' m' = 1 - m."""
    update, _ = _running_expressions()
    factor = _factor(momentum, num_batches_tracked, convention)
    mean, variance = batch_statistics(x)
    if unbiased:
        variance = variance * _bessel(_channels_as_rows(x).shape[1])
    return (update(np.asarray(running_mean, dtype=np.float64), mean, factor),
            update(np.asarray(running_var, dtype=np.float64), variance, factor))


def batchnorm_spectral_norm(x, weight, eps) -> float:
    """||J||_2 of training-mode BatchNorm with respect to the whole batch: max_c |gamma_c| ||J_LN(channel c)||_2
    (claim bn.spectral_norm)."""
    norms = oracles.layernorm_spectral_norm(_channels_as_rows(x), eps)
    if weight is not None:
        norms = norms * np.abs(np.asarray(weight, dtype=np.float64))
    return float(np.max(norms))


def channel_layernorm(x, weight, bias, eps, dims: int) -> np.ndarray:
    """LayerNorm of each sample over its trailing ``dims`` axes (nn.LayerNorm(x.shape[-dims:])): weight and bias of
    that shape, element-wise."""
    x = np.asarray(x, dtype=np.float64)
    if not 1 <= dims <= x.ndim:
        raise ValueError(f"dims = {dims} does not name trailing axes of x of shape {x.shape}")
    rows = x.reshape(*x.shape[: x.ndim - dims], -1)

    def flat(parameter):
        return None if parameter is None else np.asarray(parameter, dtype=np.float64).reshape(-1)

    return oracles.layernorm(rows, flat(weight), flat(bias), eps).reshape(x.shape)


def _instances(x) -> np.ndarray:
    """x [N, C, *] as [N, C, S]."""
    x = _batch(x)
    return x.reshape(x.shape[0], x.shape[1], -1)


def instance_norm(x, weight, bias, eps) -> np.ndarray:
    """InstanceNorm: LayerNorm of each (sample, channel)'s spatial elements, per-channel weight and bias."""
    rows = _instances(x)
    spatial = rows.shape[2]
    y = oracles.layernorm(rows, _spread(weight, spatial), _spread(bias, spatial), eps)
    return y.reshape(np.shape(x))


def instance_running_update(running_mean, running_var, x, momentum) -> tuple[np.ndarray, np.ndarray]:
    """torch's running statistics of InstanceNorm after one training call: the batch average of each instance's mean
    and unbiased variance (factor S/(S-1)) enters new = (1 - m) old + m statistic (claim in.running_statistics)."""
    if momentum is None:
        raise ValueError("F.instance_norm takes a numeric momentum (nn.InstanceNorm passes 0.0 for None)")
    update, _ = _running_expressions()
    rows = _instances(x)
    mean = rows.mean(axis=2)
    variance = np.mean((rows - mean[..., None]) ** 2, axis=2) * _bessel(rows.shape[2])
    factor = _factor(momentum, 0, "torch")
    return (update(np.asarray(running_mean, dtype=np.float64), mean.mean(axis=0), factor),
            update(np.asarray(running_var, dtype=np.float64), variance.mean(axis=0), factor))
