"""dlscale: distributed ResNet training and benchmarking on torch.distributed."""

__version__ = "0.1.0"
