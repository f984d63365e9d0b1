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

from dlpack_support import dlpack


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
    with pytest.raises(errors.Unsupported, match="byte-level BPE with another pattern"):
        _core.GpuTokenizer.create(outboard.Tokenizer.cl100k_base()._core)


@pytest.mark.parametrize("model, family", [("gpt2", "gpt2"), ("bert-base-uncased", "bert")])
def test_the_gates_strings_get_the_cpu_tokenizers_ids_on_the_gpu(model: str, family: str) -> None:
    torch = _torch_cuda()
    output = torch.empty(1 << 24, dtype=torch.int32, device="cuda")
    gpu = OffloadTokenizer(None, model, placement="gpu", output=output)
    cpu = gpu.local
    for name, texts in gate.strings(family, every=64).items():
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


class _FakeCudaTensor:
    """A unit test's fake of a torch CUDA tensor: what _output_memory reads, and a DLPack capsule that
    names CUDA memory (at an address nothing may touch)."""

    dtype = "torch.int32"

    def __init__(self, ids: int) -> None:
        self._ids = ids
        self._capsule, self._keep = dlpack(0x7F0000000000, 2, ids)
        self._keep[0].dtype.code = 0  # DLPack's int, 32 bits

    def __dlpack__(self, **_: object) -> object:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)

    def dim(self) -> int:
        return 1

    def is_contiguous(self) -> bool:
        return True

    def numel(self) -> int:
        return self._ids


def test_the_agent_writes_ids_into_a_cuda_tensor_or_says_why_not(client: outboard.Client) -> None:
    """A CUDA tensor as output is registered as GPU memory for the agent's one-sided writes: where this
    UCX carries none, refused naming why (with one, the GPU machine's test below)."""
    if _core.transport_carries_gpu_memory():
        pytest.skip("this UCX carries GPU memory: the refusal is for a UCX without CUDA")
    with pytest.raises(errors.Unsupported, match="GPU memory region of 4096 B: this UCX has no CUDA memory"):
        client.tokenizer("gpt2", output=_FakeCudaTensor(1024))
    with pytest.raises(errors.InvalidArgument, match="or a CUDA tensor, not str"):
        client.tokenizer("gpt2", output="ids")
