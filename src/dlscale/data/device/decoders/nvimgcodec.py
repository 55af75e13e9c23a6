"""NVIDIA's nvImageCodec: a batch of JPEGs decoded on the GPU's hardware JPEG engines where the GPU has them
(A100, H100, H200: its HW_GPU_ONLY backend, which leaves the SMs to the training step), by nvJPEG's CUDA decode
elsewhere, or on the CPU (libjpeg-turbo: its CPU_ONLY backend, what the tests on a machine without a GPU run).

It decodes only a region of an image where asked: the training crop (decode(files, regions)), so the device
path's crop comes out of the decoder and is only resized after it. Optional: `pip install 'dlscale[gpu]'`
(nvidia-nvimgcodec-cu13 and nvidia-nvjpeg; for CUDA 12 nvidia-nvimgcodec-cu12 and nvidia-nvjpeg-cu12).

A file it cannot decode comes back as None from its batched call (it never raises for one), and the CPU path
takes it. On CUDA the decode is ordered on the caller's current stream, and the images are allocated by
nvImageCodec and handed over through DLPack.
"""

from __future__ import annotations

import importlib
import io
import os

import numpy as np
import torch
from PIL import Image

INSTALL = ("pip install 'dlscale[gpu]' (nvidia-nvimgcodec-cu13 and nvidia-nvjpeg; for CUDA 12: "
           "nvidia-nvimgcodec-cu12 and nvidia-nvjpeg-cu12)")


def _module():
    # Its per-file warnings (a file it could not decode) would flood a run's output: the CPU path names the file.
    os.environ.setdefault("PYNVIMGCODEC_VERBOSITY", "1")
    return importlib.import_module("nvidia.nvimgcodec")


class NvimgcodecDecoder:
    name = "nvimgcodec"
    regions = True
    """decode() takes each file's region (the training crop) and decodes only that."""

    def __init__(self, device: torch.device | str = "cuda"):
        self.device = torch.device(device)
        codec = self.codec = _module()
        if self.device.type == "cuda":
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            backends = [codec.Backend(kind) for kind in (codec.BackendKind.HW_GPU_ONLY, codec.BackendKind.GPU_ONLY,
                                                         codec.BackendKind.HYBRID_CPU_GPU)]
            self.decoder = codec.Decoder(device_id=index, backends=backends)
        else:
            self.decoder = codec.Decoder(device_id=codec.NVIMGCODEC_DEVICE_CPU_ONLY,
                                         backends=[codec.Backend(codec.BackendKind.CPU_ONLY)], max_num_cpu_threads=1)
        self.params = codec.DecodeParams(color_spec=codec.ColorSpec.SRGB, apply_exif_orientation=False)

    @staticmethod
    def unavailable(device: torch.device | None) -> str | None:
        """Why this decoder cannot decode the device path on device (None when it can): on a CUDA device, the
        module imported and a decoder made there. Its CPU backend is no device path: what the tests on a machine
        without a GPU run (NvimgcodecDecoder("cpu"), data.decoder=nvimgcodec with batches on the CPU device)."""
        try:
            _module()
        except ModuleNotFoundError:
            return f"nvImageCodec is not installed: {INSTALL}"
        except Exception as error:  # noqa: BLE001 - a wheel for another Python or platform
            return f"nvImageCodec cannot be imported ({' '.join(str(error).split())[:200]}): {INSTALL}"
        if device is None or device.type != "cuda":
            where = "the batches stay on the host" if device is None else f"this run's device is {device.type}"
            return f"nvImageCodec decodes on a CUDA device, and {where}"
        try:  # one small JPEG: a library that finds no nvJPEG makes a decoder that then decodes nothing
            buffer = io.BytesIO()
            Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(buffer, "JPEG")
            decoded = NvimgcodecDecoder(device).decode([torch.frombuffer(bytearray(buffer.getvalue()),
                                                                         dtype=torch.uint8)])
        except Exception as error:  # noqa: BLE001 - no driver, a CUDA the wheel was not built for, ...
            return f"nvImageCodec cannot decode on {device} ({' '.join(str(error).split())[:200]}): {INSTALL}"
        if decoded[0] is None:
            return f"nvImageCodec decoded no JPEG on {device} (is nvJPEG's wheel installed?): {INSTALL}"
        return None

    def decode(self, files: list[torch.Tensor],
               regions: list[tuple[int, int, int, int]] | None = None) -> list[torch.Tensor | None]:
        """Per file a uint8 (3, h, w) image on the device (its region (left, top, width, height) where given, the
        whole image otherwise), or None where the file could not be decoded."""
        streams = []
        for k, file in enumerate(files):
            stream = self.codec.CodeStream(file.numpy())
            if regions is not None:
                left, top, width, height = regions[k]
                stream = stream.get_sub_code_stream(region=self.codec.Region(top, left, top + height, left + width))
            streams.append(stream)
        if self.device.type == "cuda":
            decoded = self.decoder.decode(streams, params=self.params,
                                          cuda_stream=torch.cuda.current_stream(self.device).cuda_stream)
        else:
            decoded = self.decoder.decode(streams, params=self.params)
        return [None if image is None else self._tensor(image) for image in decoded]

    def _tensor(self, image) -> torch.Tensor | None:
        if image.ndim != 3 or image.shape[2] != 3:  # what nvJPEG is asked for: three channels
            return None
        if self.device.type == "cuda":
            return torch.from_dlpack(image).permute(2, 0, 1)
        return torch.from_numpy(np.asarray(image.cpu())).permute(2, 0, 1)
