"""The rounding errors of ATen's CPU row moments (torch's float32 layer_norm statistics), node by node.

aten/src/ATen/native/cpu/moments_utils.h, RowwiseMomentsImpl (float32 rows; V lanes of at::vec::Vectorized<float>):
each lane runs Welford over chunks of kChunkSize = 16 vectors (m += (x - m) c_j with c_j = fl(1/(j + 1)),
M2 += (x - m_old)(x - m_new)), merges each chunk into a binary-counter stack of Chan updates (AddMomentsVec), sweeps
the stack into level 0, then a scalar Welford over the N mod V tail (m += (x - m)/k), into which the V lanes are
merged one after another (AddMoments). :func:`row_moments` follows exactly these steps; run on float32 arrays it is
the kernel (tests/test_aten_moments.py: bit for bit against torch's mean and rstd), run on float64 it is the exact
computation at which the first-order error model is taken.

First-order model (claim numerics.error_model, step "aten_moments"): every rounded operation returns
fl(a op b) = (a op b)(1 + delta_v), |delta_v| <= u. To first order the error (e_m, e_M2) of the state (m, M2) is
sum_v delta_v g_v with g_v in R^2 the value of node v times its sensitivity; an update maps the state's errors
linearly, (e_m', e_M2') = J (e_m, e_M2) + sum_new delta_v g_v, so the Gram matrix G = sum_v g_v g_v^T follows
G' = J G J^T + sum_new g_v g_v^T, and a merge of two states over disjoint roundings adds J_a G_a J_a^T + J_b G_b J_b^T.
The Jacobians and new g_v of the Welford step and the Chan merge are derived (and SymPy-checked) in
proofs/claims/numerics.py. Under the mean-independence model of proofs.probabilistic (Azuma-Hoeffding on
sum_v delta_v g_v[k]) |e_m| <= lambda u sqrt(G_mm) and |e_M2| <= lambda u sqrt(G_22), each with probability
>= 1 - 2 exp(-lambda^2/2). The Welford first-order coupling of the mean's error into M2 (the term 2 phi_mu kappa of
the order-agnostic model) is inside G_22: it enters through the deviations (x - m), not through |m|.
Operations that are exact (the first update of a run from 0, a merge into an empty slot) carry no rounding.
The constants c_j = fl(1/(j+1)) and fl(n_a/n) are part of the algorithm: their effect is in the float64 emulation,
whose distance from the exact mean and M2 is returned as a deterministic term.
"""

from __future__ import annotations

import numpy as np

CHUNK = 16  # kChunkSize: vectors per Welford run of a lane
INPUT_DTYPES = ("float32",)  # 16-bit rows: UpdateMomentsVec splits each vector into two float vectors


class _Moments:
    """A Welford/Chan state of one or more lanes: count, mean m, M2, and ``errors``, an array whose 10 rows (axis 0,
    the state's shape after it) are (G_mm, G_m2, G_22, L_m, L_2, H_mm, H_m2, H_22, R_m, R_2): the Gram matrix
    G = sum_v g_v g_v^T of the first-order rounding coefficients g_v of (m, M2), upper bounds L_m >= sum_v |g_v[0]|,
    L_2 >= sum_v |g_v[1]| (the first-order worst case), and the same split between the modelled nodes (their Gram
    matrix H) and the nodes bounded rigorously (their L1 sums R: the lanes' final merges, :func:`row_moments`).
    Seen as (2, 5, *shape) the two halves, (G, L) of every node and (H, R) of the split, map alike."""

    __slots__ = ("count", "errors", "m", "m2")

    def __init__(self, count, m, m2, errors=None):
        self.count, self.m, self.m2 = count, m, m2
        self.errors = np.zeros((10, *np.shape(m)), dtype=np.float64) if errors is None else errors

    def mapped(self, alpha, beta) -> np.ndarray:
        """The errors under the linear map J = [[alpha, 0], [beta, 1]] of (e_m, e_M2): J G J^T (and J H J^T), and
        the L1 bounds |alpha| L_m, |beta| L_m + L_2 (and the same of R)."""
        halves = _halves(self.errors)
        a, b, c, l_m, l_2 = (halves[:, k] for k in range(5))
        out = np.empty((2, 5, *np.broadcast_shapes(halves.shape[2:], np.shape(alpha), np.shape(beta))))
        out[:, 0] = alpha * alpha * a
        out[:, 1] = alpha * (beta * a + b)
        out[:, 2] = beta * beta * a + 2 * beta * b + c
        out[:, 3] = np.abs(alpha) * l_m
        out[:, 4] = np.abs(beta) * l_m + l_2
        return out.reshape(10, *out.shape[2:])

    def part(self, index) -> _Moments:
        """The state of some of the lanes (an index tuple into the arrays' trailing axes)."""
        count = self.count if np.ndim(self.count) == 0 else int(np.max(self.count[index]))
        return _Moments(count, self.m[index], self.m2[index], self.errors[(slice(None), *index)])


def _halves(errors: np.ndarray) -> np.ndarray:
    """A state's errors (10, *shape) seen as (2, 5, *shape): (G_mm, G_m2, G_22, L_m, L_2) and (H_mm, ..., R_2)."""
    return errors.reshape(2, 5, *errors.shape[1:])


def _coefficients(coefficients: tuple, shape: tuple) -> np.ndarray:
    """The new roundings' coefficient vectors g = (g_m, g_M2) as one array (k, 2, *shape)."""
    g = np.empty((len(coefficients), 2, *shape))
    for k, (g_m, g_2) in enumerate(coefficients):
        g[k, 0], g[k, 1] = g_m, g_2
    return g


def _added(start: np.ndarray, increments: np.ndarray) -> np.ndarray:
    """start + increments[0] + increments[1] + ... (same shapes), one addition after another: the order in which
    the roundings of a step accumulate (each addition covers every row, lane and error row at once)."""
    total = start
    for increment in increments:
        total = total + increment
    return total


def _add(errors: np.ndarray, coefficients: tuple, shape: tuple, rigorous: bool = False) -> np.ndarray:
    """errors + the new roundings' coefficient vectors g = (g_m, g_M2) (values of the state's ``shape``), each added
    in turn: G + sum g g^T, L + sum |g|, and H + sum g g^T (modelled nodes) or, ``rigorous``, R + sum |g|."""
    g = _coefficients(coefficients, shape)
    g_m, g_2 = g[:, 0], g[:, 1]
    increments = np.empty((len(g), 5, *shape))
    increments[:, 0], increments[:, 1], increments[:, 2] = g_m * g_m, g_m * g_2, g_2 * g_2
    increments[:, 3:] = np.abs(g)
    out = np.empty((2, 5, *shape))
    out[...] = _halves(errors)
    out[0] = _added(out[0], increments)
    if rigorous:
        out[1, 3:] = _added(out[1, 3:], increments[:, 3:])
    else:
        out[1, :3] = _added(out[1, :3], increments[:, :3])
    return out.reshape(10, *shape)


def _l1_added(errors: np.ndarray, coefficients: tuple, shape: tuple) -> np.ndarray:
    """The L1 rows (L_m, L_2) of :func:`_add` (errors, coefficients, shape), alone."""
    return _added(np.broadcast_to(_halves(errors)[0, 3:], (2, *shape)), np.abs(_coefficients(coefficients, shape)))


def _half_ulp_share(value, bound, u: float | None):
    """The share of u |value| that bounds the rounding of a node whose exact-arithmetic value is ``value``: the
    kernel rounds t, |t| <= top = (|value| + 2 u bound) / (1 - u) (``bound``: the node's L1 error sum, so that
    u c2 bound with c2 < 2 bounds its operands' error), and round-to-nearest errs by at most half an ulp of t's
    binade, u 2^floor(log2 top); the share is that over u |value| (<= 1 + O(u)). 1 without ``u``."""
    if u is None:
        return 1.0
    magnitude = np.abs(value)
    top = (magnitude + 2 * u * bound) / (1 - u)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(magnitude > 0, np.exp2(np.floor(np.log2(np.where(top > 0, top, 1.0)))) / magnitude, 1.0)


def _fused(a, b, c, contract: bool = True):
    """fl(a b + c) in float32 (an FMA: the float32 product is exact in float64), a b + c in float64; without
    ``contract`` (a build with no FMA instruction: ATen's DEFAULT capability) fl(fl(a b) + c)."""
    if not contract or np.result_type(a, b, c) != np.float32:
        return a * b + c
    return (np.asarray(a, dtype=np.float64) * b + c).astype(np.float32)


def welford_step(state: _Moments, x, c, active=True, divide: bool = False, u: float | None = None,
                 contract: bool = True) -> _Moments:
    """One Welford update with x: d = x - m, m' = m + d c (or m + d / c with ``divide``: the scalar loop, whose
    division rounds once like the product), M2' = M2 + d (x - m'). The update from an empty state (count 0) is
    exact. ``active``: where False the state stays. The float32 emulation fuses m + d c and M2 + d f into FMAs
    as torch's AVX2 build does in the vector loop (GCC contracts its multiply-adds; not the scalar tail's). The
    model also counts the fused product's rounding: a superset of the kernel's roundings, sound either way. With
    ``u`` the accumulators' roundings (m', M2') are bounded by half an ulp of their binade (:func:`_half_ulp_share`).
    ``contract``: False for a build without FMA (ATen's DEFAULT capability), whose products round apart."""
    d = x - state.m
    q = d / c if divide else d * c
    m_new = state.m + q if divide else _fused(d, c, state.m, contract)
    f = x - m_new
    p = d * f
    m2_new = state.m2 + p if divide else _fused(d, f, state.m2, contract)
    c64 = 1 / np.float64(c) if divide else np.float64(c)
    d64, q64, m64, f64, p64, s64 = (np.asarray(v, dtype=np.float64) for v in (d, q, m_new, f, p, m2_new))
    mapped = state.mapped(1 - c64, -(f64 + d64 * (1 - c64)))
    shape = np.broadcast_shapes(mapped.shape[1:], d64.shape, m64.shape)

    def coefficients(share_m, share_2) -> tuple:
        return ((c64 * d64, f64 * d64 - c64 * d64 * d64),  # d = fl(x - m)
                (q64, -d64 * q64),  # q = fl(d c)
                (share_m * m64, -share_m * d64 * m64),  # m' = fl(m + q)
                (0.0, d64 * f64),  # f = fl(x - m')
                (0.0, p64),  # p = fl(d f)
                (0.0, share_2 * s64))  # M2' = fl(M2 + p)

    share_m = share_2 = 1.0
    if u is not None:  # the shares need the new state's L1 sums, taken with shares 1
        l_m, l_2 = _l1_added(mapped, coefficients(share_m, share_2), shape)
        share_m, share_2 = _half_ulp_share(m64, l_m, u), _half_ulp_share(s64, l_2, u)
    errors = _add(mapped, coefficients(share_m, share_2), shape)
    first = np.asarray(state.count) == 0
    keep = ~np.asarray(active, dtype=bool)
    pick = np.where
    m_new = pick(first, x, m_new)
    m2_new = pick(first, 0 * m2_new, m2_new)
    errors = pick(keep, state.errors, pick(first, 0.0, errors))
    return _Moments(pick(keep, state.count, state.count + 1), pick(keep, state.m, m_new),
                    pick(keep, state.m2, m2_new), errors)


def chan_merge(dst: _Moments, add: _Moments, dtype, fused: bool = False, u: float | None = None,
               rigorous: bool = False) -> _Moments:
    """AddMoments(Vec): n = n_d + n_a, c = fl(n_a/n), delta = m_a - m_d, m = m_d + c delta,
    M2 = M2_d + (M2_a + ((delta delta) c) n_d). Exact into an empty dst (count 0). Counts are the same along the
    state's arrays (every lane of a stack slot holds as many terms). ``fused``: m_d + c delta and
    M2_a + (delta delta c) n_d are FMAs in the float32 emulation (the scalar AddMoments merging the lanes; the
    vector merges are not contracted). ``u``: as for :func:`welford_step` (m, s and M2 are the accumulators).
    ``rigorous``: the merge's own roundings go to the rigorously bounded share (R) instead of the modelled one (H).
    ``fused`` takes effect in the float32 emulation only (the build's contraction: :func:`row_moments`)."""
    n_d, n_a = int(np.max(dst.count)), int(np.max(add.count))
    if n_d == 0:
        return add
    if n_a == 0:
        return dst
    c = (np.float32(n_a) / np.float32(n_d + n_a)).astype(dtype)  # the algorithm's float32 constant
    n_dst = np.asarray(n_d, dtype=dtype)
    delta = add.m - dst.m
    t = c * delta
    m_new = _fused(c, delta, dst.m) if fused else dst.m + t
    h = delta * delta * c * n_dst
    s = _fused(delta * delta * c, n_dst, add.m2) if fused else add.m2 + h
    m2_new = dst.m2 + s
    c64, n64 = np.float64(c), float(n_d)
    d64, t64, m64, h64, s64, w64 = (np.asarray(v, dtype=np.float64) for v in (delta, t, m_new, h, s, m2_new))
    coupling = 2 * c64 * n64 * d64
    mapped = dst.mapped(1 - c64, -coupling) + add.mapped(c64, coupling)
    shape = np.broadcast_shapes(mapped.shape[1:], d64.shape, w64.shape)

    def coefficients(share_m, share_s, share_2) -> tuple:
        return ((c64 * d64, coupling * d64),  # delta = fl(m_a - m_d)
                (t64, 0.0), (share_m * m64, 0.0),  # t = fl(c delta), m = fl(m_d + t)
                (0.0, h64), (0.0, h64), (0.0, h64),  # the three products of h
                (0.0, share_s * s64), (0.0, share_2 * w64))  # s = fl(M2_a + h), M2 = fl(M2_d + s)

    share_m = share_s = share_2 = 1.0
    if u is not None:  # as in welford_step
        l_m, l_2 = _l1_added(mapped, coefficients(share_m, share_s, share_2), shape)
        share_m = _half_ulp_share(m64, l_m, u)
        share_s, share_2 = _half_ulp_share(s64, l_2, u), _half_ulp_share(w64, l_2, u)
    errors = _add(mapped, coefficients(share_m, share_s, share_2), shape, rigorous=rigorous)
    return _Moments(n_d + n_a, m_new, m2_new, errors)


def row_moments(rows: np.ndarray, lanes: int, u: float | None = None, contract: bool = True) -> _Moments:
    """RowwiseMomentsImpl over the last axis of ``rows`` (float32: the kernel; float64: the exact computation with the
    algorithm's float32 constants), V = ``lanes``; the returned state's m is the mean, m2 the sum of squared
    deviations (the kernel then divides by N), and its errors the first-order rounding coefficients (with ``u``,
    the accumulation's unit roundoff: the accumulators' roundings bounded by half an ulp of their binade).
    ``contract``: whether the build fuses the multiply-adds named in :func:`welford_step` and :func:`chan_merge` (GCC
    does with FMA hardware: ATen's AVX2 kernel, which its AVX512 capability also runs; its DEFAULT kernel does not).
    The error model counts every product's rounding either way (a superset of both builds' roundings)."""
    dtype = rows.dtype
    batch, width = rows.shape[:-1], rows.shape[-1]
    n = width // lanes
    chunks = -(-n // CHUNK)
    vectors = rows[..., : n * lanes].reshape(*batch, n, lanes)
    padded = np.concatenate([vectors, np.zeros((*batch, chunks * CHUNK - n, lanes), dtype=dtype)], axis=-2)
    runs = padded.reshape(*batch, chunks, CHUNK, lanes)
    counts = np.minimum(CHUNK, n - CHUNK * np.arange(chunks))[:, None]
    empty = np.zeros_like(runs[..., 0, :])
    run = _Moments(np.zeros((chunks, 1), dtype=np.int64), empty, empty)
    for j in range(min(CHUNK, n)):  # steps past every chunk's count would leave the state as it is
        run = welford_step(run, runs[..., j, :], (np.float32(1) / np.float32(j + 1)).astype(dtype), active=j < counts,
                           u=u, contract=contract)
    lanes_state = _cascade(run, [int(count) for count in counts[:, 0]], dtype, u)
    tail = _Moments(0, np.zeros(batch, dtype=dtype), np.zeros(batch, dtype=dtype))
    for i in range(n * lanes, width):
        tail = welford_step(tail, rows[..., i], np.asarray(int(tail.count) + 1, dtype=dtype), divide=True, u=u)
    for k in range(lanes):
        tail = chan_merge(tail, lanes_state.part((..., k)), dtype, fused=contract, u=u, rigorous=True)
    return tail


def _cascade(run: _Moments, counts: list[int], dtype, u: float | None) -> _Moments:
    """RowwiseMomentsImpl's binary-counter stack of Chan merges over the chunks' states (axis -2 of ``run``'s arrays;
    ``counts``: their terms per lane), one level at a time. Slot j of the stack holds 2^j consecutive chunks, the
    merge of two slots of 2^(j-1) (the earlier one the destination); at the end the slots left, the blocks of the
    binary digits of the chunk count (the last chunks in the smallest), are swept from the smallest up, each larger
    (earlier) block merged into the sum so far. Every pair of a level is one :func:`chan_merge` over all of them
    (their counts are equal, but for the pair holding a short last chunk, merged apart): the same merges, in the same
    order per chunk, as the stack does one chunk after another. A state of count 0 without chunks."""
    shape = (*run.m.shape[:-2], run.m.shape[-1])
    if not counts:
        return _Moments(0, np.zeros(shape, dtype=dtype), np.zeros(shape, dtype=dtype))

    def nodes(state: _Moments, index: slice, count: int) -> _Moments:
        return _Moments(count, state.m[..., index, :], state.m2[..., index, :], state.errors[..., index, :])

    level, sizes, blocks = run, counts, []
    while sizes:
        if len(sizes) % 2:  # a binary digit of the count: the last node is a finished block
            blocks.append(nodes(level, slice(len(sizes) - 1, len(sizes)), sizes[-1]))
            sizes = sizes[:-1]
        if not sizes:
            break
        pairs = len(sizes) // 2
        alike = pairs if sizes[-1] == sizes[0] else pairs - 1
        merged = [chan_merge(nodes(level, slice(0, 2 * alike, 2), sizes[0]),
                             nodes(level, slice(1, 2 * alike, 2), sizes[0]), dtype, u=u)] if alike else []
        if alike < pairs:
            merged.append(chan_merge(nodes(level, slice(-2, -1), sizes[-2]), nodes(level, slice(-1, None), sizes[-1]),
                                     dtype, u=u))
        level = _Moments(0, *(np.concatenate([getattr(state, name) for state in merged], axis=-2)
                              for name in ("m", "m2", "errors")))
        sizes = [sizes[2 * k] + sizes[2 * k + 1] for k in range(pairs)]
    total = blocks[0]
    for block in blocks[1:]:
        total = chan_merge(total, block, dtype, u=u)
    return _Moments(total.count, total.m[..., 0, :], total.m2[..., 0, :], total.errors[..., 0, :])


def modelled(rows: np.ndarray, u: float) -> tuple[np.ndarray, np.ndarray]:
    """Whether the mean-independence model may be applied to the mean and to M2 of the row moments of ``rows``
    (float64; two masks, last axis kept): no value repeated in more than 1/8 of the row
    (proofs.probabilistic.independent), and that accumulator's roundings not aligned (probabilistic.aligned).
    The running mean stays within the terms' range, so its ulp is at most q = that of max|x|; it rounds
    m + (x - m) c, whose bits below q come from the terms' bits just above it (x and m lie on q's grid), so the
    terms' residues are tested at 2q, 4q, .., 2^ULP_SCALES q (integers with a fractional shift: concentrated;
    1e3 + N(0, 1): spread, though a sum of such terms would not be). M2 adds the squared deviations: tested as
    their sum."""
    from proofs.probabilistic import ULP_SCALES, aligned, independent

    with np.errstate(divide="ignore", invalid="ignore"):
        largest = np.max(np.abs(rows), axis=-1, keepdims=True)
        top = 2 * u * np.exp2(np.floor(np.log2(np.where(largest > 0, largest, 1.0))) + ULP_SCALES)
    deviations = rows - np.mean(rows, axis=-1, keepdims=True)
    spread = independent(rows)
    return spread & ~aligned(rows, u, top=top), spread & ~aligned(deviations**2, u)


def split_spread(gram, gram_rest, rigid, lam: float):
    """min(lambda sqrt(G), R + lambda sqrt(H)): Azuma-Hoeffding over every node, or the split (claim
    numerics.error_model: the nodes of R, the lanes' final merges, rigorously, Azuma over the rest, H); both are
    fixed by the row before its roundings, so the smaller holds with the same probability."""
    return np.minimum(lam * np.sqrt(gram), rigid + lam * np.sqrt(gram_rest))


def error_bounds(rows: np.ndarray, lanes: int, u: float, lam: float | None, depth: int | None = None,
                 state: _Moments | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(e_m, e_M2) per row: |mean_hat - mean| <= e_m and |M2_hat - M2| <= e_M2. With ``lam``: with
    probability >= 1 - 2 exp(-lambda^2/2) each under the mean-independence model, u c2 :func:`split_spread`; without
    (None): the first-order worst case over the same nodes, u c2 L, for any correlation of the roundings. Both plus
    the float64 emulation's distance from the exact value (the algorithm's float32 constants); c2 =
    (1 + gamma_{D+2})^2 the allowance for the coefficients' own O(u) error (D the depth, default d - 1).
    ``rows``: float64 values; ``state``: their :func:`row_moments`, if already computed."""
    from proofs.probabilistic import gamma

    width = rows.shape[-1]
    state = row_moments(rows, lanes, u) if state is None else state
    gmm, _, g22, l_m, l_2, hmm, _, h22, r_m, r_2 = state.errors
    mean = np.mean(rows, axis=-1)
    m2 = np.sum((rows - mean[..., None]) ** 2, axis=-1)
    allowance = u * (1 + gamma((width - 1 if depth is None else depth) + 2, u)) ** 2
    if lam is None:
        spread_m, spread_2 = l_m, l_2
    else:
        spread_m, spread_2 = split_spread(gmm, hmm, r_m, lam), split_spread(g22, h22, r_2, lam)
    return allowance * spread_m + np.abs(state.m - mean), allowance * spread_2 + np.abs(state.m2 - m2)
