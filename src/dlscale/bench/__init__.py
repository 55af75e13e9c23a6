"""Benchmarks: synthetic (`dlscale bench`: training throughput on synthetic data, the Horovod/BlueFog
protocol), curve (`--batch-size 16,32,64`: the step time per batch size), cuda_graphs (`--cuda-graphs`:
the whole train step captured in a CUDA graph and replayed), loader (`dlscale loader`: the input pipeline
alone) and comm (`dlscale comm`: collectives per message size, nccl-tests' table)."""
