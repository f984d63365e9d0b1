"""The gpu placement: GPT-2's BPE on a CUDA device, the ids into the caller's CUDA tensor. Without
a device, what is refused and why; with one (and torch), the gate's strings, exact."""

from __future__ import annotations

import re

import numpy as np
import pytest

import outboard
from outboard import _core, errors
from outboard.bench import gate
from outboard.offload import OffloadTokenizer


def _torch_cuda() -> object:
    why = _core.cuda_usable()
    if why is not None:
        pytest.skip(f"no CUDA device for the gpu placement: {why}")
    torch = pytest.importorskip("torch", reason="the gpu placement's tests hand it torch CUDA tensors")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


def test_the_gpu_placement_needs_memory_of_the_callers_for_the_ids() -> None:
    with pytest.raises(errors.InvalidArgument, match="pass output=<a 1-D int32 CUDA tensor>"):
        OffloadTokenizer(None, "gpt2", placement="gpu")


def test_without_a_device_the_gpu_placement_says_why() -> None:
    why = _core.cuda_usable()
    if why is None:
        pytest.skip("a CUDA device is usable here")
    with pytest.raises(errors.Unsupported, match=re.escape(why.split(":")[0])):
        OffloadTokenizer(None, "gpt2", placement="gpu", output=np.empty(16, np.int32))


def test_other_vocabularies_are_refused_naming_why() -> None:
    with pytest.raises(errors.Unsupported, match="GPT-2's byte-level BPE"):
        _core.GpuTokenizer.create(outboard.Tokenizer.bert_base_uncased()._core)


def test_the_gates_strings_get_the_cpu_tokenizers_ids_on_the_gpu() -> None:
    torch = _torch_cuda()
    output = torch.empty(1 << 24, dtype=torch.int32, device="cuda")
    gpu = OffloadTokenizer(None, "gpt2", placement="gpu", output=output)
    cpu = outboard.Tokenizer.gpt2()
    for name, texts in gate.strings("gpt2", every=64).items():
        for start in range(0, len(texts), 4096):
            chunk = texts[start:start + 4096]
            batch = gpu.encode_batch(chunk)
            ids, offsets = cpu.encode_batch(chunk, flat=True)
            assert np.array_equal(batch.offsets, offsets), name
            assert np.array_equal(batch.ids.cpu().numpy(), ids), name
    assert batch.placement == "gpu" and batch.stages["kernels"] > 0


def test_a_batch_over_the_output_fails_naming_both_counts() -> None:
    torch = _torch_cuda()
    gpu = OffloadTokenizer(None, "gpt2", placement="gpu", output=torch.empty(4, dtype=torch.int32, device="cuda"))
    with pytest.raises(errors.TooBig, match="makes 6 ids; the output holds 4"):
        gpu.encode_batch(["one two three four five six"])
    with pytest.raises(errors.InvalidArgument, match=re.escape("contains the special token '<|endoftext|>'")):
        gpu.encode_batch(["a <|endoftext|>"])
