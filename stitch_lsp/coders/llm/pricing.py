"""What a job's tokens cost, from Anthropic's published per-million-token prices.

Cache writes (5-minute TTL) cost 1.25x the input price and cache reads 0.1x.
Unknown models cost ``None`` (shown as "cost unknown"), never a guess.
"""

from __future__ import annotations

from attrs import frozen

from stitch_lsp.verdict import Usage

CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.10


@frozen
class Price:
    input_per_mtok: float
    output_per_mtok: float


# Longest matching prefix wins; dated snapshots ("claude-sonnet-4-5-20250929") match their alias.
PRICES: dict[str, Price] = {
    "claude-opus-4-6": Price(5.0, 25.0),
    "claude-opus-4-5": Price(5.0, 25.0),
    "claude-opus-4-1": Price(15.0, 75.0),
    "claude-opus-4-0": Price(15.0, 75.0),
    "claude-opus-4-2025": Price(15.0, 75.0),
    "claude-sonnet-4-6": Price(3.0, 15.0),
    "claude-sonnet-4-5": Price(3.0, 15.0),
    "claude-sonnet-4-0": Price(3.0, 15.0),
    "claude-sonnet-4-2025": Price(3.0, 15.0),
    "claude-haiku-4-5": Price(1.0, 5.0),
    "claude-3-7-sonnet": Price(3.0, 15.0),
    "claude-3-5-haiku": Price(0.8, 4.0),
    "claude-3-haiku": Price(0.25, 1.25),
}


def price_for(model: str) -> Price | None:
    matches = [prefix for prefix in PRICES if model.startswith(prefix)]
    return PRICES[max(matches, key=len)] if matches else None


def cost_usd(model: str, usage: Usage) -> float | None:
    price = price_for(model)
    if price is None:
        return None
    per_token_in = price.input_per_mtok / 1e6
    return (
        usage.input_tokens * per_token_in
        + usage.cache_write_tokens * per_token_in * CACHE_WRITE_FACTOR
        + usage.cache_read_tokens * per_token_in * CACHE_READ_FACTOR
        + usage.output_tokens * price.output_per_mtok / 1e6
    )


def total_tokens(usage: Usage) -> int:
    """Every token the API processed for the job: what the per-job budget limits."""
    return usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens + usage.output_tokens


def add_usage(total: Usage, part: Usage) -> Usage:
    return Usage(
        input_tokens=total.input_tokens + part.input_tokens,
        output_tokens=total.output_tokens + part.output_tokens,
        cache_read_tokens=total.cache_read_tokens + part.cache_read_tokens,
        cache_write_tokens=total.cache_write_tokens + part.cache_write_tokens,
        cost_usd=total.cost_usd + part.cost_usd,
        rounds=total.rounds + part.rounds,
    )
