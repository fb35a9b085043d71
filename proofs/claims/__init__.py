"""Every claim, by id: ``CLAIMS[id]`` is a :class:`proofs.claims.base.Claim` (docs/ARCHITECTURE.md)."""

from __future__ import annotations

from proofs.claims import (
    batchnorm,
    blocks,
    contracts,
    dropout,
    fused,
    groupnorm,
    invariance,
    layernorm,
    numerics,
    quantization,
    rmsnorm,
    second_order,
)
from proofs.claims.base import VERDICTS, Claim

CLAIMS: dict[str, Claim] = {
    claim.id: claim
    for family in (layernorm, rmsnorm, dropout, numerics, contracts, fused, groupnorm, invariance, blocks, batchnorm,
                   quantization, second_order)
    for claim in family.CLAIMS
}

__all__ = ["CLAIMS", "VERDICTS", "Claim"]
