"""Vocabulary cache: verified by sha256, clear errors when missing or corrupt."""

from __future__ import annotations

import pytest

from outboard import errors, vocab


def test_missing_vocabulary_says_what_to_fetch(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OUTBOARD_CACHE_DIR", str(tmp_path))
    with pytest.raises(errors.NotFound) as e:
        vocab.path("gpt2")
    assert "outboard vocab fetch" in str(e.value) and "openai-whisper" in str(e.value)


def test_corrupt_cached_vocabulary_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OUTBOARD_CACHE_DIR", str(tmp_path))
    (tmp_path / "gpt2.tiktoken").write_text("IQ== 0\n")
    with pytest.raises(errors.IoError) as e:
        vocab.path("gpt2")
    assert "sha256" in str(e.value)


def test_unknown_vocabulary(tmp_path) -> None:
    with pytest.raises(errors.NotFound):
        vocab.fetch("gpt5")


def test_cached_files_match_their_pins() -> None:
    for name in vocab.SOURCES:
        assert vocab.path(name).stat().st_size > 100_000
