"""Training: `dlscale train`'s loop and what it is built from.

loop (fit: set-up in one order, epochs, log steps, evaluation, summary), step (StepParts and train_step,
the one step that train, bench and profile run), replica (the model placed, wrapped by its strategy,
compiled, with its optimizer), plan (per-rank and global batch, steps, peak LR, warm-up), optim (SGD, LR
scaling, the weight-decay split, the loss), schedule (LR schedules), state and resume_check (what a
checkpoint saves and which settings a resuming command may change), checkpoint (atomic, verified,
rotated files), signals (SIGTERM and SIGUSR1 read at step boundaries), raport (NVIDIA ConvNets' record).
"""
