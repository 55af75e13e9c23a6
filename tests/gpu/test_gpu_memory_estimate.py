"""The memory estimate on a GPU (models/memory.py): its lower bound is below what a training step allocates, and
close enough to mean something; what cannot fit is refused before anything is allocated on the device."""

import pytest
import torch
from gpu_helpers import tiny_setup, train_losses

from dlscale import cli
from dlscale.models.memory import footprint

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:Unable to enable fault handler")]


@pytest.mark.parametrize("precision", ["fp32", "amp_bf16"])
def test_the_lower_bound_is_below_a_steps_peak_and_within_a_factor_of_it(precision):
    """ResNet-50 at batch 64, 224 px: three steps' peak allocation (torch's caching allocator counts every
    tensor) against the bound. A bound above the peak would refuse runs that fit; one far below it would let
    through runs that cannot fit."""
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(0)
    _, setup = tiny_setup(model="resnet50", width=64, image_size=224, batch_size=64, num_classes=1000,
                          pool_batches=1, precision=precision)
    train_losses(setup, 3)
    torch.cuda.synchronize(0)
    peak = torch.cuda.max_memory_allocated(0)
    pool_bytes = 64 * 3 * 224 * 224 * 4
    bound = footprint("resnet50", num_classes=1000, width=64, batch=64, image_size=224).training_bytes(
        amp=precision.startswith("amp")) + pool_bytes
    print(f"{precision}: bound {bound / 2**30:.2f} GiB, peak {peak / 2**30:.2f} GiB ({peak / bound:.2f}x)")
    assert bound <= peak <= 4 * bound


def test_what_cannot_fit_is_refused_before_the_device_holds_anything(tmp_path, capsys):
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated(0)
    code = cli.main(["bench", "--model", "resnet152", "--width", "1024", "--batch-size", "256", "--device", "cuda",
                     "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "needs at least" in err and torch.cuda.get_device_name(0) in err and "GiB" in err
    assert torch.cuda.memory_allocated(0) == before
