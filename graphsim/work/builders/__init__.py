"""Per-architecture builders: config.json → `ModelSpec`. The registry maps architectures to them."""
