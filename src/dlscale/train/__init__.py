"""Training building blocks: optimizer and loss (optim), LR schedules (schedule),
atomic checkpoints and RNG state (checkpoint), preemption signals (signals)."""
