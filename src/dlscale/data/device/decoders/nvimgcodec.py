"""NVIDIA's nvImageCodec: a batch of JPEGs decoded on the GPU's hardware JPEG engines where the GPU has them
(A100, H100, H200: its HW_GPU_ONLY backend, which leaves the SMs to the training step), by nvJPEG's CUDA decode
elsewhere, or on the CPU (libjpeg-turbo: its CPU_ONLY backend, on the CPU device).

It decodes only a region of an image where asked: the training crop (decode(files, regions)), so the device
path's crop comes out of the decoder and is only resized after it. Optional: `pip install 'dlscale[gpu]'`
(nvidia-nvimgcodec-cu13 and nvidia-nvjpeg; for CUDA 12 nvidia-nvimgcodec-cu12 and nvidia-nvjpeg-cu12).

Each backend is a decoder of its own, tried in turn (BACKENDS): a file the first refuses (hardware that cannot
take its sampling or size) goes to the next, as one decoder of several backends would pass it on, and the
decoder counts what each backend decoded (decoded_by): whether the JPEG engines or the SMs decoded a run's files
is then a figure of the run. A file no backend decodes comes back as None (nvImageCodec never raises for one),
and the CPU path takes it. On CUDA the decode is ordered on the caller's current stream, and the images are
allocated by nvImageCodec and handed over through DLPack.
"""

from __future__ import annotations

import importlib
import io
import os

import numpy as np
import torch
from PIL import Image

from dlscale.errors import one_line

INSTALL = ("pip install 'dlscale[gpu]' (nvidia-nvimgcodec-cu13 and nvidia-nvjpeg; for CUDA 12: "
           "nvidia-nvimgcodec-cu12 and nvidia-nvjpeg-cu12)")

BACKENDS = {"cuda": ("hw_gpu_only", "gpu_only", "hybrid_cpu_gpu"), "cpu": ("cpu_only",)}
"""The backends tried in turn per device type, by nvImageCodec's BackendKind names in lower case: the hardware
JPEG engines, nvJPEG's CUDA decode, its hybrid decode (Huffman on the CPU, the rest on the GPU); libjpeg-turbo on
the CPU device."""


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
        self.codec = _module()
        kinds = BACKENDS["cuda" if self.device.type == "cuda" else "cpu"]
        self.decoders = [(kind, self._decoder(kind)) for kind in kinds]
        self.decoded_by = dict.fromkeys(kinds, 0)
        """Files each backend decoded, since the decoder was made."""
        self.params = self.codec.DecodeParams(color_spec=self.codec.ColorSpec.SRGB, apply_exif_orientation=False)

    def _decoder(self, kind: str):
        codec = self.codec
        backend = codec.Backend(getattr(codec.BackendKind, kind.upper()))
        if self.device.type == "cuda":
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            return codec.Decoder(device_id=index, backends=[backend])
        return codec.Decoder(device_id=codec.NVIMGCODEC_DEVICE_CPU_ONLY, backends=[backend], max_num_cpu_threads=1)

    @staticmethod
    def unavailable(device: torch.device | None) -> str | None:
        """Why this decoder cannot decode the device path on device (None when it can): on a CUDA device, the
        module imported and a decoder made there that decodes a small JPEG. What data.decoder=auto asks; named,
        it also runs on the CPU device (unavailable_named)."""
        why = _import_problem()
        if why is None and (device is None or device.type != "cuda"):
            where = "the batches stay on the host" if device is None else f"this run's device is {device.type}"
            why = f"nvImageCodec decodes on a CUDA device, and {where}"
        return why or _decode_problem(device)

    @staticmethod
    def unavailable_named(device: torch.device | None) -> str | None:
        """As unavailable, for data.decoder=nvimgcodec named: on the CPU device its CPU backend decodes (what the
        tests and the GPU campaign's CPU rehearsal run), which auto never takes."""
        if device is None or device.type != "cpu":
            return NvimgcodecDecoder.unavailable(device)
        return _import_problem() or _decode_problem(device)

    def decode(self, files: list[torch.Tensor],
               regions: list[tuple[int, int, int, int]] | None = None) -> list[torch.Tensor | None]:
        """Per file a uint8 (3, h, w) image on the device (its region (left, top, width, height) where given, the
        whole image otherwise), or None where no backend could decode the file."""
        streams = []
        for k, file in enumerate(files):
            stream = self.codec.CodeStream(file.numpy())
            if regions is not None:
                left, top, width, height = regions[k]
                stream = stream.get_sub_code_stream(region=self.codec.Region(top, left, top + height, left + width))
            streams.append(stream)
        return in_turn([(kind, self._decode_with(decoder)) for kind, decoder in self.decoders], streams,
                       self.decoded_by, self._tensor)

    def _decode_with(self, decoder):
        def decode(streams: list) -> list:
            if self.device.type == "cuda":
                return decoder.decode(streams, params=self.params,
                                      cuda_stream=torch.cuda.current_stream(self.device).cuda_stream)
            return decoder.decode(streams, params=self.params)
        return decode

    def _tensor(self, image) -> torch.Tensor | None:
        if image.ndim != 3 or image.shape[2] != 3:  # what nvJPEG is asked for: three channels
            return None
        if self.device.type == "cuda":
            return torch.from_dlpack(image).permute(2, 0, 1)
        return torch.from_numpy(np.asarray(image.cpu())).permute(2, 0, 1)


def _import_problem() -> str | None:
    try:
        _module()
    except ModuleNotFoundError:
        return f"nvImageCodec is not installed: {INSTALL}"
    except Exception as error:  # noqa: BLE001 - a wheel for another Python or platform
        return f"nvImageCodec cannot be imported ({one_line(error, 200)}): {INSTALL}"
    return None


def _decode_problem(device: torch.device) -> str | None:
    """Why a decoder on device decodes no small JPEG (a library that finds no nvJPEG makes a decoder that then
    decodes nothing), or None."""
    try:
        buffer = io.BytesIO()
        Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(buffer, "JPEG")
        decoded = NvimgcodecDecoder(device).decode([torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)])
    except Exception as error:  # noqa: BLE001 - no driver, a CUDA the wheel was not built for, ...
        return f"nvImageCodec cannot decode on {device} ({one_line(error, 200)}): {INSTALL}"
    if decoded[0] is None:
        return f"nvImageCodec decoded no JPEG on {device} (is nvJPEG's wheel installed?): {INSTALL}"
    return None


def in_turn(backends: list[tuple[str, object]], items: list, counts: dict[str, int], convert) -> list:
    """Each item decoded by the first backend that takes it: backends are (name, decode) pairs tried in order,
    each given only what those before it returned None for; convert(decoded) is the item's result (None where it
    is not one: not counted). counts[name] grows by the results each backend made."""
    results: list = [None] * len(items)
    left = list(range(len(items)))
    for name, decode in backends:
        if not left:
            break
        decoded = decode([items[k] for k in left])
        for k, image in zip(left, decoded, strict=True):
            if image is not None:
                results[k] = convert(image)
                counts[name] += results[k] is not None
        left = [k for k, image in zip(left, decoded, strict=True) if image is None]
    return results
